# shellcheck shell=bash
# Shared by scripts/lab and scripts/test. Sourcing it sets the environment; the ensure_*
# functions install what is missing and do nothing when it is already there.
set -euo pipefail

DDTREE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Caches that outlive a checkout (CI runs in a fresh clone on the same machine).
DDTREE_CACHE=${DDTREE_CACHE:-/var/cache/ddtree-fleet}
# Per-checkout state: ansible home, molecule state, lab ssh key. Never under /root.
DDTREE_WORK=${DDTREE_WORK:-$DDTREE_ROOT/.work}

export CONTAINERS_CONF=$DDTREE_ROOT/tests/podman/containers.conf
export ANSIBLE_CONFIG=$DDTREE_ROOT/ansible.cfg
export ANSIBLE_HOME=$DDTREE_WORK/ansible-home
export XDG_CACHE_HOME=$DDTREE_WORK/cache
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
export PY_COLORS=${PY_COLORS:-0}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Every package the bootstrap relies on, named: apt installs with --no-install-recommends, so a
# Recommends/Suggests is never pulled in by itself (netavark needs iptables to set up a
# network; podman only Suggests it). tests/fresh/check.sh proves the list on a clean stack.
DDTREE_APT_PACKAGES=(
  podman runc netavark aardvark-dns iptables conmon catatonit uidmap slirp4netns
  debootstrap python3 python3-venv python3-dev openssh-client git ca-certificates
  zstd aria2 nginx-light iproute2 rsync gcc
  chromium-headless-shell fonts-dejavu-core
)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

require_root() {
  [ "$(id -u)" -eq 0 ] || die "run as root: the lab and the test hosts use rootful podman (got uid $(id -u))"
}

hash_files() { cat "$@" | sha256sum | cut -c1-12; }

ensure_apt() {
  local missing=() p
  for p in "${DDTREE_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt: installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# The controller venv, keyed on the pinned requirements. Venvs are not relocatable, so it is
# built in place and marked complete last: an interrupted build is never taken for a ready one.
ensure_venv() {
  local req=$DDTREE_ROOT/requirements/controller.txt key venv
  key=$(hash_files "$req")
  venv=$DDTREE_CACHE/venv-$key
  if [ ! -e "$venv/.ddtree-complete" ]; then
    log "venv: building $venv from requirements/controller.txt"
    rm -rf "$venv"
    mkdir -p "$DDTREE_CACHE"
    /usr/bin/python3 -m venv "$venv"
    if ! { "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q -r "$req"; } \
        >"$DDTREE_CACHE/pip-$key.log" 2>&1; then
      grep -v 'is ignored' "$DDTREE_CACHE/pip-$key.log" | tail -20 >&2
      die "venv: pip install -r $req failed (log above, full log $DDTREE_CACHE/pip-$key.log)"
    fi
    touch "$venv/.ddtree-complete"
  fi
  export VIRTUAL_ENV=$venv
  export PATH=$venv/bin:$PATH
}

# The test-host image, tagged with a hash of its recipe: exists in podman → nothing to do;
# a saved tarball in the cache → load it (seconds); else debootstrap (about a minute).
testhost_image() {
  echo "localhost/ddtree-testhost:$(hash_files "$DDTREE_ROOT"/tests/image/packages.txt "$DDTREE_ROOT"/tests/image/build.sh)"
}

ensure_image() {
  local tag tarball
  tag=$(testhost_image)
  tarball=$DDTREE_CACHE/images/${tag##*:}.tar
  if podman image exists "$tag"; then
    :
  elif [ -s "$tarball" ]; then
    log "image: loading $tag from $tarball"
    podman load -q -i "$tarball" >/dev/null
  else
    log "image: building $tag (debootstrap, about a minute)"
    bash "$DDTREE_ROOT/tests/image/build.sh" "$tag"
    mkdir -p "$DDTREE_CACHE/images"
    podman save -q -o "$tarball.part" "$tag" && mv "$tarball.part" "$tarball"
  fi
  export DDTREE_TESTHOST_IMAGE=$tag
}

# One ssh key pair for the controller to reach the test hosts.
ensure_ssh_key() {
  export DDTREE_SSH_KEY=$DDTREE_WORK/ssh/id_ed25519
  if [ ! -s "$DDTREE_SSH_KEY" ]; then
    mkdir -p "$(dirname "$DDTREE_SSH_KEY")"
    chmod 700 "$(dirname "$DDTREE_SSH_KEY")"
    ssh-keygen -q -t ed25519 -N '' -C ddtree-controller -f "$DDTREE_SSH_KEY"
  fi
}

# A wheelhouse of pinned requirements for test hosts without PyPI access, downloaded once per
# content of the requirements file (cp311, manylinux x86_64): ensure_wheels NAME REQUIREMENTS VAR
# sets VAR to the directory.
ensure_wheels() {
  local name=$1 req=$DDTREE_ROOT/$2 var=$3 key dir p platforms=()
  key=$(hash_files "$req")
  dir=$DDTREE_CACHE/$name-$key
  if [ ! -e "$dir/.complete" ]; then
    log "$name: downloading $2 (cp311, manylinux)"
    rm -rf "$dir"
    mkdir -p "$dir"
    for p in 2_34 2_28 2_27 2_17 2014 2010 2_12 1 2_5; do
      case $p in 2014 | 2010 | 1) platforms+=(--platform "manylinux${p}_x86_64") ;; *) platforms+=(--platform "manylinux_${p}_x86_64") ;; esac
    done
    pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp "${platforms[@]}" \
      -r "$req" -d "$dir" >"$dir.log" 2>&1 || { grep -v 'is ignored' "$dir.log" | tail -20 >&2; die "$name download failed"; }
    touch "$dir/.complete"
  fi
  export "$var=$dir"
}

# The real SGLang 0.5.23 on CPU, for tests (TEST BED; tests/sglang_cpu/README.md): a venv of every
# package in tests/sglang_cpu/requirements.txt (pinned, installed with --no-deps), built once per
# content of that file with Debian's python3 (the test hosts' own interpreter); then the sgl_kernel
# import shim and the tiny models of tests/sglang_cpu/make_tiny_model.py, refreshed in place when
# either changes (seconds, not the 7 GB venv). testhosts mounts the directory at the same path in
# every test host (an overlay), so the venv runs there as built.
ensure_sglang_cpu() {
  local key extras dir site
  key=$(cd "$DDTREE_ROOT" && hash_files tests/sglang_cpu/requirements.txt)
  extras=$(cd "$DDTREE_ROOT" && hash_files tests/sglang_cpu/shim/sgl_kernel/__init__.py tests/sglang_cpu/make_tiny_model.py)
  dir=$DDTREE_CACHE/sglang-cpu-$key
  site=$dir/venv/lib/python3.11/site-packages
  if [ ! -e "$dir/.complete" ]; then
    log "sglang-cpu: building the CPU test venv of the real sglang 0.5.23 in $dir (about 7 GB; once per tests/sglang_cpu/requirements.txt)"
    rm -rf "$dir"
    mkdir -p "$dir"
    /usr/bin/python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install -q --no-deps -r "$DDTREE_ROOT/tests/sglang_cpu/requirements.txt" >"$dir.log" 2>&1 ||
      { tail -20 "$dir.log" >&2; die "sglang-cpu: pip install failed (log $dir.log)"; }
    touch "$dir/.complete"
  fi
  if [ ! -e "$dir/.extras-$extras" ]; then
    log "sglang-cpu: the sgl_kernel test shim and the tiny models"
    rm -rf "$site/sgl_kernel" "$dir/models" "$dir"/.extras-*
    cp -r "$DDTREE_ROOT/tests/sglang_cpu/shim/sgl_kernel" "$site/"
    "$dir/venv/bin/python" "$DDTREE_ROOT/tests/sglang_cpu/make_tiny_model.py" "$dir/models" >>"$dir.log" 2>&1 ||
      { tail -20 "$dir.log" >&2; die "sglang-cpu: making the tiny models failed (log $dir.log)"; }
    chmod -R a+rX "$dir"
    touch "$dir/.extras-$extras"
  fi
  export DDTREE_SGLANG_CPU=$dir
}

# Prometheus and promtool from Debian's own package, unpacked into the cache, not installed: nothing is
# started or configured on this machine. promtool checks the monitoring stage's rules (unit tests);
# molecule/fleet and the lab run this prometheus against the file_sd targets site.yml writes.
ensure_prometheus() {
  local dir=$DDTREE_CACHE/prometheus-deb
  if [ ! -x "$dir/usr/bin/prometheus" ]; then
    log "prometheus: Debian's package, unpacked into $dir"
    rm -rf "$dir" "$dir.tmp"
    mkdir -p "$dir.tmp"
    # apt's lists may be absent (ensure_apt updates them only when it installs something)
    (cd "$dir.tmp" && { apt-get download prometheus || { apt-get update -q && apt-get download prometheus; }; }) >"$dir.log" 2>&1 ||
      { tail -5 "$dir.log" >&2; die "prometheus: apt-get download failed (log $dir.log)"; }
    dpkg-deb -x "$dir.tmp"/prometheus_*.deb "$dir.tmp/root"
    mv "$dir.tmp/root" "$dir"
    rm -rf "$dir.tmp"
  fi
  export DDTREE_PROMETHEUS=$dir/usr/bin/prometheus DDTREE_PROMTOOL=$dir/usr/bin/promtool
}

bootstrap() {
  require_root
  mkdir -p "$DDTREE_WORK" "$ANSIBLE_HOME" "$XDG_CACHE_HOME"
  ensure_apt
  ensure_venv
  ensure_image
  ensure_ssh_key
  ensure_wheels wheelhouse tests/venv/requirements.txt DDTREE_WHEELHOUSE              # the test serving venv
  ensure_wheels cuda-wheelhouse tests/cuda/requirements.txt DDTREE_CUDA_WHEELHOUSE     # CUDA 13.0 (~165 MB)
  ensure_wheels router-wheelhouse tests/router/requirements.txt DDTREE_ROUTER_WHEELHOUSE # sglang-router (~36 MB)
  ensure_prometheus                                                                     # Debian's, unpacked (~19 MB)
}
