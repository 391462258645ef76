#!/usr/bin/env bash
# nvidia_facts benchmark on the replay double, one run per replay set, against the baseline of
# the same nvidia-smi calls run bare (same run, same machine). Per-call latency defaults to the
# live H200 figure (benchmarks/recorded/nvidia_facts-h200-live.json: 70.6 ms for 2 calls).
#   bash benchmarks/nvidia_facts.sh [LATENCY_S]
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
ensure_venv
latency=${1:-0.035}
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
etc=$(mktemp -d)
trap 'rm -rf "$etc"' EXIT
export NVIDIA_SMI_REPLAY_ETC=$etc NVIDIA_SMI_REPLAY_DATA=$DDTREE_ROOT/tests/doubles/replays
echo "$latency" >"$etc/latency"
printf '%-16s %6s %10s %12s %8s %7s %10s\n' replay calls facts_s own_calls_s ratio +health health/facts
for set in $(ls "$NVIDIA_SMI_REPLAY_DATA" | grep -vx health); do
  echo "$set" >"$etc/set"
  python "$DDTREE_ROOT/benchmarks/nvidia_facts_bench.py" --nvidia-smi "$DDTREE_ROOT/tests/doubles/nvidia-smi" \
    --runs 7 --json "$out/nvidia_facts-$set.json" >/dev/null
  python - "$out/nvidia_facts-$set.json" "$set" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%-16s %6d %10.4f %12.4f %8.3f %7d %10.3f" % (sys.argv[2], d["nvidia_smi_calls"], d["facts_median_s"], d["own_calls_median_s"],
                                                   d["facts_vs_own_calls"], d["health_calls"], d["health_vs_facts"]))
PY
done
