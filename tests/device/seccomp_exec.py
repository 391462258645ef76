"""Run a command under the ddtree-sglang@ unit's syscall filter, where systemd is not PID 1.

Loads tests/device/system-service-syscalls.txt (the unit's SystemCallFilter, expanded) into a
seccomp filter through libseccomp (ctypes): those syscalls are allowed, every other one fails
with EPERM (SystemCallErrorNumber=EPERM), no_new_privs is set (NoNewPrivileges=yes); then
execs the command.   seccomp_exec.py LIST COMMAND...
"""
import ctypes
import os
import sys

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO_EPERM = 0x00050000 | 1


def main():
    names = [ln.strip() for ln in open(sys.argv[1]) if ln.strip() and not ln.startswith("#")]
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ERRNO_EPERM)
    allowed = 0
    for name in names:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            continue  # not a syscall on this architecture
        if lib.seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0:
            allowed += 1
    sys.stderr.write("seccomp: %d of %d names allowed on this architecture, all else EPERM\n" % (allowed, len(names)))
    rc = lib.seccomp_load(ctx)
    if rc != 0:
        sys.exit("seccomp_load failed: %d" % rc)
    os.execv(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
