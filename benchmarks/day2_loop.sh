#!/usr/bin/env bash
# The day-two loop in the lab (issue #41, docs/day2.md): for each fault, the time from its injection to the alert
# firing, to the loop's action recorded done (reports/day2/actions.jsonl) and to the instance or group back in the
# gateway; and a soak of the healthy lab that must trigger no action.
#
#   bash benchmarks/day2_loop.sh [member] [fallback] [xid]   the scenarios named (default: all three, in this order)
#   bash benchmarks/day2_loop.sh soak [SECONDS]               the healthy lab for SECONDS (default 600): no action,
#                                                             none of the loop's alerts firing at any sample
#
# Needs the lab up with the loop running and not in dry run (`scripts/lab up`; `scripts/lab loop` restarts the loop
# alone), as root on the lab's controller. Results: benchmarks/results/day2_loop-<time>.json (one object per
# scenario), progress on stderr. Each scenario cleans up after itself (fault removed; `clear` run for a drained or
# fallen-back host) unless DAY2_KEEP=1.
#
# The faults:
#   member    rank 0 of the B300 group (DAY2_GROUP_RANK0, b300-1) is told to hang when a member leaves (the stand-in's
#             hang_on_member_loss: the field's failure, /health 200); then rank 1 (DAY2_GROUP_MEMBER, b300-2) is
#             killed with SIGKILL. systemd restarts it, rank 0 refuses it (hung), it crash-loops: the group never
#             comes back by itself. Rank 0 hung still answers /metrics, so the alert is SGLangGroupHung (for 11m:
#             longer than a rollout's drain), then restart_group.
#   fallback  the stand-in of DAY2_FALLBACK_HOST (rtxpro-1) instance DAY2_FALLBACK_INSTANCE (main) collapses its accept
#             length after admission (accept_collapsed_while:PATH; PATH created at injection). Expected, after the
#             rule's for: 10m: SGLangAcceptLengthUnderFloor -> fallback.
#   xid       the lab has no DCGM: a stand-in exporter on the controller serves DCGM_FI_DEV_XID_ERRORS 79 for GPU 0 of
#             DAY2_XID_HOST (rtxpro-1), listed in the lab Prometheus's dcgm job (.work/lab-prometheus/lab-dcgm.json).
#             Expected: GPUXidRefused -> drain.
# A host that had a day-two action less than DAY2_MIN_INTERVAL_S (600, the playbook's ddtree_day2_min_interval_s)
# ago is waited for first: the guard rail would refuse it.
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")/.." && pwd)/scripts/lib/common.sh"
cd "$DDTREE_ROOT"
ensure_venv

PROM=http://127.0.0.1:${LAB_PROMETHEUS_PORT:-9090}
AM=http://127.0.0.1:${LAB_ALERTMANAGER_PORT:-9093}
REPORTS=${DDTREE_REPORT_DIR:-$DDTREE_ROOT/reports}
ACTIONS=$REPORTS/day2/actions.jsonl
DAY2_DIR=$DDTREE_WORK/lab-day2
PROM_DIR=$DDTREE_WORK/lab-prometheus
TIMEOUT=${DAY2_TIMEOUT:-1500}
MIN_INTERVAL=${DAY2_MIN_INTERVAL_S:-600}
RANK0=${DAY2_GROUP_RANK0:-b300-1}
MEMBER=${DAY2_GROUP_MEMBER:-b300-2}
FB_HOST=${DAY2_FALLBACK_HOST:-rtxpro-1}
FB_INSTANCE=${DAY2_FALLBACK_INSTANCE:-main}
XID_HOST=${DAY2_XID_HOST:-rtxpro-1}
FAULTS=/etc/ddtree-sglang-double/faults.json
COLLAPSE=/run/ddtree-day2-bench-collapse
mkdir -p benchmarks/results
OUT=benchmarks/results/day2_loop-$(date -u +%Y%m%dT%H%M%SZ).json
T0=

say() { printf '[day2 %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
now() { date +%s.%N; }
since() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$T0" "$(now)"; }
hx() { podman exec "lab-$1" bash -c "$2"; } # on a lab host

# promql EXPR: the first value of an instant query, or empty
promql() {
  python3 - "$PROM" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
r = json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
print(r[0]["value"][1] if r else "")
PY
}

firing() { promql "count(ALERTS{alertstate=\"firing\",alertname=\"$1\",host=\"$2\"})"; }
# the group alert firing for rank 0 HOST: its name, or nothing
group_alert() {
  local a v
  for a in SGLangGroupHung SGLangGroupMemberDown; do
    v=$(firing "$a" "$1")
    [ -z "$v" ] || [ "$v" = 0 ] || { echo "$a"; return 0; }
  done
}
# the host's workers in the gateway that are healthy (smg_worker_health 1), through its sglang targets' addresses
healthy_workers() {
  promql "count(label_replace(smg_worker_health == 1, \"instance\", \"\$1\", \"worker\", \"^https?://(.+)\$\") * on(instance) group_left(host) up{job=\"sglang\",host=\"$1\"})"
}
actions_count() { [ -e "$ACTIONS" ] && wc -l <"$ACTIONS" || echo 0; }
# the first record after line N for ACTION on HOST whose outcome is final (done, refused, failed), or empty
action_after() {
  python3 - "$ACTIONS" "$1" "$2" "$3" <<'PY'
import json, sys
path, after, action, host = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    lines = open(path).read().splitlines()[after:]
except FileNotFoundError:
    lines = []
for line in lines:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("action") == action and r.get("host") == host and r.get("outcome") in ("done", "refused", "failed", "would"):
        print(json.dumps(r))
        break
PY
}
# wait_for WHAT SECONDS CMD...: poll CMD (non-empty output and status 0) every 2 s, with progress every 30 s
wait_for() {
  local what=$1 limit=$2 start=$SECONDS out last=0
  shift 2
  while :; do
    out=$("$@" 2>/dev/null || true)
    if [ -n "$out" ] && [ "$out" != 0 ]; then
      printf '%s' "$out"
      return 0
    fi
    [ $((SECONDS - start)) -lt "$limit" ] || { say "no $what within ${limit}s"; return 1; }
    if [ $((SECONDS - last)) -ge 30 ]; then
      say "  waiting for $what ($(since) s since injection)"
      last=$SECONDS
    fi
    sleep 2
  done
}
# after a restart: the gateway's and Prometheus's last answers are from before it, so "healthy" would be stale; wait
# out a scrape and a few of the gateway's health checks first (DAY2_SETTLE_S)
settle() { sleep "${DAY2_SETTLE_S:-20}"; }
gone() { [ -z "$("$@")" ] && echo yes; } # CMD prints nothing (or 0)
is_zero() { local v; v=$("$@"); [ -z "$v" ] || [ "$v" = 0 ] && echo yes; }

# wait out the guard rail's interval for HOST (its last action in actions.jsonl)
interval_wait() {
  local left
  left=$(python3 - "$ACTIONS" "$1" "$MIN_INTERVAL" <<'PY'
import datetime, json, sys
last = None
try:
    for line in open(sys.argv[1]):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("host") == sys.argv[2] and r.get("outcome") == "done" and r.get("action") != "clear":
            last = r.get("time")
except FileNotFoundError:
    pass
if last:
    t = datetime.datetime.fromisoformat(last.replace("Z", "+00:00"))
    age = (datetime.datetime.now(datetime.timezone.utc) - t).total_seconds()
    print(max(0, int(float(sys.argv[3]) - age)))
else:
    print(0)
PY
)
  [ "$left" -gt 0 ] || return 0
  say "$1 had a day-two action less than ${MIN_INTERVAL}s ago: waiting ${left}s (the guard rail would refuse it)"
  sleep "$left"
}

# add_fault HOST MODE: prepend {"match": "", "mode": MODE} to the host's stand-in fault list (read at its start)
add_fault() {
  hx "$1" "mkdir -p ${FAULTS%/*} && python3 -c 'import json, sys
p, mode = sys.argv[1], sys.argv[2]
try:
    cur = json.load(open(p))
except Exception:
    cur = []
cur = [f for f in cur if f.get(\"mode\") != mode]
json.dump([{\"match\": \"\", \"mode\": mode}] + cur, open(p, \"w\"))' $FAULTS '$2'"
}
del_fault() {
  hx "$1" "[ -e $FAULTS ] && python3 -c 'import json, sys
p, mode = sys.argv[1], sys.argv[2]
json.dump([f for f in json.load(open(p)) if f.get(\"mode\") != mode], open(p, \"w\"))' $FAULTS '$2' || true"
}

clear_host() {
  [ "${DAY2_KEEP:-0}" = 0 ] || { say "DAY2_KEEP=1: $1 left as it is (clear: docs/day2.md)"; return 0; }
  say "cleanup: ansible-playbook ddtree.fleet.day2 clear $1"
  ansible-playbook ddtree.fleet.day2 -i inventories/lab \
    -e "{\"ddtree_day2_action\": \"clear\", \"ddtree_day2_host\": \"$1\", \"ddtree_day2_reason\": \"benchmarks/day2_loop.sh cleanup\"}" \
    >"$DDTREE_WORK/day2-bench-clear-$1.log" 2>&1 || say "clear $1 failed (log $DDTREE_WORK/day2-bench-clear-$1.log)"
}

record() { # NAME then KEY=VALUE... (numbers or JSON)
  python3 - "$OUT" "$@" <<'PY'
import json, sys
out, name = sys.argv[1], sys.argv[2]
rec = {"scenario": name}
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    try:
        rec[k] = json.loads(v)
    except ValueError:
        rec[k] = v
try:
    data = json.load(open(out))
except (FileNotFoundError, ValueError):
    data = []
data.append(rec)
json.dump(data, open(out, "w"), indent=1)
print(json.dumps(rec))
PY
}

preflight() {
  require_root
  [ -n "$(podman ps -q --filter label=ddtree.env=lab)" ] || die "day2: no lab containers: 'scripts/lab up' first"
  [ -n "$(promql 'count(up)')" ] || die "day2: no Prometheus answering at $PROM ('scripts/lab loop')"
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/-/ready", timeout=5)' "$AM" ||
    die "day2: no Alertmanager answering at $AM ('scripts/lab loop')"
  [ -e "$DAY2_DIR/rulebook.pid" ] && kill -0 "$(cat "$DAY2_DIR/rulebook.pid")" 2>/dev/null ||
    die "day2: the rulebook is not running ('scripts/lab loop'; log $DAY2_DIR/rulebook.log)"
  if [ "${1:-}" != soak ] && grep -q 'ddtree_day2_dry_run: true' "$DAY2_DIR/vars.yml"; then
    die "day2: the loop runs in dry run (LAB_DAY2_DRY_RUN): restart it acting, 'scripts/lab loop'"
  fi
}

scenario_member() {
  local n t_out t_alert t_done t_back rec alert
  interval_wait "$RANK0"
  interval_wait "$MEMBER"
  say "member: $RANK0 hangs when a member leaves (hang_on_member_loss); restarting the group to take it"
  add_fault "$RANK0" hang_on_member_loss
  # a member left crash-looping by an earlier run has hit systemd's start limit: reset it first
  hx "$MEMBER" "systemctl stop 'ddtree-sglang@*'; systemctl reset-failed 'ddtree-sglang@*' || true"
  hx "$RANK0" "systemctl reset-failed 'ddtree-sglang@*' || true; systemctl restart 'ddtree-sglang@*'"
  hx "$MEMBER" "systemctl start \$(systemctl list-units --all --plain --no-legend 'ddtree-sglang@*' | awk '{print \$1}')"
  T0=$(now)
  settle
  wait_for "the group healthy in the gateway" 300 healthy_workers "$RANK0" >/dev/null
  n=$(actions_count)
  say "member: kill -9 of $MEMBER's server (rank 1)"
  T0=$(now)
  hx "$MEMBER" "systemctl kill --signal=SIGKILL 'ddtree-sglang@*'"
  wait_for "the group out of the gateway" "$TIMEOUT" is_zero healthy_workers "$RANK0" >/dev/null
  t_out=$(since)
  say "member: out of the gateway after ${t_out}s"
  # the stand-in's rank 0 hangs (its /metrics answers): SGLangGroupHung, after its for (11m); a rank 0 that went
  # down with its member (the real sglang's kill -9 row, docs/groups.md) would be SGLangGroupMemberDown, after 1m
  alert=$(wait_for "SGLangGroupHung or SGLangGroupMemberDown firing" "$TIMEOUT" group_alert "$RANK0") || true
  t_alert=$(since)
  say "member: ${alert:-no alert} firing after ${t_alert}s"
  rec=$(wait_for "the restart_group action" "$TIMEOUT" action_after "$n" restart_group "$RANK0")
  t_done=$(since)
  say "member: action recorded after ${t_done}s: $rec"
  wait_for "the group back in the gateway" "$TIMEOUT" healthy_workers "$RANK0" >/dev/null
  t_back=$(since)
  say "member: back in the gateway after ${t_back}s"
  del_fault "$RANK0" hang_on_member_loss
  record member "out_of_gateway_s=$t_out" "alert=${alert:-none}" "alert_firing_s=$t_alert" "action_done_s=$t_done" "back_in_gateway_s=$t_back" "action=$rec"
}

scenario_fallback() {
  local n t_alert t_done t_back rec
  interval_wait "$FB_HOST"
  say "fallback: $FB_HOST's stand-in told to collapse acceptance while $COLLAPSE exists; restarting it to take it"
  add_fault "$FB_HOST" "accept_collapsed_while:$COLLAPSE"
  hx "$FB_HOST" "rm -f $COLLAPSE && systemctl restart ddtree-sglang@$FB_INSTANCE"
  T0=$(now)
  settle
  wait_for "$FB_HOST healthy in the gateway" 300 healthy_workers "$FB_HOST" >/dev/null
  n=$(actions_count)
  say "fallback: acceptance collapses now on $FB_HOST/$FB_INSTANCE (the rule waits 10 minutes: for: 10m)"
  T0=$(now)
  hx "$FB_HOST" "touch $COLLAPSE"
  wait_for "SGLangAcceptLengthUnderFloor firing" "$TIMEOUT" firing SGLangAcceptLengthUnderFloor "$FB_HOST" >/dev/null || true
  t_alert=$(since)
  say "fallback: alert firing after ${t_alert}s"
  rec=$(wait_for "the fallback action" "$TIMEOUT" action_after "$n" fallback "$FB_HOST")
  t_done=$(since)
  say "fallback: action recorded after ${t_done}s: $rec"
  wait_for "$FB_HOST back in the gateway" "$TIMEOUT" healthy_workers "$FB_HOST" >/dev/null
  t_back=$(since)
  hx "$FB_HOST" "rm -f $COLLAPSE"
  del_fault "$FB_HOST" "accept_collapsed_while:$COLLAPSE"
  record fallback "alert_firing_s=$t_alert" "action_done_s=$t_done" "back_in_gateway_s=$t_back" "action=$rec"
  clear_host "$FB_HOST"
}

scenario_xid() {
  local n t_alert t_done t_out rec port pid
  interval_wait "$XID_HOST"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  say "xid: a DCGM stand-in on 127.0.0.1:$port reports Xid 79 on GPU 0 of $XID_HOST"
  python3 -c 'import http.server, sys
body = b"# TYPE DCGM_FI_DEV_XID_ERRORS gauge\nDCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-day2-bench\"} 79\n"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "text/plain; version=0.0.4"); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$port" &
  pid=$!
  n=$(actions_count)
  T0=$(now)
  printf '[{"targets": ["127.0.0.1:%s"], "labels": {"host": "%s"}}]\n' "$port" "$XID_HOST" >"$PROM_DIR/lab-dcgm.json.tmp"
  mv "$PROM_DIR/lab-dcgm.json.tmp" "$PROM_DIR/lab-dcgm.json"
  wait_for "GPUXidRefused firing" "$TIMEOUT" firing GPUXidRefused "$XID_HOST" >/dev/null || true
  t_alert=$(since)
  say "xid: alert firing after ${t_alert}s"
  rec=$(wait_for "the drain action" "$TIMEOUT" action_after "$n" drain "$XID_HOST")
  t_done=$(since)
  say "xid: action recorded after ${t_done}s: $rec"
  wait_for "$XID_HOST out of the gateway" 120 is_zero healthy_workers "$XID_HOST" >/dev/null || true
  t_out=$(since)
  echo '[]' >"$PROM_DIR/lab-dcgm.json"
  kill "$pid" 2>/dev/null || true
  record xid "alert_firing_s=$t_alert" "action_done_s=$t_done" "out_of_gateway_s=$t_out" "action=$rec"
  clear_host "$XID_HOST"
}

soak() {
  local seconds=${1:-600} n0 start=$SECONDS fired=0 v
  n0=$(actions_count)
  say "soak: ${seconds}s of the healthy lab; the loop must take no action ($ACTIONS has $n0 lines)"
  while [ $((SECONDS - start)) -lt "$seconds" ]; do
    v=$(promql 'count(ALERTS{alertstate="firing",alertname=~"SGLangAcceptLengthUnderFloor|GPUXidRefused|SGLangGroupMemberDown|SGLangGroupHung"})')
    if [ -n "$v" ] && [ "$v" != 0 ]; then
      fired=$((fired + 1))
      say "soak: $v of the loop's alerts firing: $(promql 'ALERTS{alertstate="firing"}' || true)"
    fi
    say "soak: $((SECONDS - start))/${seconds}s, actions $(($(actions_count) - n0)), samples with the loop's alerts firing $fired"
    sleep 30
  done
  local new=$(($(actions_count) - n0))
  record soak "seconds=$seconds" "actions=$new" "samples_firing=$fired" >/dev/null
  if [ "$new" -ne 0 ] || [ "$fired" -ne 0 ]; then
    tail -n "$((new > 0 ? new : 1))" "$ACTIONS" >&2 || true
    die "soak: $new actions, $fired samples with the loop's alerts firing (results $OUT)"
  fi
  say "soak: passed: no action, no alert of the loop's in ${seconds}s (results $OUT)"
}

if [ "${1:-}" = soak ]; then
  preflight soak
  soak "${2:-600}"
  exit 0
fi
preflight
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(member fallback xid)
for s in "${scenarios[@]}"; do
  declare -F "scenario_$s" >/dev/null || die "day2: unknown scenario $s (member, fallback, xid, or soak [SECONDS])"
  say "=== $s"
  "scenario_$s"
done
say "results: $OUT"
cat "$OUT"
