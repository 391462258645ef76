"""Warm start vs cold start of the real sglang 0.5.23 on CPU (the test bed, tests/sglang_cpu: its venv and tiny
models, STANDALONE speculation with the draft that copies the target, the lab cpu-1's flags), on this machine,
without Ansible: the server's time from launch to what the admission gate needs (/health_generate, then the
gate's four greedy prompts answered), cold (an empty SGLANG_CACHE_DIR) vs warm (the directory packed, verified
and unpacked by plugins/module_utils/warm_cache.py, as ddtree.fleet.warm_cache does), in pairs in one run.
Inductor compiles the torch.compile'd STANDALONE helper to C++ (needs g++; the test bed's TORCH_COMPILE_DISABLE
is switched off here); Triton runs interpreted on CPU and caches nothing. Through the role, the same start is timed by
ddtree_service itself (start_seconds in the report: from the start to the admission gate passed).
    python3 benchmarks/warm_start_cpu.py [PAIRS]     (DDTREE_SGLANG_CPU: the test bed, default the cache's)
Writes benchmarks/results/warm_start_cpu.json."""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three prime numbers:", "Translate to German: good morning"]


def bed():
    d = os.environ.get("DDTREE_SGLANG_CPU") or sorted(p for p in glob.glob("/var/cache/ddtree-fleet/sglang-cpu-*") if os.path.isdir(p))[-1]
    return d, os.path.join(d, "venv")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, doc):
    req = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def start_to_gate(venv, models, cache, home):
    port = free_port()
    argv = [os.path.join(venv, "bin", "python"), "-m", "sglang.launch_server", "--model-path", models + "/target",
            "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", models + "/draft-good",
            "--speculative-num-draft-tokens", "4", "--speculative-eagle-topk", "1", "--speculative-num-steps", "3",
            "--prefill-attention-backend", "intel_amx", "--decode-attention-backend", "intel_amx", "--device", "cpu",
            "--skip-server-warmup", "--max-total-tokens", "4096", "--context-length", "512", "--dtype", "float32",
            "--max-running-requests", "4", "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, HOME=home, SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1", TORCH_COMPILE_DISABLE="0",
               SGLANG_CACHE_DIR=cache, TRITON_CACHE_DIR=cache + "/triton", TORCHINDUCTOR_CACHE_DIR=cache + "/inductor",
               FLASHINFER_WORKSPACE_BASE=cache, CUDA_CACHE_PATH=cache + "/nv", XDG_CACHE_HOME=home + "/.cache")
    log = open(os.path.join(home, "server-%d.log" % port), "w")
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit("the server exited: see %s" % log.name)
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health_generate" % port, timeout=60) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        healthy = time.time() - t0
        outs = [post("http://127.0.0.1:%d/generate" % port, {"text": p, "sampling_params": {
            "temperature": 0, "max_new_tokens": 32, "ignore_eos": True}})["output_ids"] for p in PROMPTS]
        return {"healthy_s": round(healthy, 1), "gate_s": round(time.time() - t0, 1), "outputs": outs}
    finally:
        proc.terminate()
        proc.wait(timeout=120)
        log.close()


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    d, venv = bed()
    python, vdigest = wc.venv_digest(venv)
    key = wc.make_key(wc.cpu_arch(), "none", "", python, vdigest, wc.patch_digest(venv, ".ddtree/sglang-patch.json"))
    work = tempfile.mkdtemp(prefix="warm-cpu-")
    store, cache = os.path.join(work, "warm"), os.path.join(work, "warm", "caches", wc.key_id(key))
    runs = []
    for i in range(1, pairs + 1):
        shutil.rmtree(store, ignore_errors=True)
        os.makedirs(cache)
        home = tempfile.mkdtemp(dir=work)
        cold = start_to_gate(venv, d + "/models", cache, home)
        index = wc.pack(store, cache, key)
        shutil.rmtree(cache)
        t0 = time.time()
        files = wc.install(os.path.join(store, "artifacts", index["sha256"] + ".tar.gz"), index, key, cache, 10 * 2 ** 30)
        restore = time.time() - t0
        warm = start_to_gate(venv, d + "/models", cache, tempfile.mkdtemp(dir=work))
        row = {"pair": i, "cold_gate_s": cold["gate_s"], "warm_gate_s": warm["gate_s"], "cold_healthy_s": cold["healthy_s"],
               "warm_healthy_s": warm["healthy_s"], "warm_over_cold": round(warm["gate_s"] / cold["gate_s"], 3),
               "restore_s": round(restore, 2), "files": files, "artifact_bytes": index["size"],
               "same_outputs": cold["outputs"] == warm["outputs"]}
        runs.append(row)
        print(json.dumps(row), flush=True)
    doc = {"where": "this machine (%d CPUs), the real sglang 0.5.23 CPU test bed" % os.cpu_count(), "key": key,
           "date": time.strftime("%Y-%m-%d"), "runs": runs}
    out = os.path.join(ROOT, "benchmarks", "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "warm_start_cpu.json"), "w") as f:
        json.dump(doc, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
