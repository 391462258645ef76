#!/usr/bin/env bash
# model_fetch on a shaped link: a hub test host (the hub mirror double, per-connection cap like a
# CDN's, default 8 MB/s) whose egress is shaped with tc tbf (default 400mbit) and one target.
# In one run:
#   link     one uncapped stream of random bytes over the shaped link (what the link carries)
#   single   curl of the model, file after file, one capped connection each (what get_url does)
#   role     playbooks/models.yml (aria2c, 8 connections per file, 4 files at once), Ansible included
#            (aria2c is installed first, untimed: a one-time cost per host, not per model)
# Prints role throughput as a fraction of the link and vs single; writes
# benchmarks/results/model_fetch_link.json.
#   bash benchmarks/model_fetch_link.sh [RATE] [CAP_BYTES_PER_S] [SHARD_MIB]
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
rate=${1:-400mbit}
cap=${2:-8000000}
mib=${3:-64}
env=benchmf
net=ddtree-benchmf
inv=$DDTREE_WORK/benchmf-inventory.yml
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
trap '"$DDTREE_ROOT/tests/podman/testhosts" down $env $net' EXIT
declare -A ip
while read -r h a; do ip[$h]=$a; done < <("$DDTREE_ROOT/tests/podman/testhosts" up $env $net mb-hub mb-dst)
cat >"$inv" <<INV
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: $DDTREE_SSH_KEY
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
    model_fetch_endpoint: http://${ip[mb-hub]}:8090
    model_fetch_repo_id: ddtree-bench/model
    model_fetch_dest: /opt/ddtree/models/bench
    model_fetch_margin_gib: 0
    model_fetch_progress_interval: 2
  children:
    fleet:
      children:
        hubs: {hosts: {mb-hub: {ansible_host: ${ip[mb-hub]}}}}
        gpu_hosts: {hosts: {mb-dst: {ansible_host: ${ip[mb-dst]}}}}
INV
cd "$DDTREE_ROOT"
on() { podman exec "$env-$1" bash -c "$2"; }
secs() { local t0 t1; t0=$EPOCHREALTIME; "$@" >/dev/null; t1=$EPOCHREALTIME; awk "BEGIN { print $t1 - $t0 }"; }
podman cp tests/doubles/hf_hub.py "$env-mb-hub:/usr/local/bin/hf_hub.py"
podman cp tests/doubles/make_model.py "$env-mb-hub:/usr/local/bin/make_model.py"
on mb-hub "python3 /usr/local/bin/make_model.py /srv/hub/ddtree-bench/model --shards 4 --shard-mib $mib"
on mb-hub "mkdir -p /srv/raw && dd if=/dev/urandom of=/srv/raw/rand bs=1M count=128 status=none"
on mb-hub "systemd-run --unit hub-capped python3 /usr/local/bin/hf_hub.py --root /srv/hub --port 8090 --rate $cap"
on mb-hub "systemd-run --unit raw-http python3 -m http.server 8095 --directory /srv/raw"
on mb-hub "tc qdisc replace dev eth0 root tbf rate $rate burst 256kb latency 400ms"
sleep 1
size=$(on mb-hub "find /srv/hub/ddtree-bench/model -type f -printf '%s\n' | awk '{s += \$1} END {print s}'")
log "bench: link at $rate (one uncapped stream)"
t_link=$(secs on mb-dst "curl -sf -o /dev/null http://${ip[mb-hub]}:8095/rand")
rev=$(on mb-dst "curl -sf 'http://${ip[mb-hub]}:8090/api/models/ddtree-bench/model/revision/main?blobs=true'" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])')
files=$(on mb-hub "cd /srv/hub/ddtree-bench/model && ls")
log "bench: single stream (curl, capped at $cap B/s per connection)"
t_single=$(secs on mb-dst "mkdir -p /var/tmp/single && for f in $(echo $files); do curl -sf -o /var/tmp/single/\$f http://${ip[mb-hub]}:8090/ddtree-bench/model/resolve/$rev/\$f; done")
log "bench: the role's one-time host setup (aria2c from apt), not timed"
ansible-playbook -i "$inv" playbooks/models.yml --tags model_fetch_deps >/dev/null
log "bench: role (playbooks/models.yml)"
t_role=$(secs ansible-playbook -i "$inv" playbooks/models.yml)
on mb-hub "tc qdisc del dev eth0 root"
python3 - "$out/model_fetch_link.json" "$rate" "$cap" "$size" "$t_link" "$t_single" "$t_role" <<'PY'
import json, sys
path, rate, cap, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
link, single, role = (float(x) for x in sys.argv[5:8])
link_mbs = 128 * 2**20 / link / 1e6
d = {"rate": rate, "per_connection_cap_Bps": cap, "model_bytes": size, "link_MBps": round(link_mbs, 1),
     "single_s": round(single, 1), "role_s": round(role, 1), "role_MBps": round(size / role / 1e6, 1),
     "role_vs_link": round(size / role / 1e6 / link_mbs, 2), "role_vs_single": round(single / role, 2),
     "goals": {"role_vs_link": 0.9, "role_vs_single": 5}}
json.dump(d, open(path, "w"), indent=1)
print("link %.1f MB/s; model %.0f MB; single %.1f s; role %.1f s (Ansible included)" % (link_mbs, size / 1e6, single, role))
print("role: %.2fx the link (goal >= 0.9), %.2fx single stream (goal >= 5)" % (d["role_vs_link"], d["role_vs_single"]))
PY
