#!/usr/bin/env bash
# Prove the README's two commands on a clean container stack, whatever this machine happens to have:
# remove the lab and molecule containers, then ONLY the container-stack packages (never what the
# machine itself runs on), then run both commands from a fresh clone of HEAD. The bootstrap
# (scripts/lib/common.sh) must bring back everything it relies on by itself.
#
#   bash tests/fresh/check.sh          both commands (lab, then the whole suite: about 35 min)
#   bash tests/fresh/check.sh lab      only `scripts/lab up` (and a second site.yml: 0 changed)
#
# Run as root on a Debian 12 machine you may change. Logs: /var/tmp/ddtree-fresh-check/*.log.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
what=${1:-all}
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
logs=/var/tmp/ddtree-fresh-check
rm -rf "$logs"
mkdir -p "$logs"

# 1. the stack's state: containers and networks of the lab and molecule, then the packages
if command -v podman >/dev/null; then
  ids=$(podman ps -aq --filter label=ddtree.env 2>/dev/null || true)
  [ -z "$ids" ] || podman rm -f -t 2 $ids >/dev/null
  for n in $(podman network ls -q 2>/dev/null | grep -E '^(ddtree-lab|mol-)' || true); do podman network rm -f "$n" >/dev/null; done
fi
stack=(podman netavark aardvark-dns iptables runc crun conmon catatonit slirp4netns uidmap buildah
       containernetworking-plugins golang-github-containers-common golang-github-containers-image
       debootstrap aria2 nginx-light chromium-headless-shell chromium-common)
installed=()
for p in "${stack[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' && installed+=("$p"); done
if [ ${#installed[@]} -gt 0 ]; then
  echo "==> removing the container stack: ${installed[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${installed[@]}" >"$logs/purge.log" 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -q >>"$logs/purge.log" 2>&1
fi
for p in podman netavark iptables; do
  ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || { echo "$p is still installed" >&2; exit 1; }
done

# 2. a fresh clone of HEAD, as CI and a new user get it
clone=$(mktemp -d /var/tmp/ddtree-fresh.XXXXXX)
git clone -q "$here" "$clone/ddtree-fleet"
cd "$clone/ddtree-fleet"
echo "==> command 1: bash scripts/lab up   (log $logs/lab.log)"
bash scripts/lab up >"$logs/lab.log" 2>&1 || { tail -40 "$logs/lab.log"; echo "FAILED: scripts/lab up" >&2; exit 1; }
up=$(grep -oP 'Prometheus at \S+ scrapes \K[0-9]+(?= targets up)' "$logs/lab.log" || echo 0)
[ "$up" -ge 4 ] || { grep Prometheus "$logs/lab.log"; echo "FAILED: the lab's Prometheus scrapes $up targets (want the 3 SGLang instances and the router)" >&2; exit 1; }
echo "==> the lab's Prometheus scrapes $up targets"
echo "==> site.yml again: 0 changed"
source scripts/lib/common.sh
ensure_venv  # the controller venv scripts/lab made, first on PATH
ansible-playbook site.yml -i inventories/lab >"$logs/site-again.log" 2>&1 || { tail -40 "$logs/site-again.log"; echo "FAILED: site.yml again" >&2; exit 1; }
grep -A12 'PLAY RECAP' "$logs/site-again.log" | grep -E 'changed=[1-9]|failed=[1-9]|unreachable=[1-9]' && { echo "FAILED: second run changed something" >&2; exit 1; }
bash scripts/lab down >/dev/null
if [ "$what" = all ]; then
  echo "==> command 2: bash .ci/run   (log $logs/test.log)"
  CI=true bash .ci/run >"$logs/test.log" 2>&1 || { tail -60 "$logs/test.log"; echo "FAILED: .ci/run" >&2; exit 1; }
  tail -3 "$logs/test.log"
fi
echo "fresh-stack check passed ($what)"
