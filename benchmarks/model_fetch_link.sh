#!/usr/bin/env bash
# model_fetch on a shaped link: a hub test host (the hub mirror double, per-connection cap like a
# CDN's, default 8 MB/s) whose egress is shaped with tc tbf (default 400mbit), and three targets.
# In one run, each figure a throughput over the shaped link:
#   link     one uncapped stream of random bytes (what the link carries)
#   single   curl of one shard on one capped connection (what get_url does)
#   hf       huggingface_hub's snapshot_download (its default 8 workers, one connection per file)
#   role     playbooks/models.yml on the first target, Ansible included (aria2c, 8 connections per
#            file, 4 files at once, aria2c's sha-256 check, manifest, atomic publish); aria2c is
#            installed first, untimed (a one-time cost per host, not per model)
#   fan-out  playbooks/models.yml on all three targets: the first serves its verified copy, the
#            other two fetch from it with the origin as fallback; origin bytes over both role runs
# Prints the role's throughput against the link, single stream and huggingface_hub, and origin
# bytes against the model size; writes benchmarks/results/model_fetch_link.json.
# huggingface_hub is installed on the controller from PyPI (pinned below), then copied in.
#   bash benchmarks/model_fetch_link.sh [RATE] [CAP_BYTES_PER_S] [SHARD_MIB] [SHARDS]
set -euo pipefail
shopt -s inherit_errexit  # a failed step inside $(secs ...) stops the benchmark
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
rate=${1:-400mbit}
cap=${2:-8000000}
mib=${3:-256}
shards=${4:-16}
hf_version=1.33.0
env=benchmf
net=ddtree-benchmf
inv=$DDTREE_WORK/benchmf-inventory.yml
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
trap '"$DDTREE_ROOT/tests/podman/testhosts" down $env $net' EXIT
hf=$DDTREE_WORK/huggingface_hub-$hf_version
if [ ! -d "$hf/huggingface_hub" ]; then
  log "bench: huggingface_hub $hf_version for the baseline (pip --target, controller)"
  python3 -m pip install -q --disable-pip-version-check --target "$hf.tmp" "huggingface_hub==$hf_version"
  mv "$hf.tmp" "$hf"
fi
declare -A ip
while read -r h a; do ip[$h]=$a; done < <("$DDTREE_ROOT/tests/podman/testhosts" up $env $net mb-hub mb-dst mb-t2 mb-t3)
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
    model_fetch_progress_interval: 5
  children:
    fleet:
      children:
        hubs: {hosts: {mb-hub: {ansible_host: ${ip[mb-hub]}}}}
        gpu_hosts:
          hosts:
            mb-dst: {ansible_host: ${ip[mb-dst]}}
            mb-t2: {ansible_host: ${ip[mb-t2]}}
            mb-t3: {ansible_host: ${ip[mb-t3]}}
INV
cd "$DDTREE_ROOT"
on() { podman exec "$env-$1" bash -c "$2"; }
secs() { local t0 t1; t0=$EPOCHREALTIME; "$@" >/dev/null; t1=$EPOCHREALTIME; awk "BEGIN { print $t1 - $t0 }"; }
served() { on mb-hub "awk -F'\"bytes\": ' '{ split(\$2, a, \",\"); s += a[1] } END { printf \"%.0f\\n\", s }' /var/log/hub.jsonl 2>/dev/null || echo 0"; }
podman cp tests/doubles/hf_hub.py "$env-mb-hub:/usr/local/bin/hf_hub.py"
podman cp tests/doubles/make_model.py "$env-mb-hub:/usr/local/bin/make_model.py"
log "bench: a model of $shards x $mib MiB on the hub"
on mb-hub "python3 /usr/local/bin/make_model.py /srv/hub/ddtree-bench/model --shards $shards --shard-mib $mib"
on mb-hub "mkdir -p /srv/raw && dd if=/dev/urandom of=/srv/raw/rand bs=1M count=128 status=none"
on mb-hub "systemd-run --unit hub-capped python3 /usr/local/bin/hf_hub.py --root /srv/hub --port 8090 --rate $cap --log /var/log/hub.jsonl"
on mb-hub "systemd-run --unit raw-http python3 -m http.server 8095 --directory /srv/raw"
on mb-hub "tc qdisc replace dev eth0 root tbf rate $rate burst 256kb latency 400ms"
log "bench: waiting for the hub (it hashes every file at start)"
on mb-dst "for i in \$(seq 300); do curl -sf -o /dev/null http://${ip[mb-hub]}:8090/api/models/ddtree-bench/model/revision/main && exit 0; sleep 1; done; exit 1" \
  || die "bench: the hub did not answer within 300 s"
size=$(on mb-hub "find /srv/hub/ddtree-bench/model -type f -printf '%s\n' | awk '{s += \$1} END {printf \"%.0f\\n\", s}'")
shard=$(on mb-hub "cd /srv/hub/ddtree-bench/model && ls *.safetensors | head -1")
shard_bytes=$(on mb-hub "stat -c %s /srv/hub/ddtree-bench/model/$shard")
log "bench: link at $rate (one uncapped stream of 128 MiB)"
t_link=$(secs on mb-dst "curl -sf -o /dev/null http://${ip[mb-hub]}:8095/rand")
log "bench: link $t_link s"
rev=$(on mb-dst "curl -sf 'http://${ip[mb-hub]}:8090/api/models/ddtree-bench/model/revision/main?blobs=true'" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])')
log "bench: single stream (curl of one shard, capped at $cap B/s per connection)"
t_single=$(secs on mb-dst "curl -sf -o /dev/null http://${ip[mb-hub]}:8090/ddtree-bench/model/resolve/$rev/$shard")
log "bench: single $t_single s"
log "bench: huggingface_hub $hf_version snapshot_download of the whole model"
podman cp "$hf" "$env-mb-t3:/opt/hfpkgs"
t_hf=$(secs on mb-t3 "HF_ENDPOINT=http://${ip[mb-hub]}:8090 HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
  PYTHONPATH=/opt/hfpkgs python3 -c \"from huggingface_hub import snapshot_download; snapshot_download('ddtree-bench/model', local_dir='/var/tmp/hf')\"")
log "bench: huggingface_hub $t_hf s"
hf_bytes=$(on mb-t3 "find /var/tmp/hf -path /var/tmp/hf/.cache -prune -o -type f -printf '%s\n' | awk '{s += \$1} END {printf \"%.0f\\n\", s}'")
[ "$hf_bytes" = "$size" ] || die "bench: huggingface_hub fetched $hf_bytes bytes of $size"
on mb-t3 "rm -rf /var/tmp/hf /opt/hfpkgs"
log "bench: the role's one-time host setup (aria2c from apt), not timed"
ansible-playbook -i "$inv" playbooks/models.yml --tags model_fetch_deps >/dev/null
before=$(served)
log "bench: role on one target (playbooks/models.yml --limit mb-dst)"
t_role=$(secs ansible-playbook -i "$inv" playbooks/models.yml --limit mb-dst)
log "bench: role $t_role s"
log "bench: fan-out to the two other targets (playbooks/models.yml, mb-dst serves)"
t_fan=$(secs ansible-playbook -i "$inv" playbooks/models.yml)
log "bench: fan-out $t_fan s"
origin=$(( $(served) - before ))
on mb-hub "tc qdisc del dev eth0 root"
for h in mb-dst mb-t2 mb-t3; do
  on "$h" "cd /opt/ddtree/models/bench && sha256sum $shard" | grep -q "$(on mb-hub "cd /srv/hub/ddtree-bench/model && sha256sum $shard | cut -d' ' -f1")" \
    || die "bench: $h does not hold the model"
done
python3 - "$out/model_fetch_link.json" "$rate" "$cap" "$size" "$shard_bytes" "$t_link" "$t_single" "$t_hf" "$t_role" "$t_fan" "$origin" <<'PY'
import json, sys
path, rate, cap, size, shard = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
link, single, hf, role, fan = (float(x) for x in sys.argv[6:11])
origin = int(sys.argv[11])
mbs = lambda b, s: b / s / 1e6
link_mbs = mbs(128 * 2**20, link)
d = {"rate": rate, "per_connection_cap_Bps": cap, "model_bytes": size, "link_MBps": round(link_mbs, 1),
     "single_MBps": round(mbs(shard, single), 1), "hf_s": round(hf, 1), "hf_MBps": round(mbs(size, hf), 1),
     "role_s": round(role, 1), "role_MBps": round(mbs(size, role), 1), "fanout_s": round(fan, 1),
     "origin_bytes_3_targets": origin}
d["role_vs_link"] = round(d["role_MBps"] / link_mbs, 2)
d["role_vs_single"] = round(d["role_MBps"] / mbs(shard, single), 2)
d["role_vs_hf"] = round(d["role_MBps"] / d["hf_MBps"], 2)
d["origin_over_model"] = round(origin / size, 2)
d["goals"] = {"role_vs_link": 0.9, "role_vs_single": 5, "origin_over_model": 1.5}
json.dump(d, open(path, "w"), indent=1)
print("link %.1f MB/s; model %.0f MB; single %.1f MB/s; huggingface_hub %.1f MB/s (%.1f s); role %.1f MB/s (%.1f s, Ansible included)"
      % (link_mbs, size / 1e6, mbs(shard, single), d["hf_MBps"], hf, d["role_MBps"], role))
print("role: %.2fx the link (goal >= 0.9), %.2fx single stream (goal >= 5), %.2fx huggingface_hub"
      % (d["role_vs_link"], d["role_vs_single"], d["role_vs_hf"]))
print("fan-out to 2 more targets: %.1f s; origin bytes for 3 targets: %.2fx the model (goal <= 1.5)" % (fan, d["origin_over_model"]))
ok = d["role_vs_link"] >= 0.9 and d["role_vs_single"] >= 5 and d["origin_over_model"] <= 1.5
sys.exit(0 if ok else 1)
PY
