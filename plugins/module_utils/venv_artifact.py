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
import re
import stat
import subprocess
import threading
import time

from ansible_collections.ddtree.fleet.plugins.module_utils import capped
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, safe_relpath
from ansible_collections.ddtree.fleet.plugins.module_utils.versions import version_tuple

MANIFEST_VERSION = 1
CHUNK = 1 << 20
# A manifest is read whole only below this size: a serving venv with torch and CUDA wheels (about 40,000
# files) has a manifest of about 8 MB.
MANIFEST_MAX_BYTES = 64 << 20
ID = re.compile(r"^[0-9a-f]{16}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODE = re.compile(r"^[0-7]{4}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


class BadManifest(ValueError):
    """A manifest (from the source host or a file) of the wrong type, form or size: the message names the field."""


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


def not_roots(walked, limit=5):
    """Entries of a walk that a user other than root could change (owner not root, or writable by others or by a
    group other than root's); links are judged by their directory."""
    out = []
    for rel, st in walked:
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_uid != 0 or st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0):
            out.append("%s (uid %d, gid %d, mode %04o)" % (rel, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
            if len(out) >= limit:
                break
    return out


def fingerprint(venv, walked=None):
    """Cheap change detector: paths, sizes, mtimes, modes and link targets (no file reads)."""
    h = hashlib.sha256()
    for rel, st in (walk(venv) if walked is None else walked):
        link = os.readlink(os.path.join(venv, rel)) if stat.S_ISLNK(st.st_mode) else ""
        h.update(("%s\0%o\0%d\0%d\0%s\n" % (rel, st.st_mode, st.st_size, st.st_mtime_ns, link)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def sha256_file(path, expect=None):
    """sha256 of the file at path. With expect (the lstat the walk saw), the file is opened without following a
    link and must be that very file (device, inode, size, mtime): else UnsafePath, nothing more is read."""
    if expect is None:
        fd = os.open(path, os.O_RDONLY)
    else:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if expect is not None:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (
                    expect.st_dev, expect.st_ino, expect.st_size, expect.st_mtime_ns):
                raise UnsafePath("%s changed between the walk and its read (replaced or written meanwhile)" % path)
        h = hashlib.sha256()
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
            entries.append({"path": rel, "type": "file", "size": st.st_size, "mode": "%04o" % mode,
                            "sha256": sha256_file(p, expect=st)})
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


def _need(cond, where, field, value, want):
    if not cond:
        raise BadManifest("%s: %s is %s, not %s" % (where, field, _show(value), want))


def _show(value):
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _abs_path(value):
    return (isinstance(value, str) and value.startswith("/") and os.path.normpath(value) == value
            and not any(ord(c) < 32 or ord(c) == 127 for c in value))


def check_manifest(manifest, where="the manifest"):
    """manifest when every field has the type and form this module uses it with; else BadManifest naming the
    field. Paths are safe relative names, unique; modes plain permission bits (no setuid, setgid, sticky, world
    write); sizes and counts agree. Nothing from the manifest is used before this passes."""
    _need(isinstance(manifest, dict), where, "the document", manifest, "a JSON object")
    _need(manifest.get("manifest_version") == MANIFEST_VERSION, where, "manifest_version",
          manifest.get("manifest_version"), MANIFEST_VERSION)
    _need(_abs_path(manifest.get("venv_path")) and manifest.get("venv_path") != "/", where, "venv_path",
          manifest.get("venv_path"), "a normalised absolute path")
    py = manifest.get("python")
    _need(isinstance(py, dict), where, "python", py, "an object")
    _need(isinstance(py.get("version"), str) and _VERSION.match(py["version"]), where, "python.version", py.get("version"),
          "a version such as 3.11.2")
    base = py.get("base_interpreter")
    _need(_abs_path(base) and re.match(r"^python[0-9.]*$", os.path.basename(base)), where, "python.base_interpreter",
          base, "an absolute path to a python interpreter")
    plat = manifest.get("platform")
    _need(isinstance(plat, dict), where, "platform", plat, "an object")
    _need(isinstance(plat.get("machine"), str) and _TOKEN.match(plat["machine"]), where, "platform.machine",
          plat.get("machine"), "a machine name such as x86_64")
    _need(plat.get("glibc") is None or (isinstance(plat["glibc"], str) and _VERSION.match(plat["glibc"])), where,
          "platform.glibc", plat.get("glibc"), "null or a version such as 2.36")
    pkgs = manifest.get("packages")
    _need(isinstance(pkgs, list) and all(isinstance(x, str) for x in pkgs), where, "packages", pkgs, "a list of strings")
    _need(manifest.get("sglang_version") is None or isinstance(manifest["sglang_version"], str), where, "sglang_version",
          manifest.get("sglang_version"), "null or a string")
    files = manifest.get("files")
    _need(isinstance(files, list), where, "files", files, "a list")
    seen, total, count = set(), 0, 0
    for n, f in enumerate(files):
        at = "files[%d]" % n
        _need(isinstance(f, dict), where, at, f, "an object")
        try:
            rel = safe_relpath(f.get("path"), "%s: %s.path" % (where, at))
        except UnsafePath as e:
            raise BadManifest(str(e))
        _need(rel not in seen, where, at + ".path", rel, "a path listed once")
        seen.add(rel)
        kind = f.get("type")
        _need(kind in ("file", "dir", "link"), where, at + ".type", kind, "file, dir or link")
        if kind == "link":
            target = f.get("target")
            _need(isinstance(target, str) and target and not any(ord(c) < 32 or ord(c) == 127 for c in target), where,
                  at + ".target", target, "a link target")
            continue
        mode = f.get("mode")
        _need(isinstance(mode, str) and _MODE.match(mode) and not int(mode, 8) & 0o7002, where, at + ".mode", mode,
              "permission bits without setuid, setgid, sticky or world write (chmod them on the source and rebuild)")
        if kind == "file":
            _need(_is_int(f.get("size")), where, at + ".size", f.get("size"), "a size in bytes")
            _need(isinstance(f.get("sha256"), str) and _SHA256.match(f["sha256"]), where, at + ".sha256", f.get("sha256"),
                  "64 hex digits")
            total += f["size"]
            count += 1
    _need(_is_int(manifest.get("total_size")) and manifest["total_size"] == total, where, "total_size",
          manifest.get("total_size"), "the sum of the file sizes (%d)" % total)
    _need(_is_int(manifest.get("file_count")) and manifest["file_count"] == count, where, "file_count",
          manifest.get("file_count"), "the number of files (%d)" % count)
    return manifest


def parse_manifest(data, where="the manifest"):
    """The checked manifest from its bytes (at most MANIFEST_MAX_BYTES); BadManifest when they are not one."""
    if len(data) > MANIFEST_MAX_BYTES:
        raise BadManifest("%s is larger than %d bytes: not a manifest of this collection" % (where, MANIFEST_MAX_BYTES))
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadManifest("%s is not JSON: %s" % (where, e))
    return check_manifest(doc, where)


def read_file_capped(path, limit=MANIFEST_MAX_BYTES):
    """The bytes of the regular file at path, its size checked before it is read (None when larger than limit)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def run_capped(argv, limit=MANIFEST_MAX_BYTES, timeout=600):
    """(rc, stdout bytes, stderr text) of argv, reading at most limit + 1 bytes of its stdout: past that the
    process is killed and stdout is None (nothing more is read or kept). stderr is kept to its last 64 KiB."""
    # not run_command: a peer's answer is input of unbounded size (module_utils/capped.py)
    r = capped.run(argv, limit, timeout)
    return r["rc"], (None if r["over"] else r["out"]), r["err"]


def stream_limits(manifest, artifact_bytes=0):
    """(compressed, unpacked) byte limits for an artifact of manifest: the compressed stream may not exceed
    artifact_bytes when known (the source's module measured it), the tar no more than the files plus the
    headers and padding tar adds (3 KiB per entry is more than a long name and a pax header take)."""
    unpacked = manifest["total_size"] + 3072 * (len(manifest["files"]) + 2) + (1 << 20)
    compressed = artifact_bytes if artifact_bytes and artifact_bytes > 0 else unpacked + unpacked // 64 + (1 << 20)
    return compressed, unpacked


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


def outside_members(staging, unpacked, limit=5):
    """What an archive unpacked into staging beside the venv's own path (an absolute or stray member lands
    there): every entry must be a directory on the way to unpacked, or under it."""
    on_the_way = set()
    d = os.path.dirname(unpacked)
    while d != staging and d.startswith(staging + "/"):
        on_the_way.add(d)
        d = os.path.dirname(d)
    out = []
    for root, dirs, files in os.walk(staging):
        keep = []
        for name in dirs + files:
            p = os.path.join(root, name)
            if p in on_the_way and name in dirs and not os.path.islink(p):
                keep.append(name)
            elif p != unpacked or os.path.islink(p):
                out.append(os.path.relpath(p, staging))
                if len(out) >= limit:
                    return out
        dirs[:] = [n for n in dirs if n in keep]
    return out


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
        t = subprocess.Popen(["tar", "-C", "/", "--numeric-owner", "-cf", "-", os.path.relpath(venv, "/")],  # pylint: disable=ansible-bad-function
                             stdout=subprocess.PIPE)
        z = subprocess.Popen(["zstd", "-q", "-T0", "-%d" % level, "-c"], stdin=t.stdout, stdout=f)  # pylint: disable=ansible-bad-function
        t.stdout.close()
        return t.wait(), z.wait()


def stream_unpack(source_argv, staging, progress=None, interval=1.0, limits=None, keep=None):
    """source_argv's stdout (a tar.zst) -> zstd -d -> tar -x into staging, counting bytes and
    calling progress(bytes, seconds, finished) about every interval seconds. limits: (compressed, unpacked)
    bytes at most (stream_limits); past either, the transfer stops and err says so. keep: an open binary file
    that gets a copy of the compressed bytes as they arrive (the copy a target keeps and serves to the next
    hosts, docs/scale.md); a write that fails stops the transfer.
    tar runs as root but gives every file to root (--no-same-owner): no owner from the source lands here.
    Returns (bytes, seconds, (source rc, zstd rc, tar rc), source stderr or the reason it stopped)."""
    climit, ulimit = limits or (None, None)
    src = subprocess.Popen(source_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # pylint: disable=ansible-bad-function
    unz = subprocess.Popen(["zstd", "-q", "-d", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # pylint: disable=ansible-bad-function
    untar = ["tar", "-x", "-p", "--no-same-owner", "--numeric-owner", "-C", staging]
    tar = subprocess.Popen(untar, stdin=subprocess.PIPE)  # pylint: disable=ansible-bad-function
    over = []
    err_blocks = []

    def drain():
        for block in iter(lambda: src.stderr.read(65536), b""):
            err_blocks.append(block)
            del err_blocks[:-2]

    def pump():  # zstd -> tar, counting what tar gets
        unpacked = 0
        try:
            for block in iter(lambda: unz.stdout.read(CHUNK), b""):
                unpacked += len(block)
                if ulimit is not None and unpacked > ulimit:
                    over.append("the artifact unpacks to more than %s bytes, more than its manifest lists" % ulimit)
                    break
                tar.stdin.write(block)
        except (BrokenPipeError, ValueError):
            pass
        finally:
            unz.stdout.close()  # zstd stops too when tar stopped early
            try:
                tar.stdin.close()
            except BrokenPipeError:
                pass
            if over:
                for p in (src, unz, tar):
                    p.kill()

    threads = [threading.Thread(target=drain), threading.Thread(target=pump)]
    for t in threads:
        t.daemon = True
        t.start()
    done, start, last = 0, time.time(), 0.0
    try:
        while not over:
            block = src.stdout.read(CHUNK)
            if not block:
                break
            done += len(block)
            if climit is not None and done > climit:
                over.append("the source sent more than %s bytes, more than the artifact's size" % climit)
                for p in (src, unz, tar):
                    p.kill()
                break
            if keep is not None:
                try:
                    keep.write(block)
                except OSError as exc:
                    over.append("cannot keep a copy of the artifact: %s" % exc)
                    for p in (src, unz, tar):
                        p.kill()
                    break
            unz.stdin.write(block)
            now = time.time()
            if progress and now - last >= interval:
                progress(done, now - start, False)
                last = now
    except (BrokenPipeError, ValueError):
        pass
    finally:
        try:
            unz.stdin.close()
        except BrokenPipeError:
            pass
        src.stdout.close()
    rcs = (src.wait(), unz.wait(), tar.wait())
    for t in threads:
        t.join(10)
    err = over[0] if over else b"".join(err_blocks).decode("utf-8", "replace").strip()[-4096:]
    if over and not any(rcs):
        rcs = (1, 0, 0)
    if progress:
        progress(done, time.time() - start, True)
    return done, time.time() - start, rcs, err
