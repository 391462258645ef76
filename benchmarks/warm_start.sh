#!/usr/bin/env bash
# Warm start vs cold start on the real sglang 0.5.23 (the lab's cpu-1: CPU test bed, STANDALONE speculation,
# tests/sglang_cpu), through the production path: site.yml's facts and service stages deploy a new release
# and the role records, per instance, the seconds from the start (after the release switched) to the
# admission gate passed (ddtree_service_status.start_seconds) and how it started (warm / cold (why)).
#   cold: the warm-start store of cpu-1 removed; the server compiles (Inductor builds the torch.compile'd
#         STANDALONE helper to C++: the lab's hosts have g++ from cuda_toolkit's build packages, so the test
#         bed's TORCH_COMPILE_DISABLE is switched off here; Triton runs interpreted on CPU and caches nothing)
#   warm: only the key's cache directory removed; restore verifies and unpacks this host's artefact (what a
#         peer's would be, less the transfer, which benchmarks/venv_stream.sh and model_fetch.sh measure)
# Each pair (cold, then warm) in the same run; the ratio is warm / cold. Needs the lab: scripts/lab up.
# Writes benchmarks/results/warm_start.json.
#   bash benchmarks/warm_start.sh [PAIRS]
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
pairs=${1:-2}
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
cd "$DDTREE_ROOT"
[ -f "$DDTREE_WORK/lab/hosts.yml" ] || die "bench: no lab inventory ($DDTREE_WORK/lab/hosts.yml): run scripts/lab up first"
export DDTREE_REPORT_DIR=$DDTREE_WORK/bench-warm-reports
inv=(-i inventories/lab -i "$DDTREE_WORK/lab/hosts.yml")
adhoc() { ansible cpu-1 "${inv[@]}" -b -m ansible.builtin.shell -a "$1" >/dev/null; }

deploy() { # run-number mode: a new release (its env differs) started and gated, its log kept
  local n=$1 mode=$2
  if [ "$mode" = cold ]; then
    adhoc "rm -rf /opt/ddtree/warm"
  else
    adhoc "rm -rf /opt/ddtree/warm/caches/*"
  fi
  ansible-playbook "${inv[@]}" --limit cpu-1 playbooks/gpu_facts.yml playbooks/service.yml \
    -e "{\"ddtree_service_env\": {\"TORCH_COMPILE_DISABLE\": \"0\", \"DDTREE_BENCH_RUN\": \"$n-$mode-$$\"},
         \"ddtree_service_warm_outside_play\": false}" >"$DDTREE_WORK/bench-warm-$n-$mode.log" 2>&1 \
    || { tail -40 "$DDTREE_WORK/bench-warm-$n-$mode.log" >&2; die "bench: deploy $n ($mode) failed"; }
}

log "bench: $pairs pair(s) of cold and warm starts of the real sglang on cpu-1"
rows=() ratios=()
for i in $(seq 1 "$pairs"); do
  for mode in cold warm; do
    deploy "$i" "$mode"
    f=$DDTREE_WORK/bench-warm-$i-$mode.log
    # the role's line: "cpu-1 main: started <verdict> in <s> s (start to admission gate)"
    line=$(tr -s ' \n' '  ' <"$f" | grep -o 'cpu-1 main: started [^"]* in [0-9.]* s (start to admission gate)' | tail -1)
    s=$(sed 's/.* in \([0-9.]*\) s (start to admission gate)$/\1/' <<<"$line")
    v=$(sed 's/^cpu-1 main: started \(.*\) in [0-9.]* s (start.*/\1/' <<<"$line")
    [ -n "$s" ] || die "bench: no start time in $f"
    log "bench: pair $i $mode: $s s, $v"
    rows+=("{\"pair\": $i, \"mode\": \"$mode\", \"start_to_gate_s\": $s, \"verdict\": \"${v//\"/\'}\"}")
    eval "t_$mode=$s"
  done
  # shellcheck disable=SC2154 # t_cold and t_warm are set by the eval above
  ratios+=("$(awk "BEGIN { printf \"%.3f\", $t_warm / $t_cold }")")
done
printf 'warm / cold (start to admission gate): %s\n' "${ratios[*]}"
{
  printf '{"host": "lab cpu-1 (real sglang 0.5.23 on CPU, STANDALONE, Inductor on)", "date": "%s",\n "runs": [' "$(date -u +%F)"
  (IFS=,; printf '%s' "${rows[*]}")
  printf '],\n "warm_over_cold": [%s]}\n' "$(IFS=,; printf '%s' "${ratios[*]}")"
} >"$out/warm_start.json"
cat "$out/warm_start.json"
