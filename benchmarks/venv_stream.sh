#!/usr/bin/env bash
# venv_stream benchmark: one source and one target test host, the source's egress shaped with
# tc tbf to RATE (default 250mbit), and a serving venv: PAYLOAD test (default; the small test serving
# venv, ~300 MB, ~14k files) or sglang-cpu (the real sglang 0.5.23 venv of tests/sglang_cpu, ~7 GB:
# torch and NVIDIA wheels, the size class of a production serving venv). In one run:
#   link     incompressible bytes over ssh from source to target (the raw link rate)
#   role     ansible-playbook playbooks/venv.yml onto an empty target, artifact already built
#            (wall time, Ansible included; the one-time artifact build is timed on its own)
#   reinstall python -m venv + pip install --no-index of the same wheels, already on the target
#   rsync    rsync -a of the venv from the source over ssh
# Prints a table and writes benchmarks/results/venv_stream[-sglang-cpu].json. Ratios are what to compare.
#   bash benchmarks/venv_stream.sh [RATE] [test|sglang-cpu]
set -euo pipefail
# shellcheck source=../scripts/lib/common.sh
source "$(cd "$(dirname "$0")" && pwd)/../scripts/lib/common.sh"
bootstrap
rate=${1:-250mbit}
payload=${2:-test}
env=bench
net=ddtree-bench
inv=$DDTREE_WORK/bench-inventory.yml
out=$DDTREE_ROOT/benchmarks/results
mkdir -p "$out"
case $payload in
test)
  venv=/opt/ddtree/venvs/sglang-0.5.23-test result=$out/venv_stream.json imports=numpy
  wheels=$DDTREE_WHEELHOUSE req=tests/venv/requirements.txt
  ;;
sglang-cpu)
  ensure_sglang_cpu
  # the same pinned packages as wheels, for the reinstall (once per requirements.txt, ~3 GB)
  key=$(hash_files tests/sglang_cpu/requirements.txt)
  wheels=$DDTREE_CACHE/sglang-cpu-wheels-$key req=tests/sglang_cpu/requirements.txt
  if [ ! -e "$wheels/.complete" ]; then
    log "bench: downloading the wheels of tests/sglang_cpu/requirements.txt (about 3 GB, once)"
    mkdir -p "$wheels"
    pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp -r "$req" -d "$wheels" >"$wheels.log" 2>&1 ||
      { tail -20 "$wheels.log" >&2; die "bench: wheel download failed (log $wheels.log)"; }
    touch "$wheels/.complete"
  fi
  venv=/opt/ddtree/venvs/sglang-cpu result=$out/venv_stream-sglang-cpu.json imports=torch
  ;;
*) die "payload must be test or sglang-cpu (got $payload)" ;;
esac
trap '"$DDTREE_ROOT/tests/podman/testhosts" down $env $net' EXIT

declare -A ip
# the source sees the CPU test venv (an overlay of the controller's copy); the target starts empty
while read -r h a; do ip[$h]=$a; done < <("$DDTREE_ROOT/tests/podman/testhosts" up $env $net vb-src)
while read -r h a; do ip[$h]=$a; done < <(DDTREE_SGLANG_CPU='' "$DDTREE_ROOT/tests/podman/testhosts" up $env $net vb-dst)
cat >"$inv" <<INV
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: $DDTREE_SSH_KEY
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
    venv_stream_source_venv: $venv
    venv_stream_import_check: [$imports]
    venv_stream_import_sglang: false
  children:
    fleet:
      children:
        sources: {hosts: {vb-src: {ansible_host: ${ip[vb-src]}}}}
        gpu_hosts: {hosts: {vb-dst: {ansible_host: ${ip[vb-dst]}}}}
INV
cd "$DDTREE_ROOT"
on() { podman exec "$env-$1" bash -c "$2"; }
log "bench: base role, the $payload venv on the source, its wheels on the target"
ansible-playbook -i "$inv" playbooks/base.yml >/dev/null
if [ "$payload" = test ]; then
  ansible-playbook -i "$inv" tests/playbooks/source_venv.yml >/dev/null
else  # the built venv, copied where the role expects a serving venv (prefix/venvs/NAME)
  on vb-src "mkdir -p /opt/ddtree/venvs && cp -a $DDTREE_SGLANG_CPU/venv $venv"
fi
podman exec "$env-vb-dst" mkdir -p /var/tmp/wheelhouse
podman cp "$wheels/." "$env-vb-dst:/var/tmp/wheelhouse/"
# by name only: a pip-freeze line `name @ file:///...` points into the controller's cache
grep -v ' @ file://' "$DDTREE_ROOT/$req" >"$DDTREE_WORK/bench-requirements.txt"
podman cp "$DDTREE_WORK/bench-requirements.txt" "$env-vb-dst:/var/tmp/wheelhouse/requirements.txt"

secs() { # command...: runs it (output to $DDTREE_WORK/bench-step.log), prints the wall seconds; a failed step ends the bench
  local t0 t1
  t0=$EPOCHREALTIME
  "$@" >"$DDTREE_WORK/bench-step.log" 2>&1 || { tail -30 "$DDTREE_WORK/bench-step.log" >&2; die "bench: step failed: $*"; }
  t1=$EPOCHREALTIME
  awk "BEGIN { print $t1 - $t0 }"
}
as_ddtree='su - ddtree -c'

on vb-src "dd if=/dev/urandom of=/var/tmp/rand bs=1M count=64 status=none; chmod 644 /var/tmp/rand"
on vb-src "tc qdisc replace dev eth0 root tbf rate $rate burst 256kb latency 400ms"
log "bench: link at $rate"
t_link=$(secs on vb-dst "$as_ddtree 'ssh -o BatchMode=yes vb-src cat /var/tmp/rand > /dev/null'")
log "bench: artifact on the source (once per venv content, shared by every target)"
t_art=$(secs ansible -i "$inv" vb-src -m ddtree.fleet.venv_artifact -a "venv=$venv")
log "bench: role"
t_role=$(secs ansible-playbook -i "$inv" playbooks/venv.yml -e venv_stream_progress_interval=1)
bytes=$(on vb-dst "du -sb $venv | cut -f1")
nfiles=$(on vb-dst "find $venv | wc -l")
art=$(on vb-src "stat -c %s /var/cache/ddtree/venv-artifacts/*.tar.zst | head -1")
log "bench: pip reinstall from the target's own wheelhouse"
t_pip=$(secs on vb-dst "python3 -m venv /var/tmp/reinstall && /var/tmp/reinstall/bin/pip install -q --no-index --no-deps --find-links /var/tmp/wheelhouse -r /var/tmp/wheelhouse/requirements.txt")
log "bench: rsync"
t_rsync=$(secs on vb-dst "mkdir -p /var/tmp/rsync && chown ddtree /var/tmp/rsync && $as_ddtree 'rsync -a vb-src:$venv/ /var/tmp/rsync/'")
on vb-src "tc qdisc del dev eth0 root"

python3 - "$result" "$rate" "$t_link" "$t_role" "$t_pip" "$t_rsync" "$bytes" "$art" "$t_art" "$payload" "$nfiles" <<'PY'
import json, sys
path, rate = sys.argv[1], sys.argv[2]
art_s = float(sys.argv[9])
link, role, pip, rsync = (float(x) for x in sys.argv[3:7])
venv_bytes, art_bytes = int(sys.argv[7]), int(sys.argv[8])
link_mbs = 64 * 2**20 / link / 1e6
d = {
    "payload": sys.argv[10], "venv_files": int(sys.argv[11]),
    "rate": rate, "venv_bytes": venv_bytes, "artifact_bytes": art_bytes, "artifact_build_s": round(art_s, 1),
    "link_MBps": round(link_mbs, 1),
    "role_s": round(role, 1), "reinstall_s": round(pip, 1), "rsync_s": round(rsync, 1),
    "role_vs_reinstall": round(pip / role, 2), "role_vs_rsync": round(rsync / role, 2),
    # payload delivered per second by the role, relative to what the raw link carries
    "role_payload_vs_link": round(venv_bytes / role / 1e6 / link_mbs, 2),
}
json.dump(d, open(path, "w"), indent=1)
print("%-10s %8s %10s" % ("method", "seconds", "speedup"))
print("%-10s %8.1f %10s" % ("role", role, "1.00"))
print("%-10s %8.1f %10.2f" % ("reinstall", pip, pip / role))
print("%-10s %8.1f %10.2f" % ("rsync", rsync, rsync / role))
print("artifact build on the source (once per content): %.1f s" % art_s)
print("link %.1f MB/s; venv %.0f MB, %d files (%.0f MB compressed); role delivers %.2fx the link rate in venv bytes"
      % (link_mbs, venv_bytes / 1e6, d["venv_files"], art_bytes / 1e6, d["role_payload_vs_link"]))
PY
