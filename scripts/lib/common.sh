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

# The controller's Python: ansible-core 2.20+ runs on Python 3.12+ on the controller (managed hosts
# keep their own: Debian 12's 3.11 is a supported target). The distribution's python3 where it is
# new enough (Debian 13, Ubuntu 24.04), else python3.13 / python3.12 on PATH; a pyenv shim answers
# only for the version pyenv has selected, so an installed pyenv version that has the command is
# asked for by name (PYENV_VERSION). Prints the interpreter's real path; with venv and ensurepip
# (Debian splits them into pythonX.Y-venv), since the venv is built from it.
DDTREE_CONTROLLER_PYTHON_MIN=3.12
controller_python() {
  local c v probe='import sys, venv, ensurepip; sys.version_info >= (3, 12) and print(sys.executable)' exe
  for c in /usr/bin/python3 python3.13 python3.12; do
    command -v "$c" >/dev/null 2>&1 || continue
    exe=$("$c" -c "$probe" 2>/dev/null) || exe=
    if [ -z "$exe" ] && command -v pyenv >/dev/null 2>&1 && [ "$c" != /usr/bin/python3 ]; then
      for v in $(pyenv whence "$c" 2>/dev/null | sort -rV); do
        exe=$(PYENV_VERSION=$v "$c" -c "$probe" 2>/dev/null) && [ -n "$exe" ] && break
      done
    fi
    [ -n "$exe" ] && { echo "$exe"; return 0; }
  done
  return 1
}

# Where no Python >= 3.12 exists (Debian 12: bookworm, its updates, security and backports carry only
# 3.11), one is built once from Debian 13's python3.13 source package: fetched with apt from Debian's own
# archive (the Sources index verified against Debian's archive keyring, the tarball against the index),
# through a private apt state that changes nothing in the system's sources, and compiled into the cache
# (about five minutes on two cores). DDTREE_BUILD_PYTHON=0 turns this off. Prints the interpreter's path.
DDTREE_PYTHON_SRC_SUITE=${DDTREE_PYTHON_SRC_SUITE:-trixie}
build_python() {
  local dir=$DDTREE_CACHE/python3.13 work=$DDTREE_CACHE/python3.13-src tarball
  if [ -e "$dir/.ddtree-complete" ]; then echo "$dir/bin/python3.13"; return 0; fi
  [ "${DDTREE_BUILD_PYTHON:-1}" = 1 ] || return 1
  log "python: no Python >= $DDTREE_CONTROLLER_PYTHON_MIN here; building 3.13 from Debian's $DDTREE_PYTHON_SRC_SUITE python3.13 source package into $dir (once, a few minutes; log $work/build.log)"
  rm -rf "$dir" "$work"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends build-essential libssl-dev zlib1g-dev \
    libffi-dev libsqlite3-dev libbz2-dev liblzma-dev libreadline-dev libncurses-dev uuid-dev >"$work/build.log" 2>&1 || {
    tail -5 "$work/build.log" >&2; return 1; }
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $DDTREE_PYTHON_SRC_SUITE main" \
    >"$work/sources.list"
  local apt=(apt-get -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  { "${apt[@]}" update && (cd "$work" && "${apt[@]}" source --download-only python3.13); } >>"$work/build.log" 2>&1 || {
    tail -5 "$work/build.log" >&2; return 1; }
  tarball=$(ls "$work"/python3.13_*.orig.tar.xz 2>/dev/null | head -1)
  [ -n "$tarball" ] || return 1
  tar -C "$work" -xJf "$tarball" &&
    (cd "$work"/Python-3.13.* && ./configure --prefix="$dir" --with-ensurepip=install && make -j"$(nproc)" && make install) \
    >>"$work/build.log" 2>&1 || { tail -5 "$work/build.log" >&2; return 1; }
  "$dir/bin/python3.13" -c 'import ssl, sqlite3, ctypes, lzma, bz2, venv, ensurepip' || return 1
  touch "$dir/.ddtree-complete"
  rm -rf "$work"/Python-3.13.*
  echo "$dir/bin/python3.13"
}

# A venv keyed on a pinned requirements file and the interpreter's version. Venvs are not
# relocatable, so it is built in place and marked complete last: an interrupted build is never
# taken for a ready one. build_venv REQUIREMENTS prints the venv's path.
build_venv() {
  local req=$1 py key venv
  py=${DDTREE_CONTROLLER_PYTHON:-$(controller_python || build_python)} ||
    die "venv: the controller needs Python >= $DDTREE_CONTROLLER_PYTHON_MIN for ansible-core 2.20+, and neither python3 ($(/usr/bin/python3 -V 2>&1 || echo none)) nor python3.13 nor python3.12 is one, and building 3.13 from Debian's source package did not work (above; DDTREE_BUILD_PYTHON=0 skips it): install python3.13 or python3.12 with its venv module (Debian 13 and Ubuntu 24.04 ship one as python3) and rerun"
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null ||
    die "venv: $py is not a Python >= $DDTREE_CONTROLLER_PYTHON_MIN (DDTREE_CONTROLLER_PYTHON names the controller's interpreter)"
  key=$( { cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)
  venv=$DDTREE_CACHE/venv-$key
  if [ ! -e "$venv/.ddtree-complete" ]; then
    log "venv: building $venv from ${req#"$DDTREE_ROOT"/} with $py ($("$py" -V 2>&1))"
    rm -rf "$venv"
    mkdir -p "$DDTREE_CACHE"
    "$py" -m venv "$venv" || die "venv: $py -m venv $venv failed"
    if ! { "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q -r "$req"; } \
        >"$DDTREE_CACHE/pip-$key.log" 2>&1; then
      grep -v 'is ignored' "$DDTREE_CACHE/pip-$key.log" | tail -20 >&2
      die "venv: pip install -r $req failed (log above, full log $DDTREE_CACHE/pip-$key.log)"
    fi
    touch "$venv/.ddtree-complete"
  fi
  echo "$venv"
}

# The controller venv: requirements/controller.txt, the pinned (newest supported) ansible-core that
# everything runs on. DDTREE_CONTROLLER_PYTHON names an interpreter to use instead of the search.
ensure_venv() {
  local venv
  venv=$(build_venv "$DDTREE_ROOT/requirements/controller.txt")
  export VIRTUAL_ENV=$venv
  export PATH=$venv/bin:$PATH
}

# The other supported ansible-core releases, each a small venv of requirements/controller-X.Y.txt
# (ansible-core X.Y and what sanity and the unit tests need): scripts/test runs sanity and unit on
# each. core_venv X.Y prints the venv's path, building it once per content of its file.
core_venv() {
  local req=$DDTREE_ROOT/requirements/controller-$1.txt
  [ -f "$req" ] || die "no requirements/controller-$1.txt (the supported cores: $(supported_cores | tr '\n' ' '))"
  build_venv "$req"
}

# Every ansible-core release the collection supports (X.Y), the pinned one first.
supported_cores() {
  local f
  sed -n 's/^ansible-core==\([0-9]*\.[0-9]*\)\..*/\1/p' "$DDTREE_ROOT/requirements/controller.txt"
  for f in "$DDTREE_ROOT"/requirements/controller-*.txt; do
    [ -e "$f" ] || continue
    f=${f##*/controller-}
    echo "${f%.txt}"
  done
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
  unpack_deb prometheus "$DDTREE_CACHE/prometheus-deb" usr/bin/prometheus
  export DDTREE_PROMETHEUS=$DDTREE_CACHE/prometheus-deb/usr/bin/prometheus DDTREE_PROMTOOL=$DDTREE_CACHE/prometheus-deb/usr/bin/promtool
}

# unpack_deb PACKAGE DIR FILE: Debian's PACKAGE unpacked into DIR, once (FILE, relative to DIR, is there after it);
# downloaded with apt-get, never installed. apt's lists may be absent (ensure_apt updates them only when it installs).
unpack_deb() {
  local pkg=$1 dir=$2
  [ ! -x "$dir/$3" ] || return 0
  log "$pkg: Debian's package, unpacked into $dir"
  rm -rf "$dir" "$dir.tmp"
  mkdir -p "$dir.tmp"
  (cd "$dir.tmp" && { apt-get download "$pkg" || { apt-get update -q && apt-get download "$pkg"; }; }) >"$dir.log" 2>&1 ||
    { tail -5 "$dir.log" >&2; die "$pkg: apt-get download failed (log $dir.log)"; }
  dpkg-deb -x "$dir.tmp/${pkg}"_*.deb "$dir.tmp/root"
  mv "$dir.tmp/root" "$dir"
  rm -rf "$dir.tmp"
}

# Debian's Alertmanager (prometheus-alertmanager), unpacked into the cache like ensure_prometheus, not installed:
# the lab runs it beside Prometheus on the controller (scripts/lab), the day-two loop's test
# (tests/unit/test_day2_loop.py) on other ports. Sets DDTREE_ALERTMANAGER (scripts/lib/alertmanager, which runs it
# with the package's templates where Debian's build looks for them) and DDTREE_AMTOOL.
ensure_alertmanager() {
  local dir=$DDTREE_CACHE/alertmanager-deb
  unpack_deb prometheus-alertmanager "$dir" usr/bin/prometheus-alertmanager
  export DDTREE_ALERTMANAGER_DEB=$dir DDTREE_ALERTMANAGER=$DDTREE_ROOT/scripts/lib/alertmanager DDTREE_AMTOOL=$dir/usr/bin/amtool
}

# ansible-rulebook (the day-two loop's engine, requirements/eda.txt) in its own venv in the cache, and the Java 17+
# runtime it needs (drools_jpy): Debian's openjdk-17-jre-headless, installed with apt where no java 17+ is there.
# Sets DDTREE_RULEBOOK (the venv's ansible-rulebook) and JAVA_HOME. Run it with the controller venv after it on
# PATH: ansible-rulebook runs that venv's ansible-galaxy and ansible-playbook (rulebook_path prints the PATH).
ensure_rulebook() {
  local java venv
  java=$(command -v java || true)
  if [ -z "$java" ] || ! java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'; then
    log "rulebook: installing Debian's openjdk-17-jre-headless (ansible-rulebook's rules engine runs on Java 17+)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openjdk-17-jre-headless; } \
      >"$DDTREE_CACHE/java-apt.log" 2>&1 || { tail -5 "$DDTREE_CACHE/java-apt.log" >&2; die "rulebook: installing openjdk-17-jre-headless failed (log $DDTREE_CACHE/java-apt.log)"; }
    java=$(command -v java)
  fi
  export JAVA_HOME=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$java")")")}
  venv=$(build_venv "$DDTREE_ROOT/requirements/eda.txt")
  export DDTREE_RULEBOOK=$venv/bin/ansible-rulebook
}

# The PATH ansible-rulebook runs with: its venv first (ansible-runner), then the controller venv's ansible-playbook.
rulebook_path() { echo "$(dirname "$DDTREE_RULEBOOK"):$VIRTUAL_ENV/bin:$PATH"; }

bootstrap() {
  require_root
  mkdir -p "$DDTREE_WORK" "$ANSIBLE_HOME" "$XDG_CACHE_HOME"
  ensure_apt
  ensure_venv
  ensure_image
  ensure_ssh_key
  ensure_wheels wheelhouse tests/venv/requirements.txt DDTREE_WHEELHOUSE              # the test serving venv
  ensure_wheels cuda-wheelhouse tests/cuda/requirements.txt DDTREE_CUDA_WHEELHOUSE     # CUDA 13.0 (~165 MB)
  ensure_wheels router-wheelhouse tests/router/requirements.txt DDTREE_ROUTER_WHEELHOUSE # smg 1.13.0 (~45 MB)
  ensure_prometheus                                                                     # Debian's, unpacked (~19 MB)
  ensure_alertmanager                                                                   # Debian's, unpacked (~10 MB)
  ensure_rulebook                                                                       # the day-two loop (PyPI; Java 17)
}
