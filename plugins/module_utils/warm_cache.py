# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Warm-start caches (docs/warm_start.md): the JIT and compile caches a server wrote (Triton, Inductor,
FlashInfer, DeepGEMM, SGLang's own, under one SGLANG_CACHE_DIR), keyed by what they were built for and
packed as a content-addressed artefact that peers of the same key unpack before their first start.

Layout under the root (<prefix>/warm):
  caches/<key id>/            the directory the servers of that key write (SGLANG_CACHE_DIR)
  artifacts/<sha256>.tar.gz   a packed cache: the tar's first member is MANIFEST (key, every file's size and sha256)
  keys/<key id>.json          the index: the key, the artefact's sha256 and size, the tree digest, when, from where
  .staging/                   root's alone (0700): artefacts being fetched, caches being unpacked or set aside
A key is matched exactly, field by field; an artefact is used only when its sha256, its manifest's key and every
file's sha256 agree. Anything else is a refusal with a reason, and the caller starts cold.

Trust (docs/warm_start.md, "Threat model"): a peer's index, artefact and manifest are input - every field is
checked for type and form, every size is capped before the bytes are read or fetched, and nothing a peer sends
names a local path. The service user (which runs model code) owns caches/<key id> and nothing above it: root
stages and chowns in .staging, where that user cannot reach, and reads a cache for packing through file
descriptors opened without following links, checking each file is the one the walk saw and belongs to that
user."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import glob
import gzip
import hashlib
import io
import json
import os
import platform
import re
import selectors
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time

from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, safe_relpath
from ansible_collections.ddtree.fleet.plugins.module_utils.venv_artifact import sha256_file

KEY_VERSION = 1
KEY_FIELDS = ("arch", "driver_branch", "cuda", "python", "venv", "patch")
MANIFEST = "MANIFEST.ddtree-warm.json"
CHUNK = 1 << 20
MAX_INDEX_BYTES = 64 * 1024  # an index is a few hundred bytes
MAX_MANIFEST_BYTES = 64 * 2 ** 20  # about 300,000 files' entries
MAX_HEADER_READ = 4 * 2 ** 20  # one read of the tar reader (a pax header): no member name needs more
MAX_FILES = 500000
HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEY_ID = re.compile(r"^[0-9a-f]{16}$")
MODE = re.compile(r"^0[0-7]{3}$")
STAGING = ".staging"


class Refused(Exception):
    """An artefact that must not be used; the message says why (it is the report's 'cold (why)')."""


class Missing(Refused):
    """The other host has no such file."""


def cpu_arch(cpuinfo="/proc/cpuinfo"):
    """The arch of a host without GPUs: the machine and a digest of the CPU's ISA flags (compiled CPU
    kernels depend on both)."""
    flags = ""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.split(":", 1)[0].strip() in ("flags", "Features"):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except (IOError, OSError):
        pass
    return "cpu-%s-%s" % (platform.machine(), hashlib.sha256(flags.encode()).hexdigest()[:12])


def gpu_arch(sms):
    """'sm_90' from the GPUs' sm values (a mixed host: 'sm_80+sm_90'); '' when there are none."""
    return "+".join(sorted(set(s for s in sms or [] if s)))


def driver_branch(version):
    return str(version).split(".", 1)[0] if version else "none"


def venv_digest(venv):
    """(python version, digest) of a venv: the interpreter version and the RECORD of every installed
    distribution (each lists every file of it with its sha256), so equal installs give equal digests on
    every host, and any added, removed or rebuilt package changes it."""
    real = os.path.realpath(venv)
    version = ""
    try:
        with open(os.path.join(real, "pyvenv.cfg")) as f:
            for line in f:
                k, v = line.partition("=")[::2]
                if k.strip() in ("version", "version_info"):
                    version = ".".join(v.strip().split(".")[:3])
    except (IOError, OSError):
        raise ValueError("%s is not a venv (no pyvenv.cfg)" % venv)
    records = sorted(glob.glob(os.path.join(real, "lib", "python*", "site-packages", "*.dist-info", "RECORD")))
    if not records:
        raise ValueError("%s has no installed distributions (no */site-packages/*.dist-info/RECORD)" % venv)
    h = hashlib.sha256(("python %s\n" % version).encode())
    for r in records:
        with open(r, "rb") as f:
            h.update(("%s %s\n" % (os.path.relpath(r, real), hashlib.sha256(f.read()).hexdigest())).encode())
    return version, h.hexdigest()[:16]


def patch_digest(venv, stamp):
    """The patch stamp's content digest ('unpatched' without one): the series' files, before and after."""
    path = os.path.join(os.path.realpath(venv), stamp)
    if not os.path.exists(path):
        return "unpatched"
    with open(path) as f:
        data = json.load(f)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def make_key(arch, driver, cuda, python, venv, patch):
    return {"version": KEY_VERSION, "arch": arch, "driver_branch": driver, "cuda": cuda or "none",
            "python": python, "venv": venv, "patch": patch}


def key_id(key):
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def show(value, limit=48):
    """A value from another host, fit for a message: printable ASCII, at most limit characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str) if value is not None else "none"
    text = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def key_difference(want, have):
    """'' when the keys are the same, else which fields differ, in words (the other side's values shown safely)."""
    if not isinstance(have, dict):
        return "no key"
    diff = ["%s %s, not %s" % (k, show(have.get(k)), want.get(k)) for k in ("version",) + KEY_FIELDS if have.get(k) != want.get(k)]
    return "; ".join(diff)


def _walk(dir_fd, prefix, out, uid, limits):
    """Entries below the directory open at dir_fd, without following any link: each name is stat'ed where it
    is (no path is resolved again), sub-directories are opened relative to their parent with O_NOFOLLOW."""
    with os.scandir(dir_fd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # gone since the listing
        if stat.S_ISDIR(st.st_mode):
            out.append({"path": rel, "type": "dir"})
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                raise Refused("%s cannot be opened as a directory (%s): it changed while being read" % (rel, exc.strerror))
            try:
                if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) != (st.st_dev, st.st_ino):
                    raise Refused("%s changed while being read" % rel)
                _walk(sub, rel + "/", out, uid, limits)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            if uid is not None and st.st_uid != uid:
                raise Refused("%s belongs to uid %d, not the cache's owner (uid %d)" % (rel, st.st_uid, uid))
            limits["bytes"] += st.st_size
            if limits["bytes"] > limits["max_bytes"]:
                raise Refused("the cache holds more than %d bytes" % limits["max_bytes"])
            with open_regular(dir_fd, name, st, rel) as f:
                h = hashlib.sha256()
                for block in iter(lambda: f.read(CHUNK), b""):
                    h.update(block)
            out.append({"path": rel, "type": "file", "size": st.st_size, "sha256": h.hexdigest(),
                        "mode": "%04o" % (stat.S_IMODE(st.st_mode) & 0o755), "_id": (st.st_dev, st.st_ino)})
        if len(out) > limits["max_files"]:
            raise Refused("the cache holds more than %d entries" % limits["max_files"])


def open_regular(dir_fd, name, st, rel):
    """The regular file name in the directory open at dir_fd, opened without following a link (O_NOFOLLOW;
    O_NONBLOCK so a FIFO put in its place cannot hang the read) and checked to be the inode the walk saw."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused("%s cannot be opened without following a link (%s): it changed while being read" % (rel, exc.strerror))
    now_st = os.fstat(fd)
    if not stat.S_ISREG(now_st.st_mode) or (now_st.st_dev, now_st.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise Refused("%s changed while being read (not the file the walk saw)" % rel)
    return os.fdopen(fd, "rb")


def tree(root, uid=None, max_bytes=None, max_files=MAX_FILES, ids=False):
    """Every directory and regular file under root, sorted: {path, type, size, sha256, mode}, read without
    following any link (root itself included). Links, sockets and other special files are left out (no cache
    needs them; an artefact must not carry them). uid: every file must belong to it (a cache is packed only
    from what its owner could read itself). Raises Refused past max_bytes or max_files, or when the tree
    changes under the walk. ids: keep each file's (dev, inode) as '_id' (pack opens the same file again)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise Refused("%s cannot be opened as a directory without following a link (%s)" % (root, exc.strerror))
    out = []
    try:
        _walk(fd, "", out, uid, {"bytes": 0, "max_bytes": max_bytes if max_bytes is not None else float("inf"),
                                 "max_files": max_files})
    finally:
        os.close(fd)
    if not ids:
        for e in out:
            e.pop("_id", None)
    return sorted(out, key=lambda e: e["path"])


def tree_digest(entries):
    clean = [dict((k, v) for k, v in e.items() if not k.startswith("_")) for e in entries]
    return hashlib.sha256(json.dumps(clean, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def file_count(root):
    """Regular files under root (a link, root itself included, is not followed and counts for nothing)."""
    if not os.path.isdir(root) or os.path.islink(root):
        return 0
    return sum(len([n for n in files if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n))])
               for d, _dirs, files in os.walk(root))


def _member(name, size=0, mode=0o644, kind=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.type, ti.mtime = size, mode, kind, 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


class _Checked(object):
    """Reads exactly size bytes of an open file for tarfile, hashing them; check() says whether they were the
    bytes the walk hashed (a cache its owner changes while root packs it is not packed)."""

    def __init__(self, f, entry):
        self.f, self.entry, self.left, self.h = f, entry, entry["size"], hashlib.sha256()

    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n) if n else b""
        self.left -= len(data)
        self.h.update(data)
        return data

    def check(self):
        if self.left or self.f.read(1) or self.h.hexdigest() != self.entry["sha256"]:
            raise Refused("%s changed while it was packed" % self.entry["path"])


def _open_under(root_fd, rel, entry):
    """The file rel under the directory open at root_fd, each part opened with O_NOFOLLOW, checked to be the
    inode the walk saw."""
    parts = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != entry["_id"]:
            raise Refused("%s changed while it was packed" % rel)
        return open_regular(fd, parts[-1], st, rel)
    except OSError as exc:
        raise Refused("%s changed while it was packed (%s)" % (rel, exc.strerror))
    finally:
        os.close(fd)


def pack(root, cache_dir, key, entries=None, uid=None, max_bytes=None):
    """Pack cache_dir as artifacts/<sha256>.tar.gz under root (the same content gives the same bytes) and
    return its index entry (not yet written): key, sha256, size, tree digest, file count. The bytes are read
    through file descriptors that follow no link, each file checked to be the one tree() saw and to hash as it
    did then; any change in between raises Refused and leaves nothing behind. entries: tree(cache_dir, ids=True)
    when the caller has it already."""
    entries = tree(cache_dir, uid=uid, max_bytes=max_bytes, ids=True) if entries is None else entries
    clean = [dict((k, v) for k, v in e.items() if not k.startswith("_")) for e in entries]
    manifest = {"key": key, "key_id": key_id(key), "files": clean}
    art_dir = os.path.join(root, "artifacts")
    tmp = os.path.join(staging_dir(root), "pack-%d.tar.gz" % os.getpid())
    root_fd = os.open(cache_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    data = json.dumps(manifest, sort_keys=True, indent=1).encode()
                    tar.addfile(_member(MANIFEST, len(data)), io.BytesIO(data))
                    for e in entries:
                        if e["type"] == "dir":
                            tar.addfile(_member("cache/" + e["path"], 0, 0o755, tarfile.DIRTYPE))
                            continue
                        with _open_under(root_fd, e["path"], e) as f:
                            src = _Checked(f, e)
                            tar.addfile(_member("cache/" + e["path"], e["size"], int(e["mode"], 8)), src)
                            src.check()
        digest = sha256_file(tmp)
        dest = os.path.join(art_dir, digest + ".tar.gz")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except (OSError, tarfile.TarError) as exc:
        raise Refused("the cache could not be packed: %s" % exc)
    finally:
        os.close(root_fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return {"key": key, "key_id": key_id(key), "sha256": digest, "size": os.path.getsize(dest),
            "tree": tree_digest(clean), "files": sum(1 for e in clean if e["type"] == "file")}


def read_json(path, cap):
    """A JSON document from a file of root's store, at most cap bytes; None when missing or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(cap + 1)
    if len(data) > cap:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def read_index(root, kid):
    return read_json(os.path.join(root, "keys", kid + ".json"), MAX_INDEX_BYTES)


def write_index(root, kid, index):
    """The index of key kid (the caller's own id: never a name taken from another host)."""
    atomic_write(os.path.join(root, "keys", kid + ".json"), json.dumps(index, sort_keys=True, indent=1) + "\n")


def check_index(index, key, max_size):
    """The index's fields a restore uses, checked for type and form: {sha256, size}. Raise Refused unless it is
    for exactly this key and names an artefact of at most max_size bytes."""
    if not isinstance(index, dict):
        raise Refused("its index is not a JSON object")
    diff = key_difference(key, index.get("key"))
    if diff:
        raise Refused("its key differs (%s)" % diff)
    sha, size = index.get("sha256"), index.get("size")
    if not isinstance(sha, str) or not HEX64.match(sha):
        raise Refused("its index names no artefact sha256 (%s)" % show(sha))
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise Refused("its index gives no artefact size (%s)" % show(size))
    if size > max_size:
        raise Refused("its artefact is %d bytes, more than the %d accepted" % (size, max_size))
    return {"sha256": sha, "size": size}


def check_manifest(doc, key, max_bytes):
    """The manifest's entries, checked for type and form ({path, type, size, sha256, mode}, each path once and
    safe), the key equal, the files' total at most max_bytes. Raise Refused."""
    if not isinstance(doc, dict):
        raise Refused("the artefact's manifest is not a JSON object")
    diff = key_difference(key, doc.get("key"))
    if diff:
        raise Refused("the artefact's manifest is for another key (%s)" % diff)
    files = doc.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise Refused("the artefact's manifest has no list of at most %d files" % MAX_FILES)
    want, total = {}, 0
    for e in files:
        if not isinstance(e, dict) or e.get("type") not in ("dir", "file"):
            raise Refused("the artefact's manifest has an entry that is not a file or directory (%s)" % show(e))
        try:
            rel = safe_relpath(e.get("path"), "a manifest path")
        except UnsafePath as exc:
            raise Refused(show(str(exc), 120))
        if rel in want:
            raise Refused("the artefact's manifest lists %s twice" % show(rel))
        if e["type"] == "dir":
            want[rel] = {"path": rel, "type": "dir"}
            continue
        size, sha, mode = e.get("size"), e.get("sha256"), e.get("mode")
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(sha, str)
                or not HEX64.match(sha) or not isinstance(mode, str) or not MODE.match(mode)):
            raise Refused("the artefact's manifest entry for %s has no valid size, sha256 and mode" % show(rel))
        total += size
        if total > max_bytes:
            raise Refused("the artefact unpacks to more than %d bytes" % max_bytes)
        want[rel] = {"path": rel, "type": "file", "size": size, "sha256": sha, "mode": mode}
    return want


class _Capped(object):
    """The decompressed artefact for tarfile, refusing any single read larger than MAX_HEADER_READ (tarfile
    reads a pax header whole: a hostile one could ask for gigabytes)."""

    def __init__(self, f):
        self.f = f

    def read(self, n=-1):
        if n is None or n < 0 or n > MAX_HEADER_READ:
            raise Refused("the artefact asks for a read of %s bytes at once (a hostile tar header)" % n)
        return self.f.read(n)

    def seek(self, *a):
        return self.f.seek(*a)

    def tell(self):
        return self.f.tell()


def extract(path, key, staging, max_bytes, max_manifest=MAX_MANIFEST_BYTES):
    """Unpack the artefact at path into staging (which must not exist; its parent only root can write),
    checking its manifest (capped before it is read, every field checked), every member's name and type, and
    every file's size (before its bytes are read) and sha256 against the manifest. Raise Refused on any
    difference (staging is then removed). Returns the manifest's entries."""
    os.mkdir(staging, 0o700)
    try:
        with gzip.open(path, "rb") as gz, tarfile.open(fileobj=_Capped(gz), mode="r:") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise Refused("the artefact does not start with its manifest")
            if first.size > max_manifest:
                raise Refused("the artefact's manifest is %d bytes, more than the %d accepted" % (first.size, max_manifest))
            src = tar.extractfile(first)  # read in chunks: one read of it all would be refused as a hostile header
            want = check_manifest(json.loads(b"".join(iter(lambda: src.read(CHUNK), b"")).decode("utf-8")), key, max_bytes)
            seen = set()
            while True:
                m = tar.next()  # iterating the TarFile would start again from its first member
                if m is None:
                    break
                if not m.name.startswith("cache/"):
                    raise Refused("the artefact holds %s outside its cache" % show(m.name))
                rel = safe_relpath(m.name[len("cache/"):], "an artefact member")
                e = want.get(rel)
                if e is None:
                    raise Refused("the artefact holds %s, which its manifest does not list" % show(rel))
                if rel in seen:
                    raise Refused("the artefact holds %s twice" % show(rel))
                dest = os.path.join(staging, rel)
                if m.isdir() and e["type"] == "dir":
                    os.makedirs(dest, exist_ok=True)
                elif m.isfile() and e["type"] == "file":
                    if m.size != e["size"]:
                        raise Refused("%s in the artefact is %d bytes, its manifest says %d" % (show(rel), m.size, e["size"]))
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    h, left = hashlib.sha256(), m.size
                    src = tar.extractfile(m)
                    with open(dest, "xb") as out:
                        while left:
                            block = src.read(min(CHUNK, left))
                            if not block:
                                break
                            left -= len(block)
                            h.update(block)
                            out.write(block)
                    if left or h.hexdigest() != e["sha256"]:
                        raise Refused("%s in the artefact differs from its manifest" % show(rel))
                    os.chmod(dest, int(e["mode"], 8) & 0o755)
                else:
                    raise Refused("%s in the artefact is a %s, its manifest says %s (links and devices are refused)"
                                  % (show(rel), "directory" if m.isdir() else "special file" if not m.isfile() else "file", e["type"]))
                seen.add(rel)
            missing = sorted(set(want) - seen)
            if missing:
                raise Refused("the artefact lacks %d file(s) its manifest lists (first %s): partial" % (len(missing), show(missing[0])))
            return sorted(want.values(), key=lambda e: e["path"])
    except Refused:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, TypeError, UnsafePath, UnicodeDecodeError,
            gzip.BadGzipFile, MemoryError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Refused("the artefact cannot be unpacked: %s" % show(str(exc), 160))


def incoming_name(kid):
    """The artefact being fetched for key kid, under artifacts/ (root's, 0600): hosts that pull from this one
    see it grow while they wait (module_utils/fanout.py)."""
    return ".incoming-%s.part" % kid


def staging_dir(root):
    """root's own scratch directory (0700): nothing in it is reachable by another user."""
    path = os.path.join(root, STAGING)
    if not os.path.isdir(path):
        os.makedirs(path, 0o700)
    return path


def install(artifact, index, key, cache, max_bytes, ids=None):
    """Unpack the artefact (already checked against index: size and sha256) into the key's cache directory:
    extracted and chowned to ids=(uid, gid) inside root's staging directory, then renamed into place; whatever
    was at the cache's path (an empty or partial directory) is first moved into the staging directory and
    removed there. Returns the manifest's entries; raises Refused."""
    root = os.path.dirname(os.path.dirname(cache))
    staging = os.path.join(staging_dir(root), "unpack-%s-%d" % (os.path.basename(cache), os.getpid()))
    entries = extract(artifact, key, staging, max_bytes)
    try:
        if ids:
            chown_tree(staging, *ids)
        os.chmod(staging, 0o755)
        set_aside(root, cache)
        os.rename(staging, cache)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Refused("the cache could not be put in place: %s" % exc)
    return entries


def set_aside(root, path):
    """Move whatever is at path (in a directory only root can write) into root's staging directory and remove
    it there: root never walks into a tree its owner can still change at that path."""
    if os.path.lexists(path):
        aside = tempfile.mkdtemp(prefix="old-", dir=staging_dir(root))  # a fresh name: none of the other user's choosing
        os.rmdir(aside)
        os.rename(path, aside)
        remove(aside)


def remove(path):
    """Remove a file, link or tree without following links (shutil.rmtree works through file descriptors
    here); what cannot be removed now (its owner is still writing into it) is left for the next run."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def chown_tree(root, uid, gid):
    for d, dirs, files in os.walk(root):
        os.lchown(d, uid, gid)
        for name in files + dirs:
            os.lchown(os.path.join(d, name), uid, gid)


class StoreError(Exception):
    """The store's own layout is not what root can trust (a link, or a directory another user owns)."""


def prepare(root, write=True):
    """The store's layout as only root can change it: root, caches/, artifacts/, keys/ real directories
    (never links) owned by this process's user and writable by it alone; .staging/ 0700. A caches/ left owned
    by the service user (before the trust fix) is taken back, and anything in it that is not a key's real
    directory is removed. Leftovers of a killed run (in .staging/, and the old .incoming names) are removed.
    write=False (check mode) only looks. Raises StoreError."""
    me = os.geteuid()
    for sub in ("", "caches", "artifacts", "keys", STAGING):
        path = os.path.join(root, sub) if sub else root
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if write:
                os.makedirs(path, 0o700 if sub == STAGING else 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError("%s is not a directory (%s): remove it, the next run makes it again"
                             % (path, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a file"))
        if (st.st_uid != me or st.st_mode & 0o022) and write:
            if sub not in ("caches", STAGING) and st.st_uid != me:
                raise StoreError("%s belongs to uid %d, not root: another user could redirect root's writes; "
                                 "remove it, the next run makes it again" % (path, st.st_uid))
            os.chown(path, me, os.getegid())
            os.chmod(path, 0o700 if sub == STAGING else 0o755)
        if sub == STAGING and write:
            for name in os.listdir(path):
                remove(os.path.join(path, name))
    caches = os.path.join(root, "caches")
    if write and os.path.isdir(caches):
        for name in os.listdir(caches):
            p = os.path.join(caches, name)
            if not KEY_ID.match(name) or not stat.S_ISDIR(os.lstat(p).st_mode):
                set_aside(root, p)  # only key directories live here
        for p in glob.glob(os.path.join(root, "artifacts", ".incoming-*")):
            remove(p)


class Lock(object):
    """One warm_cache run at a time on a store (a second waits): staging is cleaned only when no run uses it."""

    def __init__(self, root):
        self.path = os.path.join(root, STAGING + ".lock")
        self.fd = None

    def __enter__(self):
        if not os.path.lexists(os.path.dirname(self.path)):
            os.makedirs(os.path.dirname(self.path), 0o755)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def prune(root, keep, live):
    """Keep the live key and the keep - 1 newest others (by when they were packed): remove the other keys'
    index and cache directory, and every artefact no kept index names. Returns what was removed."""
    indexes = []
    for p in glob.glob(os.path.join(root, "keys", "*.json")):
        index = read_json(p, MAX_INDEX_BYTES)
        indexes.append((index if isinstance(index, dict) else {}, os.path.basename(p)[:-len(".json")]))
    indexes.sort(key=lambda x: x[0].get("packed_at") if isinstance(x[0].get("packed_at"), (int, float)) else 0, reverse=True)
    others = [kid for _i, kid in indexes if kid != live]
    kept = set([live] + others[:max(keep - 1, 0)])
    removed = []
    for kid in others[max(keep - 1, 0):]:
        os.unlink(os.path.join(root, "keys", kid + ".json"))
        removed.append("keys/%s.json" % kid)
    for d in glob.glob(os.path.join(root, "caches", "*")):
        if os.path.basename(d) not in kept:
            set_aside(root, d)
            removed.append("caches/%s" % os.path.basename(d))
    names = set(i.get("sha256") for i, kid in indexes if kid in kept)
    for a in glob.glob(os.path.join(root, "artifacts", "*.tar.gz")):
        if os.path.basename(a)[:-len(".tar.gz")] not in names:
            os.unlink(a)
            removed.append("artifacts/%s" % os.path.basename(a))
    return removed


def _last_line(err):
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return show(lines[-1], 160) if lines else ""


def fetch(argv, timeout, cap, dest=None):
    """Run argv (ssh ... cat <file>) and take its stdout: at most cap bytes (more is refused as soon as it
    arrives, and the transfer stopped), within timeout seconds; into the open file dest, else returned.
    Raise Refused (with the last line of the other side's error)."""
    deadline = time.time() + timeout
    with tempfile.TemporaryFile() as err:
        # not run_command: a peer's stream read with a byte cap and a deadline: run_command reads it all
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)  # pylint: disable=ansible-bad-function
        got, chunks, why = 0, [], None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.time()
                if left <= 0 or not sel.select(left):
                    why = "the transfer took more than %d s" % timeout
                    break
                block = os.read(proc.stdout.fileno(), CHUNK)
                if not block:
                    break
                got += len(block)
                if got > cap:
                    why = "it sent more than the %d bytes expected" % cap
                    break
                if dest is None:
                    chunks.append(block)
                else:
                    dest.write(block)
        finally:
            sel.close()
            if why:
                proc.kill()
            proc.stdout.close()
            rc = proc.wait()
        if why:
            raise Refused(why)
        if rc != 0:
            err.seek(max(0, err.seek(0, 2) - 4096))
            tail = err.read()
            raise (Missing if b"No such file or directory" in tail else Refused)(_last_line(tail) or "rc %d" % rc)
    return b"".join(chunks) if dest is None else got


def verify_artifact(path, index):
    """Raise Refused unless the file at path (a regular file, not a link) is the artefact the checked index
    names: its size, then its sha256."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Refused("the artefact is not a regular file")
    if st.st_size != index["size"]:
        raise Refused("the artefact is %d bytes, its index says %d (partial or replaced)" % (st.st_size, index["size"]))
    got = sha256_file(path)
    if got != index["sha256"]:
        raise Refused("the artefact's sha256 is %s, its index says %s (corrupt)" % (got[:16], index["sha256"][:16]))


def now():
    return int(time.time())
