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
#   FLEET_SCALE_NOOP_SIZES="6 12 18 22" ...       then the no-op at each of these sizes (and the largest) on subsets
#                                                 of the one lab left up, with the machine's busy CPU seconds and the
#                                                 host-tasks of each: the no-op's cost per added host in one run
#   FLEET_SCALE_NOOP_ONLY=1 FLEET_SCALE_NOOP_SIZES=...   only that, on the lab as it stands (docs/scale.md)
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
# the machine's busy CPU seconds so far (every process: the controller, the lab's hosts, /proc/stat): the work a run
# did, apart from how long it waited for the cores
cpu_busy() { awk '/^cpu / { printf "%.1f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }

rows=()
# FLEET_SCALE_NOOP_ONLY=1: no fresh lab; only the no-op sizes below, on the lab as it stands (scripts/lab prepare and a
# first site.yml done)
[ "${FLEET_SCALE_NOOP_ONLY:-0}" = 0 ] || { [ -n "${FLEET_SCALE_NOOP_SIZES:-}" ] && [ -e inventories/lab/hosts.yml ] ||
  die "bench: FLEET_SCALE_NOOP_ONLY=1 needs FLEET_SCALE_NOOP_SIZES and a lab (inventories/lab/hosts.yml)"; sizes=(); }
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
# FLEET_SCALE_NOOP_SIZES="6 18 ...": the no-op again at each of these sizes (and the largest), on subsets of the one lab
# left up at the last size: the lab's six hosts plus the first SIZE-6 added ones (RTX PRO 6000 first, B300 in pairs),
# each converged once on its subset, then its no-op timed. One lab, one machine state: the cost per added host of
# the no-op without the run-to-run spread of fresh labs (the hosts outside a subset idle: systemd, sshd, a stand-in).
noops=()
if [ -n "${FLEET_SCALE_NOOP_SIZES:-}" ]; then
  mapfile -t lab_hosts < <(python3 -c 'import sys, yaml
inv = yaml.safe_load(open(sys.argv[1]))
def walk(g):
    yield from (g.get("hosts") or {})
    for c in (g.get("children") or {}).values():
        yield from walk(c)
print("\n".join(walk(inv["all"])))' inventories/lab/hosts.yml)
  last=${#lab_hosts[@]}
  for k in $FLEET_SCALE_NOOP_SIZES $last; do
    [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 6 ] && [ "$k" -le "$last" ] ||
      die "bench: FLEET_SCALE_NOOP_SIZES: $k is not a size from 6 to the lab's ($last hosts)"
    # the lab's six, then rtx-x01..., then b300-x01... (pairs): a B300 without its pair is no serving group
    keep=$(printf '%s\n' "${lab_hosts[@]}" | awk -v k="$k" '
      !/^(rtx|b300)-x/ { print; n++; next } /^rtx-x/ { r[++nr] = $0 } /^b300-x/ { b[++nb] = $0 }
      END { for (i = 1; i <= nr && n < k; i++) { print r[i]; n++ } for (i = 1; i <= nb && n < k; i++) { print b[i]; n++ } }' | sort)
    [ "$(grep -c '^b300-x' <<<"$keep")" -eq $(( $(grep -c '^b300-x' <<<"$keep") / 2 * 2 )) ] ||
      die "bench: FLEET_SCALE_NOOP_SIZES: $k hosts would split a B300 pair; take a size that keeps B300 hosts in pairs"
    inv=$DDTREE_WORK/scale-inventory-$k
    rm -rf "$inv" && mkdir -p "$inv"
    ln -s "$DDTREE_ROOT/inventories/lab/group_vars" "$DDTREE_ROOT/inventories/lab/host_vars" "$inv/"
    python3 - inventories/lab/hosts.yml "$inv/hosts.yml" $keep <<'PY'
import sys, yaml
keep = set(sys.argv[3:])
inv = yaml.safe_load(open(sys.argv[1]))
def prune(g):
    if g.get("hosts"):
        g["hosts"] = {h: v for h, v in g["hosts"].items() if h in keep}
    for c in (g.get("children") or {}).values():
        prune(c)
prune(inv["all"])
yaml.safe_dump(inv, open(sys.argv[2], "w"), sort_keys=False)
PY
    log "bench: no-op at $k of the lab's $last hosts: converge the subset, then time its no-op"
    timed "subset-$k" ansible-playbook site.yml -i "$inv/hosts.yml" >/dev/null
    c0=$(cpu_busy)
    t=$(timed "subset-noop-$k" ansible-playbook site.yml -i "$inv/hosts.yml")
    c1=$(cpu_busy)
    # host-tasks: the tasks the recap counts on every host (ok, skipped, failed), the no-op's work in Ansible's terms
    noops+=("{\"hosts\": $k, \"gpu_hosts\": $(grep -cvE '^(src|router)$' <<<"$keep"), \"noop_s\": $t, \"noop_changed\": $(recap "$DDTREE_WORK/scale-subset-noop-$k.log" changed), \"noop_cpu_s\": $(awk "BEGIN { print $c1 - $c0 }"), \"host_tasks\": $(recap "$DDTREE_WORK/scale-subset-noop-$k.log" '\(ok\|skipped\|failed\)')}")
    log "bench: no-op at $k hosts: ${noops[-1]}"
  done
fi
NOOPS=$(printf '%s\n' "${noops[@]}") python3 - "$out/fleet_scale.json" "${rows[@]}" <<'PY'
import json, os, sys, datetime
rows = [json.loads(r) for r in sys.argv[2:]]
base = rows[0] if rows else None
noops = [json.loads(r) for r in os.environ.get("NOOPS", "").splitlines() if r]
for r in rows:
    extra = r["hosts"] - base["hosts"]
    for k in ("first_s", "noop_s", "facts_s"):
        r[k + "_per_added_host"] = round((r[k] - base[k]) / extra, 2) if extra else None
print("%6s %8s %8s %8s %8s %10s %10s %8s" % ("hosts", "first", "no-op", "changed", "facts", "roll/batch", "egress/1", "failed"))
for r in rows:
    print("%6d %8.1f %8.1f %8d %8.1f %10.1f %10s %8d" % (r["hosts"], r["first_s"], r["noop_s"], r["noop_changed"], r["facts_s"],
          r["rollout_per_batch_s"], r["source_egress_over_one_copy"], r["first_failed"] + r["probe_failed"]))
prev = None
for r in noops:
    extra = r["hosts"] - noops[0]["hosts"]
    r["noop_s_per_added_host"] = round((r["noop_s"] - noops[0]["noop_s"]) / extra, 2) if extra else None
    # against the size before: a cost per added host that grows from one step to the next is the faster-than-linear
    # growth to look for; CPU seconds per host-task flat means the work itself grows linearly
    r["step_noop_s_per_added_host"] = round((r["noop_s"] - prev["noop_s"]) / (r["hosts"] - prev["hosts"]), 2) if prev else None
    r["step_cpu_s_per_added_host"] = round((r["noop_cpu_s"] - prev["noop_cpu_s"]) / (r["hosts"] - prev["hosts"]), 2) if prev else None
    r["cpu_ms_per_host_task"] = round(1000 * r["noop_cpu_s"] / max(r["host_tasks"], 1), 1)
    print("no-op at %d hosts (%d GPU) of one lab: %.1f s, %d changed, %s s per added host since the last size; "
          "%.1f CPU s, %d host-tasks, %.1f CPU ms per host-task" % (
              r["hosts"], r["gpu_hosts"], r["noop_s"], r["noop_changed"], r["step_noop_s_per_added_host"], r["noop_cpu_s"],
              r["host_tasks"], r["cpu_ms_per_host_task"]))
    prev = r
json.dump({"date": datetime.date.today().isoformat(), "sizes": rows, "noop_on_one_lab": noops,
           "goals": "first_failed == 0, noop_changed == 0, probe_failed == 0, source_egress_over_one_copy <= 2"},
          open(sys.argv[1], "w"), indent=1)
bad = [r for r in rows if r["first_failed"] or r["noop_changed"] or r["probe_failed"]
       or (r["source_egress_over_one_copy"] or 0) > 2] + [r for r in noops if r["noop_changed"]]
sys.exit("bench: goals missed at %s hosts" % [r["hosts"] for r in bad] if bad else 0)
PY
