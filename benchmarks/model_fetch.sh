#!/usr/bin/env bash
# model_fetch benchmark on the controller: the hub mirror double (tests/doubles/hf_hub.py) on
# loopback with a per-connection rate cap like a CDN's (default 8 MB/s), serving a model made by
# tests/doubles/make_model.py (default 4 shards x 32 MiB). In one run:
#   single   curl, one file after the other, one connection (what get_url does)
#   role     the model_fetch module (aria2c, 8 connections per file, 4 files at once), via
#            ansible-playbook, verification and publish included
# Prints the ratio role/single and writes benchmarks/results/model_fetch.json. No link shaping
# here: the cap per connection is what a CDN imposes, and what several connections overcome.
#   bash benchmarks/model_fetch.sh [RATE_BYTES_PER_S] [SHARD_MIB]
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
rate=${1:-8000000}
mib=${2:-32}
work=$(mktemp -d /tmp/ddtree-bench-mf.XXXXXX)
trap 'kill $hub 2>/dev/null; rm -rf "$work"' EXIT
repo=ddtree-bench/model
python3 "$DDTREE_ROOT/tests/doubles/make_model.py" "$work/hub/$repo" --shards 4 --shard-mib "$mib"
port=18090
python3 "$DDTREE_ROOT/tests/doubles/hf_hub.py" --root "$work/hub" --port $port --bind 127.0.0.1 --rate "$rate" &
hub=$!
sleep 1
size=$(find "$work/hub/$repo" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
files=$(cd "$work/hub/$repo" && ls)
rev=$(curl -s "http://127.0.0.1:$port/api/models/$repo/revision/main?blobs=true" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])')

log "single stream: curl, file after file"
mkdir -p "$work/single"
t0=$(date +%s.%N)
for f in $files; do curl -sf -o "$work/single/$f" "http://127.0.0.1:$port/$repo/resolve/$rev/$f"; done
single=$(echo "$(date +%s.%N) - $t0" | bc)

log "role: model_fetch module (aria2c)"
cat >"$work/play.yml" <<PLAY
- hosts: localhost
  gather_facts: false
  tasks:
    - ddtree.fleet.model_fetch:
        repo_id: $repo
        endpoint: http://127.0.0.1:$port
        dest: $work/role/model
        margin_gib: 0
        connections: 8
        concurrent: 4
PLAY
t0=$(date +%s.%N)
ANSIBLE_CONFIG=$DDTREE_ROOT/ansible.cfg ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false \
  ansible-playbook "$work/play.yml" >"$work/role.log" 2>&1 || { tail -20 "$work/role.log"; die "role run failed"; }
role=$(echo "$(date +%s.%N) - $t0" | bc)

python3 - "$size" "$rate" "$single" "$role" "$DDTREE_ROOT/benchmarks/results/model_fetch.json" <<'PY'
import json, os, sys
size, rate, single, role, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
res = {"model_bytes": size, "per_connection_cap_Bps": rate, "single_s": round(single, 2), "role_s": round(role, 2),
       "single_MBps": round(size / single / 1e6, 1), "role_MBps": round(size / role / 1e6, 1),
       "role_vs_single": round(single / role, 2), "goal_role_vs_single": 5.0}
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump(res, f, indent=1)
print("model %.0f MiB, cap %.1f MB/s per connection" % (size / 2**20, rate / 1e6))
print("single stream %6.1f s  %6.1f MB/s" % (single, res["single_MBps"]))
print("role          %6.1f s  %6.1f MB/s  (%.2fx single; goal >= 5x)" % (role, res["role_MBps"], res["role_vs_single"]))
PY
