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
A key is matched exactly, field by field; an artefact is used only when its sha256, its manifest's key and every
file's sha256 agree. Anything else is a refusal with a reason, and the caller starts cold."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import time

from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, safe_relpath
from ansible_collections.ddtree.fleet.plugins.module_utils.venv_artifact import sha256_file

KEY_VERSION = 1
KEY_FIELDS = ("arch", "driver_branch", "cuda", "python", "venv", "patch")
MANIFEST = "MANIFEST.ddtree-warm.json"
CHUNK = 1 << 20


class Refused(Exception):
    """An artefact that must not be used; the message says why (it is the report's 'cold (why)')."""


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


def key_difference(want, have):
    """'' when the keys are the same, else which fields differ, in words."""
    if not isinstance(have, dict):
        return "no key"
    diff = ["%s %s, not %s" % (k, have.get(k), want.get(k)) for k in ("version",) + KEY_FIELDS if have.get(k) != want.get(k)]
    return "; ".join(diff)


def tree(root):
    """Every directory and regular file under root, sorted: {path, type, size, sha256, mode}. Links,
    sockets and other special files are left out (no cache needs them; an artefact must not carry them)."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISDIR(st.st_mode):
                out.append({"path": rel, "type": "dir"})
            elif stat.S_ISREG(st.st_mode):
                out.append({"path": rel, "type": "file", "size": st.st_size, "sha256": sha256_file(p),
                            "mode": "%04o" % (stat.S_IMODE(st.st_mode) & 0o755)})
    return sorted(out, key=lambda e: e["path"])


def tree_digest(entries):
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def file_count(root):
    return sum(len(files) for _d, _dirs, files in os.walk(root)) if os.path.isdir(root) else 0


def _member(name, size=0, mode=0o644, kind=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.type, ti.mtime = size, mode, kind, 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def pack(root, cache_dir, key, entries=None):
    """Pack cache_dir as artifacts/<sha256>.tar.gz under root (the same content gives the same bytes) and
    return its index entry (not yet written): key, sha256, size, tree digest, file count. entries: tree(cache_dir)
    when the caller has it already (each file is hashed once)."""
    entries = tree(cache_dir) if entries is None else entries
    manifest = {"key": key, "key_id": key_id(key), "files": entries}
    art_dir = os.path.join(root, "artifacts")
    os.makedirs(art_dir, exist_ok=True)
    tmp = os.path.join(art_dir, ".incoming-%d.tar.gz" % os.getpid())
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                data = json.dumps(manifest, sort_keys=True, indent=1).encode()
                tar.addfile(_member(MANIFEST, len(data)), io.BytesIO(data))
                for e in entries:
                    if e["type"] == "dir":
                        tar.addfile(_member("cache/" + e["path"], 0, 0o755, tarfile.DIRTYPE))
                    else:
                        with open(os.path.join(cache_dir, e["path"]), "rb") as f:
                            tar.addfile(_member("cache/" + e["path"], e["size"], int(e["mode"], 8)), f)
    digest = sha256_file(tmp)
    dest = os.path.join(art_dir, digest + ".tar.gz")
    os.replace(tmp, dest)
    os.chmod(dest, 0o644)
    return {"key": key, "key_id": key_id(key), "sha256": digest, "size": os.path.getsize(dest),
            "tree": tree_digest(entries), "files": sum(1 for e in entries if e["type"] == "file")}


def read_index(root, kid):
    path = os.path.join(root, "keys", kid + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError, ValueError):
        return None


def write_index(root, index):
    os.makedirs(os.path.join(root, "keys"), exist_ok=True)
    atomic_write(os.path.join(root, "keys", index["key_id"] + ".json"), json.dumps(index, sort_keys=True, indent=1) + "\n")


def check_index(index, key):
    """Raise Refused unless the index is for exactly this key and names an artefact."""
    if not isinstance(index, dict):
        raise Refused("its index is not JSON")
    diff = key_difference(key, index.get("key"))
    if diff:
        raise Refused("its key differs (%s)" % diff)
    sha = index.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise Refused("its index names no artefact sha256")
    if not isinstance(index.get("size"), int) or index["size"] < 0:
        raise Refused("its index gives no artefact size")


def verify_artifact(path, index):
    """Raise Refused unless the file at path is the artefact the index names (size and sha256)."""
    size = os.path.getsize(path)
    if size != index["size"]:
        raise Refused("the artefact is %d bytes, its index says %d (partial or replaced)" % (size, index["size"]))
    got = sha256_file(path)
    if got != index["sha256"]:
        raise Refused("the artefact's sha256 is %s, its index says %s (corrupt)" % (got[:16], index["sha256"][:16]))


def extract(path, key, staging, max_bytes):
    """Unpack the artefact at path into staging (which must not exist), checking its manifest's key, every
    member's name and type, and every file's size and sha256 against the manifest. Raise Refused on any
    difference (staging is then removed). Returns the number of files."""
    os.makedirs(staging)
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise Refused("the artefact does not start with its manifest")
            manifest = json.loads(tar.extractfile(first).read().decode())
            diff = key_difference(key, manifest.get("key"))
            if diff:
                raise Refused("the artefact's manifest is for another key (%s)" % diff)
            want = dict((e["path"], e) for e in manifest.get("files") or [])
            seen, total = set(), 0
            while True:
                m = tar.next()  # iterating the TarFile would start again from its first member
                if m is None:
                    break
                if not m.name.startswith("cache/"):
                    raise Refused("the artefact holds %r outside its cache" % m.name)
                rel = safe_relpath(m.name[len("cache/"):], "an artefact member")
                e = want.get(rel)
                if e is None:
                    raise Refused("the artefact holds %s, which its manifest does not list" % rel)
                dest = os.path.join(staging, rel)
                if m.isdir() and e["type"] == "dir":
                    os.makedirs(dest, exist_ok=True)
                elif m.isfile() and e["type"] == "file":
                    total += m.size
                    if total > max_bytes:
                        raise Refused("the artefact unpacks to more than %d bytes" % max_bytes)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    h = hashlib.sha256()
                    src = tar.extractfile(m)
                    with open(dest, "wb") as out:
                        for block in iter(lambda: src.read(CHUNK), b""):
                            h.update(block)
                            out.write(block)
                    if m.size != e["size"] or h.hexdigest() != e["sha256"]:
                        raise Refused("%s in the artefact differs from its manifest" % rel)
                    os.chmod(dest, int(e["mode"], 8) & 0o755)
                else:
                    raise Refused("%s in the artefact is a %s, its manifest says %s (links and devices are refused)"
                                  % (rel, "directory" if m.isdir() else "special file" if not m.isfile() else "file", e["type"]))
                seen.add(rel)
            missing = sorted(set(want) - seen)
            if missing:
                raise Refused("the artefact lacks %d file(s) its manifest lists (first %s): partial" % (len(missing), missing[0]))
            return sum(1 for e in want.values() if e["type"] == "file")
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, TypeError, UnsafePath, gzip.BadGzipFile) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Refused("the artefact cannot be unpacked: %s" % exc)
    except Refused:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def install(artifact, index, key, cache, max_bytes, ids=None):
    """Unpack the artefact the index names into the key's cache directory: checked (the index's key, the
    artefact's size and sha256, then extract's checks) into a temporary directory beside it, owned by
    ids=(uid, gid) when given, then renamed into place over an empty one. Returns the number of files; raises
    Refused."""
    check_index(index, key)
    verify_artifact(artifact, index)
    staging = os.path.join(os.path.dirname(cache), ".%s.incoming-%d" % (os.path.basename(cache), os.getpid()))
    shutil.rmtree(staging, ignore_errors=True)
    files = extract(artifact, key, staging, max_bytes)
    if ids:
        chown_tree(staging, *ids)
    os.chmod(staging, 0o755)
    if os.path.isdir(cache):
        os.rmdir(cache)  # empty (a non-empty one is used as it is)
    os.rename(staging, cache)
    return files


def chown_tree(root, uid, gid):
    for d, dirs, files in os.walk(root):
        os.lchown(d, uid, gid)
        for name in files + dirs:
            os.lchown(os.path.join(d, name), uid, gid)


def prune(root, keep, live):
    """Keep the live key and the keep - 1 newest others (by when they were packed): remove the other keys'
    index and cache directory, and every artefact no kept index names. Returns what was removed."""
    indexes = []
    for p in glob.glob(os.path.join(root, "keys", "*.json")):
        try:
            with open(p) as f:
                index = json.load(f)
        except (IOError, OSError, ValueError):
            index = {}
        indexes.append((index if isinstance(index, dict) else {}, os.path.basename(p)[:-len(".json")]))
    indexes.sort(key=lambda x: x[0].get("packed_at") or 0, reverse=True)
    others = [kid for _i, kid in indexes if kid != live]
    kept = set([live] + others[:max(keep - 1, 0)])
    removed = []
    for kid in others[max(keep - 1, 0):]:
        os.unlink(os.path.join(root, "keys", kid + ".json"))
        removed.append("keys/%s.json" % kid)
    for d in glob.glob(os.path.join(root, "caches", "*")):
        if os.path.basename(d) not in kept and os.path.isdir(d) and not os.path.islink(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append("caches/%s" % os.path.basename(d))
    names = set(i.get("sha256") for i, kid in indexes if kid in kept)
    for a in glob.glob(os.path.join(root, "artifacts", "*.tar.gz")):
        if os.path.basename(a)[:-len(".tar.gz")] not in names:
            os.unlink(a)
            removed.append("artifacts/%s" % os.path.basename(a))
    return removed


def fetch_to(argv, dest, timeout):
    """argv's stdout (ssh ... cat <artefact>) into the file dest, within timeout seconds. Raise Refused."""
    with open(dest, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.PIPE)
        try:
            _out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise Refused("the transfer took more than %d s" % timeout)
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines() or ["rc %d" % proc.returncode]
        raise Refused("the transfer failed (%s)" % lines[-1])


def now():
    return int(time.time())
