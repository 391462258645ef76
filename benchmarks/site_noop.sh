#!/usr/bin/env bash
# site.yml first run vs no-op re-run on the lab fleet (src, 2x B300, 1x RTX PRO 6000, cpu-1, router;
# scripts/lab prepare): every stage runs for real on the first run; the re-run must change
# nothing and take at most 25% of the first run's wall time (both Ansible wall times, same run).
# Writes benchmarks/results/site_noop.json; the lab stays up (scripts/lab down removes it).
#   bash benchmarks/site_noop.sh
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
cd "$DDTREE_ROOT"
log "bench: a fresh lab (scripts/lab down; scripts/lab prepare)"
bash scripts/lab down >/dev/null
bash scripts/lab prepare

run() { # name: runs site.yml, keeps the log, prints the wall seconds
  local t0 t1
  t0=$EPOCHREALTIME
  ansible-playbook site.yml -i inventories/lab >"$DDTREE_WORK/site-$1.log" 2>&1 \
    || { tail -40 "$DDTREE_WORK/site-$1.log" >&2; die "bench: site.yml ($1) failed"; }
  t1=$EPOCHREALTIME
  awk "BEGIN { printf \"%.1f\", $t1 - $t0 }"
}
changed() { # log: the sum of changed= over the PLAY RECAP
  sed -n '/PLAY RECAP/,$p' "$1" | grep -o 'changed=[0-9]*' | cut -d= -f2 | awk '{ s += $1 } END { print s + 0 }'
}
log "bench: site.yml, first run"
t_first=$(run first)
log "bench: site.yml, no-op re-run"
t_noop=$(run noop)
c_first=$(changed "$DDTREE_WORK/site-first.log")
c_noop=$(changed "$DDTREE_WORK/site-noop.log")
ratio=$(awk "BEGIN { printf \"%.3f\", $t_noop / $t_first }")
printf '%-22s %8s %8s\n' run seconds changed
printf '%-22s %8s %8s\n' "first" "$t_first" "$c_first" "no-op re-run" "$t_noop" "$c_noop"
printf 'no-op / first: %s (goal <= 0.25, and 0 changed)\n' "$ratio"
cat >"$out/site_noop.json" <<JSON
{"hosts": 6, "first_s": $t_first, "first_changed": $c_first, "noop_s": $t_noop, "noop_changed": $c_noop,
 "noop_over_first": $ratio, "goal": "noop_changed == 0 and noop_over_first <= 0.25", "date": "$(date -u +%F)"}
JSON
[ "$c_noop" = 0 ] || die "bench: the re-run changed $c_noop things (see $DDTREE_WORK/site-noop.log)"
awk "BEGIN { exit !($ratio <= 0.25) }" || die "bench: the re-run took $ratio of the first run (goal <= 0.25)"
