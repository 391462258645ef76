#!/usr/bin/env bash
# Does the ddtree-sglang@ unit's sandbox let a CUDA process use the GPU? Run on a real GPU host
# (the lent H200) as root. Takes the hardening lines of the role's unit template as they are,
# runs a small CUDA driver-API probe (context, device memory, managed memory through nvidia-uvm)
# bare and then under `systemd-run` with those properties and a service user, and writes both
# answers to $OUT/unit_sandbox.txt. Where systemd is not PID 1 (a container), the probe runs
# under the unit's syscall filter alone (seccomp_exec.py) and the report lists the device nodes
# it opened with their majors, to compare with the unit's DeviceAllow lines. Exits 0 when the
# probe works both ways, 1 when it fails under the sandbox.
#   OUT=/some/dir bash tests/device/unit_sandbox.sh
set -uo pipefail
: "${OUT:?set OUT}"
root=$(cd "$(dirname "$0")/../.." && pwd)
report=$OUT/unit_sandbox.txt
probe=/usr/local/lib/ddtree-cuda-probe.py  # not under /tmp: the unit has PrivateTmp
cat >"$probe" <<'PY'
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def check(what, rc):
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        sys.exit("%s failed: %s (%d)" % (what, name.value.decode() if name.value else "?", rc))
check("cuInit", cuda.cuInit(0))
n = ctypes.c_int()
check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(n)))
dev, ctx, ptr, managed = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
check("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
check("cuMemAlloc 1 GiB", cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 30))
check("cuMemsetD8", cuda.cuMemsetD8_v2(ptr, 7, 1 << 30))
check("cuMemAllocManaged 64 MiB (nvidia-uvm)", cuda.cuMemAllocManaged(ctypes.byref(managed), 64 << 20, 1))
check("cuCtxSynchronize", cuda.cuCtxSynchronize())
import os
devs = set()
for f in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + f)
    except OSError:
        continue  # the directory listing's own descriptor, closed by now
    if target.startswith("/dev/nvidia"):
        devs.add(target)
devs = sorted(devs)
print("ok: %d GPU(s), context, 1 GiB device memory, 64 MiB managed memory" % n.value)
for d in devs:
    st = os.stat(d)
    print("opened %s (char %d:%d)" % (d, os.major(st.st_rdev), os.minor(st.st_rdev)))
PY
{
  echo "# host: $(uname -r), PID 1: $(ps -p 1 -o comm=), $(systemctl --version 2>/dev/null | head -1)"
  echo "# devices: $(ls /dev/nvidia* 2>/dev/null | tr '\n' ' ')"
  echo "## bare"
  python3 "$probe" 2>&1
} >"$report"
bare=$?
if [ "$(ps -p 1 -o comm=)" != systemd ]; then
  # no systemd to run the unit's sandbox: check its two parts that can refuse a CUDA process
  (
    echo "## sandbox: systemd is not PID 1 here; the unit's syscall filter alone, through libseccomp"
    python3 "$root/tests/device/seccomp_exec.py" "$root/tests/device/system-service-syscalls.txt" /usr/bin/python3 "$probe" 2>&1
    filtered=$?
    echo "## device nodes the unit allows (DevicePolicy=closed): by name, and the majors they stand for here"
    grep -E 'nvidia' /proc/devices
    echo "## (the unit allows char-nvidia and char-nvidia-frontend (nvidiaN, nvidiactl), char-nvidia-uvm, char-nvidia-caps)"
    exit $filtered
  ) >>"$report"
  filtered=$?
  cat "$report"
  [ $bare = 0 ] && [ $filtered = 0 ] && exit 0
  exit 1
fi
# the hardening lines of the template, each a --property (comments and blank lines dropped)
mapfile -t props < <(sed -n '/^# Hardening/,/^\[Install\]/p' "$root/roles/ddtree_service/templates/ddtree-sglang@.service.j2" \
  | grep -E '^[A-Za-z]+=' )
id ddtree-probe >/dev/null 2>&1 || useradd --system --no-create-home ddtree-probe
args=()
for p in "${props[@]}"; do args+=(--property "$p"); done
{
  echo "## sandbox: ${#props[@]} properties from the unit template, User=ddtree-probe"
  printf '#   %s\n' "${props[@]}"
  systemd-run --wait --pipe --collect --quiet --property User=ddtree-probe "${args[@]}" /usr/bin/python3 "$probe" 2>&1
} >>"$report"
sandboxed=$?
cat "$report"
[ $bare = 0 ] && [ $sandboxed = 0 ]
