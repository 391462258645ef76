"""Benchmark: nvidia_facts' gather() against the raw nvidia-smi calls it needs, in the same run.

Reports medians and ratios (these machines are noisy, absolute times are not comparable):
  facts_vs_own_calls  gather() time / time of its two nvidia-smi calls run bare -> parsing overhead
  facts_vs_q_dump     gather() time / `nvidia-smi -q` + `topo -m` (what tools that parse the full
                      dump pay for the same facts)
  nvidia_smi_calls    calls gather() made (counted by a wrapper that logs then runs the real binary)
  health_calls        further calls the GPU health facts make (gather_health: -q, nvlink -s on NVLink)
  health_vs_facts     (gather() + gather_health()) time / gather() time -> what the health facts cost

  python3 benchmarks/nvidia_facts_bench.py [--nvidia-smi PATH] [--runs N] [--json OUT]
Against the replay double, set NVIDIA_SMI_REPLAY_ETC/_DATA and a latency file (scripts in
benchmarks/README.md); on a GPU host it uses the real nvidia-smi.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.ddtree.fleet.plugins.modules import nvidia_facts  # noqa: E402


def median_time(fn, runs):
    times = []
    for _run in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvidia-smi", default=shutil.which("nvidia-smi"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args()
    smi = args.nvidia_smi
    if not smi:
        sys.exit("nvidia-smi not found: pass --nvidia-smi")

    tmp = Path(tempfile.mkdtemp())
    log = tmp / "calls.log"
    wrapper = tmp / "nvidia-smi"
    wrapper.write_text('#!/bin/sh\necho "$*" >> %s\nexec %s "$@"\n' % (log, smi))
    wrapper.chmod(0o755)

    def facts():
        return nvidia_facts.gather(nvidia_facts.NvidiaSmi(str(wrapper), 60))

    result, error = facts()
    if error:
        sys.exit("gather failed: %s" % error)
    calls = len(log.read_text().splitlines())

    env = dict(os.environ, LC_ALL="C")

    def raw(*argv_list):
        for argv in argv_list:
            subprocess.run([smi] + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    query = ["--query-gpu=" + ",".join(nvidia_facts.nvidia.QUERY_FIELDS), "--format=csv,noheader,nounits"]
    health = nvidia_facts.gather_health(nvidia_facts.NvidiaSmi(str(wrapper), 60), result)
    health_calls = len(log.read_text().splitlines()) - calls

    def facts_and_health():
        smi_ = nvidia_facts.NvidiaSmi(str(wrapper), 60)
        facts_, _err = nvidia_facts.gather(smi_)
        nvidia_facts.gather_health(smi_, facts_)

    t_facts = median_time(facts, args.runs)
    t_health = median_time(facts_and_health, args.runs)
    t_own = median_time(lambda: raw(query, ["topo", "-m"]), args.runs)
    q_ok = subprocess.run([smi, "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode == 0
    t_q = median_time(lambda: raw(["-q"], ["topo", "-m"]), args.runs) if q_ok else None
    out = {
        "nvidia_smi": smi,
        "family": result["family"],
        "gpu_count": result["gpu_count"],
        "nvidia_smi_calls": calls,
        "health_read": health["read"],
        "health_calls": health_calls,
        "facts_with_health_median_s": round(t_health, 4),
        "health_vs_facts": round(t_health / t_facts, 3),
        "runs": args.runs,
        "facts_median_s": round(t_facts, 4),
        "own_calls_median_s": round(t_own, 4),
        "q_dump_median_s": round(t_q, 4) if t_q else None,
        "facts_vs_own_calls": round(t_facts / t_own, 3),
        "facts_vs_q_dump": round(t_facts / t_q, 3) if t_q else None,
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
