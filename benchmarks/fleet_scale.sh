#!/usr/bin/env bash
# The main job at several fleet sizes (issue: a fleet, not a lab). For each size, a fresh lab of that many
# hosts (the six lab hosts plus SIZE-6 more RTX PRO 6000 replay hosts: scripts/lab, LAB_EXTRA_RTX), then
# in one run:
#   first site.yml, its no-op re-run (changed must be 0), playbooks/facts.yml,
#   a rollout of a new release on every serving host under the load probe (0 failed requests),
#   the bytes the sources sent during the first run over the bytes of one copy of what they serve
#   (the serving venv's artefact and the models), from src's network counters.
# Sizes as ratios and per-host costs against the smallest size of the same run; the lab stays up at the
# last size (scripts/lab down removes it). Writes benchmarks/results/fleet_scale.json.
#   bash benchmarks/fleet_scale.sh [SIZE...]      default: 6 18
# A SIZE is HOSTS, or HOSTS:B300 for a fleet of another shape: B300 of the added hosts are B300 replay hosts
# (LAB_EXTRA_B300, an even number) that form B300/2 more two-host serving groups, the rest RTX PRO 6000.
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
cd "$DDTREE_ROOT"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(6 18)
for spec in "${sizes[@]}"; do
  [[ $spec =~ ^([0-9]+)(:([0-9]+))?$ ]] && [ "${BASH_REMATCH[1]}" -ge $((6 + ${BASH_REMATCH[3]:-0})) ] &&
    [ $((${BASH_REMATCH[3]:-0} % 2)) -eq 0 ] ||
    die "bench: a size is HOSTS (at least 6, the lab's own) or HOSTS:B300 (B300 of them more B300 hosts, an even number, in pairs): got $spec"
done

timed() { # name, command...: runs it with its log in .work/scale-NAME.log, prints the wall seconds
  local name=$1 t0 t1
  shift
  t0=$EPOCHREALTIME
  "$@" >"$DDTREE_WORK/scale-$name.log" 2>&1 || { tail -40 "$DDTREE_WORK/scale-$name.log" >&2; die "bench: $name failed"; }
  t1=$EPOCHREALTIME
  awk "BEGIN { printf \"%.1f\", $t1 - $t0 }"
}
recap() { # log, field: the sum of FIELD= over the PLAY RECAP
  sed -n '/PLAY RECAP/,$p' "$1" | grep -o "$2=[0-9]*" | cut -d= -f2 | awk '{ s += $1 } END { print s + 0 }'
}
tx() { # bytes host src has sent on its network interface
  podman exec lab-src sh -c 'cat /sys/class/net/eth0/statistics/tx_bytes'
}
on_src() { podman exec lab-src sh -c "$1"; }

rows=()
for spec in "${sizes[@]}"; do
  n=${spec%%:*}
  b300=0
  [[ $spec != *:* ]] || b300=${spec#*:}
  log "bench: a fresh lab of $n hosts (scripts/lab down; LAB_EXTRA_RTX=$((n - 6 - b300)) LAB_EXTRA_B300=$b300 scripts/lab prepare)"
  bash scripts/lab down >/dev/null
  LAB_EXTRA_RTX=$((n - 6 - b300)) LAB_EXTRA_B300=$b300 bash scripts/lab prepare >"$DDTREE_WORK/scale-prepare-$n.log" 2>&1 ||
    { tail -30 "$DDTREE_WORK/scale-prepare-$n.log" >&2; die "bench: lab prepare at $n hosts failed"; }
  tx0=$(tx)
  log "bench: $n hosts: site.yml, first run"
  first=$(timed "first-$n" ansible-playbook site.yml -i inventories/lab)
  tx1=$(tx)
  # one copy of what src serves: the venv artefact(s) it streamed and the hub mirror's files of the models
  art=$(on_src 'du -cb /var/cache/ddtree/venv-artifacts/*.tar.zst 2>/dev/null | tail -1 | cut -f1')
  models=$(on_src 'du -sb /srv/hub 2>/dev/null | cut -f1')
  log "bench: $n hosts: site.yml, no-op re-run"
  noop=$(timed "noop-$n" ansible-playbook site.yml -i inventories/lab)
  log "bench: $n hosts: playbooks/facts.yml"
  facts=$(timed "facts-$n" ansible-playbook playbooks/facts.yml -i inventories/lab)
  log "bench: $n hosts: a rollout of a new release on every serving host, under the load probe"
  roll=$(timed "rollout-$n" ansible-playbook playbooks/rollout.yml -i inventories/lab \
    -e ddtree_rollout_probe_concurrency=2 -e "{\"ddtree_service_env\": {\"FLEET_SCALE_ROUND\": \"$n-$RANDOM\"}}")
  record=$(ls -t reports/rollouts/*.json | head -1)
  # serial prints the batches' play once per batch (the canary included)
  batches=$(grep -c '^PLAY \[Rollout - canary, then batches' "$DDTREE_WORK/scale-rollout-$n.log" || true)
  probe_failed=$(python3 -c 'import json, sys
print((json.load(open(sys.argv[1])).get("probe") or {}).get("failed_requests", 0))' "$record")
  rows+=("$(python3 - "$n" "$b300" "$first" "$(recap "$DDTREE_WORK/scale-first-$n.log" failed)" "$noop" \
    "$(recap "$DDTREE_WORK/scale-noop-$n.log" changed)" "$facts" "$roll" "$batches" "$probe_failed" \
    "$((tx1 - tx0))" "${art:-0}" "${models:-0}" <<'PY'
import json, sys
n, b300, first, failed, noop, changed, facts, roll, batches, probe_failed, sent, art, models = sys.argv[1:]
one = int(art) + int(models)
print(json.dumps({"hosts": int(n), "extra_b300": int(b300), "serving_groups": 1 + int(b300) // 2, "first_s": float(first), "first_failed": int(failed), "noop_s": float(noop),
                  "noop_changed": int(changed), "facts_s": float(facts), "rollout_s": float(roll),
                  "rollout_batches": int(batches), "rollout_per_batch_s": round(float(roll) / max(int(batches), 1), 1),
                  "probe_failed": int(probe_failed), "source_sent_bytes": int(sent), "one_copy_bytes": one,
                  "source_egress_over_one_copy": round(int(sent) / one, 2) if one else None}))
PY
)")
  log "bench: $n hosts: ${rows[-1]}"
done
python3 - "$out/fleet_scale.json" "${rows[@]}" <<'PY'
import json, sys, datetime
rows = [json.loads(r) for r in sys.argv[2:]]
base = rows[0]
for r in rows:
    extra = r["hosts"] - base["hosts"]
    for k in ("first_s", "noop_s", "facts_s"):
        r[k + "_per_added_host"] = round((r[k] - base[k]) / extra, 2) if extra else None
print("%6s %8s %8s %8s %8s %10s %10s %8s" % ("hosts", "first", "no-op", "changed", "facts", "roll/batch", "egress/1", "failed"))
for r in rows:
    print("%6d %8.1f %8.1f %8d %8.1f %10.1f %10s %8d" % (r["hosts"], r["first_s"], r["noop_s"], r["noop_changed"], r["facts_s"],
          r["rollout_per_batch_s"], r["source_egress_over_one_copy"], r["first_failed"] + r["probe_failed"]))
json.dump({"date": datetime.date.today().isoformat(), "sizes": rows,
           "goals": "first_failed == 0, noop_changed == 0, probe_failed == 0, source_egress_over_one_copy <= 2"},
          open(sys.argv[1], "w"), indent=1)
bad = [r for r in rows if r["first_failed"] or r["noop_changed"] or r["probe_failed"]
       or (r["source_egress_over_one_copy"] or 0) > 2]
sys.exit("bench: goals missed at %s hosts" % [r["hosts"] for r in bad] if bad else 0)
PY
