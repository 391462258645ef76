# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Venv artifacts: a zstd tar of a venv plus a manifest of every file (size, sha256, mode,
link target), the interpreter and platform it needs, and its packages. The artifact id is the
hash of the manifest, so equal content gives an equal id on every host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import platform
import stat
import subprocess
import time

from ansible_collections.ddtree.fleet.plugins.module_utils.versions import version_tuple

MANIFEST_VERSION = 1
CHUNK = 1 << 20


def read_pyvenv_cfg(venv):
    cfg = {}
    with open(os.path.join(venv, "pyvenv.cfg")) as f:
        for line in f:
            if "=" in line:
                k, v = line.split("=", 1)
                cfg[k.strip()] = v.strip()
    return cfg


def python_version(cfg):
    v = cfg.get("version") or cfg.get("version_info") or ""
    return ".".join(v.split(".")[:3])


def base_interpreter(venv, cfg):
    """The interpreter the venv runs on: the first file outside the venv that bin/pythonX.Y links to (through
    the venv's own links: `python3 -m venv` on Debian makes python3.11 -> python3 -> /usr/bin/python3), else
    home/pythonX.Y (a venv made with --copies)."""
    minor = ".".join(python_version(cfg).split(".")[:2])
    root = os.path.abspath(venv).rstrip("/") + "/"
    exe = os.path.join(os.path.abspath(venv), "bin", "python" + minor)
    for _hop in range(40):  # a loop of links ends here
        if not os.path.islink(exe):
            break
        target = os.readlink(exe)
        exe = target if os.path.isabs(target) else os.path.normpath(os.path.join(os.path.dirname(exe), target))
        if not exe.startswith(root):
            return exe
    return os.path.join(cfg.get("home", ""), "python" + minor)


def glibc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (ValueError, OSError, AttributeError, IndexError):
        return None


def walk(venv):
    """(relative path, lstat) of every file, link and directory under venv, sorted. Links to
    directories are entries, not followed (os.walk does not follow links)."""
    out = []
    for root, dirs, files in os.walk(venv):
        for name in dirs + files:
            p = os.path.join(root, name)
            out.append((os.path.relpath(p, venv), os.lstat(p)))
    return sorted(out, key=lambda x: x[0])


def fingerprint(venv):
    """Cheap change detector: paths, sizes, mtimes, modes and link targets (no file reads)."""
    h = hashlib.sha256()
    for rel, st in walk(venv):
        link = os.readlink(os.path.join(venv, rel)) if stat.S_ISLNK(st.st_mode) else ""
        h.update(("%s\0%o\0%d\0%d\0%s\n" % (rel, st.st_mode, st.st_size, st.st_mtime_ns, link)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def file_entries(venv):
    entries = []
    for rel, st in walk(venv):
        p = os.path.join(venv, rel)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            entries.append({"path": rel, "type": "link", "target": os.readlink(p)})
        elif stat.S_ISDIR(st.st_mode):
            entries.append({"path": rel, "type": "dir", "mode": "%04o" % mode})
        elif stat.S_ISREG(st.st_mode):
            entries.append({"path": rel, "type": "file", "size": st.st_size, "mode": "%04o" % mode, "sha256": sha256_file(p)})
    return entries


def build_manifest(venv, packages):
    """Manifest of venv; packages: 'name==version' strings from the venv's own interpreter."""
    cfg = read_pyvenv_cfg(venv)
    files = file_entries(venv)
    sglang = [p.split("==", 1)[1] for p in packages if p.lower().startswith("sglang==")]
    return {
        "manifest_version": MANIFEST_VERSION,
        "venv_path": os.path.abspath(venv),
        "python": {"version": python_version(cfg), "base_interpreter": base_interpreter(venv, cfg)},
        "platform": {"machine": platform.machine(), "glibc": glibc_version()},
        "packages": sorted(packages, key=str.lower),
        "sglang_version": sglang[0] if sglang else None,
        "total_size": sum(f.get("size", 0) for f in files),
        "file_count": sum(1 for f in files if f["type"] == "file"),
        "files": files,
    }


def manifest_id(manifest):
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def summary(manifest):
    """The manifest without its file list (what is returned to Ansible)."""
    return dict((k, v) for k, v in manifest.items() if k != "files")


def verify_tree(root, manifest):
    """Differences between the tree at root and the manifest: missing, extra, changed entries."""
    problems = []
    want = dict((f["path"], f) for f in manifest["files"])
    have = dict(walk(root))
    for rel in sorted(set(have) - set(want)):
        problems.append("unexpected %s" % rel)
    for rel, f in sorted(want.items()):
        st = have.get(rel)
        if st is None:
            problems.append("missing %s" % rel)
            continue
        p = os.path.join(root, rel)
        if f["type"] == "link":
            if not stat.S_ISLNK(st.st_mode) or os.readlink(p) != f["target"]:
                problems.append("link %s differs" % rel)
        elif f["type"] == "dir":
            if not stat.S_ISDIR(st.st_mode):
                problems.append("%s is not a directory" % rel)
        else:
            if not stat.S_ISREG(st.st_mode) or st.st_size != f["size"]:
                problems.append("size of %s differs" % rel)
            elif sha256_file(p) != f["sha256"]:
                problems.append("sha256 of %s differs" % rel)
            elif "%04o" % stat.S_IMODE(st.st_mode) != f["mode"]:
                problems.append("mode of %s differs" % rel)
        if len(problems) > 20:
            problems.append("...")
            break
    return problems


def preflight(manifest, target):
    """Why the venv cannot run on the target. target: {base_interpreter_version, machine, glibc,
    free_bytes} as read on the target (base_interpreter_version None when it is missing)."""
    fails = []
    py = manifest["python"]
    want_minor = ".".join(py["version"].split(".")[:2])
    have = target.get("base_interpreter_version")
    if not have:
        fails.append("base interpreter %s (Python %s) does not exist: install Python %s there, or build the venv "
                     "on the source from an interpreter every target has" % (py["base_interpreter"], py["version"], want_minor))
    elif ".".join(have.split(".")[:2]) != want_minor:
        fails.append("base interpreter %s is Python %s, the venv needs Python %s: venvs do not move between Python "
                     "minor versions; build one for Python %s" % (py["base_interpreter"], have, want_minor, ".".join(have.split(".")[:2])))
    plat = manifest["platform"]
    if target.get("machine") != plat["machine"]:
        fails.append("CPU architecture %s, the venv is built for %s" % (target.get("machine"), plat["machine"]))
    if plat.get("glibc") and (not target.get("glibc") or version_tuple(target["glibc"]) < version_tuple(plat["glibc"])):
        fails.append("glibc %s is older than the source's %s: its wheels may need newer symbols; upgrade the OS or "
                     "build the venv on a host with glibc <= %s" % (target.get("glibc"), plat["glibc"], target.get("glibc")))
    need = int(manifest["total_size"] * 1.1)
    if target.get("free_bytes") is not None and target["free_bytes"] < need:
        fails.append("%.1f GiB free under the prefix, the venv needs %.1f GiB (with 10%% margin): free space"
                     % (target["free_bytes"] / 2.0 ** 30, need / 2.0 ** 30))
    return fails


def write_tar_zst(venv, dest, level):
    """tar of venv (absolute paths kept, relative to /) | zstd -> dest. Returns (tar rc, zstd rc)."""
    with open(dest, "wb") as f:
        t = subprocess.Popen(["tar", "-C", "/", "--numeric-owner", "-cf", "-", os.path.relpath(venv, "/")],
                             stdout=subprocess.PIPE)
        z = subprocess.Popen(["zstd", "-q", "-T0", "-%d" % level, "-c"], stdin=t.stdout, stdout=f)
        t.stdout.close()
        return t.wait(), z.wait()


def stream_unpack(source_argv, staging, progress=None, interval=1.0):
    """source_argv's stdout (a tar.zst) -> zstd -d -> tar -x into staging, counting bytes and
    calling progress(bytes, seconds, finished) about every interval seconds.
    Returns (bytes, seconds, (source rc, zstd rc, tar rc), source stderr)."""
    src = subprocess.Popen(source_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    unz = subprocess.Popen(["zstd", "-q", "-d", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    tar = subprocess.Popen(["tar", "-x", "-p", "--numeric-owner", "-C", staging], stdin=unz.stdout)
    unz.stdout.close()
    done, start, last = 0, time.time(), 0.0
    try:
        while True:
            block = src.stdout.read(CHUNK)
            if not block:
                break
            unz.stdin.write(block)
            done += len(block)
            now = time.time()
            if progress and now - last >= interval:
                progress(done, now - start, False)
                last = now
    except BrokenPipeError:
        pass
    finally:
        unz.stdin.close()
    rcs = (src.wait(), unz.wait(), tar.wait())
    err = src.stderr.read().decode("utf-8", "replace").strip()
    if progress:
        progress(done, time.time() - start, True)
    return done, time.time() - start, rcs, err
