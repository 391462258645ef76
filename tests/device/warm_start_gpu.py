"""Warm start on a real GPU (the lent H200): real Triton and Inductor JIT-compile a workload into one cache
directory laid out as sglang 0.5.23 lays out SGLANG_CACHE_DIR (triton/, inductor/, nv/). The cache is packed,
verified and unpacked with the collection's own code (plugins/module_utils/warm_cache.py, which
ddtree.fleet.warm_cache runs), and the workload's time to its first results is measured cold (an empty
cache) and warm (the cache unpacked from the artefact), in pairs in the same run. sglang itself is not
installed there (7 GB with its wheels, nothing can be fetched there); torch and triton are the host's own.
It says which GPU it ran on (the kind may be an H100 or an H200). The key is computed from the real GPU (nvidia-smi), driver, nvcc and venv records.
    OUT=/some/dir python3 tests/device/warm_start_gpu.py [PAIRS]
Writes $OUT/warm_start_gpu.json."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc  # noqa: E402

WORKLOAD = r'''
import time, torch, triton, triton.language as tl
t0 = time.time()

@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + tl.load(y_ptr + offs, mask=m), mask=m)

class Block(torch.nn.Module):
    def __init__(self, d=1024, h=16):
        super().__init__()
        self.h, self.ln1, self.ln2 = h, torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

torch.manual_seed(0)
model = torch.nn.Sequential(*[Block() for _ in range(4)]).cuda().to(torch.bfloat16).eval()
fn = torch.compile(model)
sums = []
with torch.no_grad():
    for bs, seq in ((1, 128), (4, 256), (8, 64)):
        x = torch.randn(bs, seq, 1024, device="cuda", dtype=torch.bfloat16)
        sums.append(float(fn(x).float().sum()))
n = 1 << 20
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
for block in (256, 512, 1024):
    out = torch.empty_like(x)
    scaled_add[(triton.cdiv(n, block),)](x, y, out, n, 0.5, BLOCK=block)
    sums.append(float(out.sum()))
torch.cuda.synchronize()
from torch._dynamo.utils import counters
print("RESULT " + __import__("json").dumps({"seconds_in_process": time.time() - t0, "sums": sums,
      "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"], "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
      "torch": torch.__version__, "triton": triton.__version__}))
'''


def run_workload(cache, script, **extra):
    env = dict(os.environ, **extra)
    env.update(SGLANG_CACHE_DIR=cache, TRITON_CACHE_DIR=cache + "/triton",
               TORCHINDUCTOR_CACHE_DIR=cache + "/inductor", CUDA_CACHE_PATH=cache + "/nv")
    t0 = time.time()
    p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit("workload failed:\n" + p.stdout[-2000:] + p.stderr[-4000:])
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    res["wall_s"] = round(wall, 2)
    return res


def gpu_key():
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                       capture_output=True, text=True, check=True).stdout.strip().splitlines()
    name, cc, driver = [x.strip() for x in q[0].split(",")]
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False).stdout
    cuda = nvcc.rsplit("release ", 1)[1].split(",")[0] if "release " in nvcc else ""
    python, venv = wc.venv_digest(sys.prefix)
    key = wc.make_key("sm_" + cc.replace(".", ""), wc.driver_branch(driver), cuda, python, venv, "unpatched")
    return name, driver, key


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    out = os.environ.get("OUT") or "."
    name, driver, key = gpu_key()
    work = tempfile.mkdtemp(prefix="warm-gpu-")
    store, cache = os.path.join(work, "warm"), os.path.join(work, "warm", "caches", wc.key_id(key))
    runs = []
    script = os.path.join(work, "workload.py")  # Triton reads a kernel's source from its file
    with open(script, "w") as f:
        f.write(WORKLOAD)
    for i in range(1, pairs + 1):
        shutil.rmtree(store, ignore_errors=True)
        os.makedirs(cache)
        # what a start costs without compiling at all (torch.compile off: eager), the floor of both
        eager = run_workload(os.path.join(work, "eager-cache"), script, TORCH_COMPILE_DISABLE="1")
        cold = run_workload(cache, script)
        t0 = time.time()
        index = wc.pack(store, cache, key)
        pack_s = time.time() - t0
        shutil.rmtree(cache)
        art = os.path.join(store, "artifacts", index["sha256"] + ".tar.gz")
        t0 = time.time()
        files = wc.install(art, index, key, cache, 100 * 2 ** 30)
        restore_s = time.time() - t0
        warm = run_workload(cache, script)
        same = cold["sums"] == warm["sums"]
        compile_cold, compile_warm = cold["wall_s"] - eager["wall_s"], warm["wall_s"] - eager["wall_s"]
        runs.append({"pair": i, "eager_s": eager["wall_s"], "cold_s": cold["wall_s"], "warm_s": warm["wall_s"],
                     "warm_over_cold": round(warm["wall_s"] / cold["wall_s"], 3),
                     "compile_warm_over_cold": round(compile_warm / compile_cold, 3) if compile_cold > 0 else None,
                     "fxgraph_hits_cold_warm": [cold["fxgraph_cache_hit"], warm["fxgraph_cache_hit"]],
                     "fxgraph_misses_cold_warm": [cold["fxgraph_cache_miss"], warm["fxgraph_cache_miss"]],
                     "restore_s": round(restore_s, 2), "pack_s": round(pack_s, 2), "artifact_bytes": index["size"], "files": files,
                     "same_results": same})
        print("pair %d: eager %.1f s, cold %.1f s, warm %.1f s (restore %.2f s, %d files, %.1f MB), ratio %.3f, same results %s"
              % (i, eager["wall_s"], cold["wall_s"], warm["wall_s"], restore_s, files, index["size"] / 1e6,
                 warm["wall_s"] / cold["wall_s"], same), flush=True)
    # a key mismatch is refused: the same artefact under another arch
    other = dict(key, arch="sm_100")
    try:
        wc.extract(art, other, cache + ".other", 100 * 2 ** 30)
        refused = None
    except wc.Refused as exc:
        refused = str(exc)
    doc = {"gpu": name, "driver": driver, "key": key, "key_id": wc.key_id(key), "torch": cold["torch"], "triton": cold["triton"],
           "runs": runs, "other_arch_refused": refused, "date": time.strftime("%Y-%m-%d"),
           "what_ran": "real Triton + Inductor (torch.compile of 4 transformer blocks at 3 shapes, a @triton.jit kernel at 3 "
                       "block sizes) with the caches under one SGLANG_CACHE_DIR layout; packed, verified and unpacked by "
                       "plugins/module_utils/warm_cache.py; sglang itself not installed on the device"}
    with open(os.path.join(out, "warm_start_gpu.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
