"""warm_cache against the service user: a real unprivileged process (uid nobody, the cache's owner, as the
service user that runs model code would be) races root while root restores and packs. It swaps directories
and files for links into a root-only directory, plants links beside the caches and tries hard links and
FIFOs. Root must never write, chown or read outside the store for it: the root-only directory stays as it
was, and no artefact ever holds the root-only secret."""
import grp
import gzip
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid).gr_name
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plays root against an unprivileged user: run as root")

KEY = wc.make_key("sm_103", "580", "12.9", "3.11.2", "v" * 16, "unpatched")
KID = wc.key_id(KEY)
SECRET = b"TOPSECRET-root-only-" + os.urandom(8).hex().encode()

# The racer runs as nobody: it loops until its deadline, doing every swap it can, and prints how many of
# its operations succeeded and failed.
RACER = r"""
import os, sys, time
mode, target, secret_dir, until = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ok = denied = 0
def tryit(f, *a):
    global ok, denied
    try:
        f(*a); ok += 1
    except OSError:
        denied += 1
while time.time() < until:
    if mode == "restore":
        caches = os.path.join(target, "caches")
        for where in (caches, target, os.path.join(target, ".staging")):
            try:
                names = os.listdir(where)
            except OSError:
                denied += 1
                continue
            for n in names:
                p = os.path.join(where, n)
                if n.startswith(".") or "incoming" in n or "unpack" in n or where == caches:
                    tryit(os.rename, p, p + ".moved")
                    tryit(os.symlink, secret_dir, p)
        tryit(os.symlink, secret_dir, os.path.join(caches, "planted"))
        kid = os.path.join(caches, sys.argv[5])
        if os.path.isdir(kid) and not os.path.islink(kid):
            for sub in ("triton", "inductor"):
                tryit(os.symlink, secret_dir, os.path.join(kid, sub))
    else:
        secret = os.path.join(secret_dir, "secret")
        for n in sorted(os.listdir(target)):
            p = os.path.join(target, n)
            if n.endswith(".real") or os.path.islink(p):
                continue
            try:
                os.rename(p, p + ".real")
            except OSError:
                denied += 1
                continue
            tryit(os.symlink, secret, p)
            time.sleep(0.0005)
            tryit(os.unlink, p)
            tryit(os.mkfifo, p)
            time.sleep(0.0005)
            tryit(os.unlink, p)
            os.rename(p + ".real", p)
            ok += 1
        tryit(os.link, secret, os.path.join(target, "hardlink"))
print("%d %d" % (ok, denied))
"""


@pytest.fixture
def world():
    """A base directory nobody can traverse (tmp_path is root's alone), with a root-only directory holding a
    root-only secret."""
    base = tempfile.mkdtemp(prefix="warm-race-", dir="/var/tmp")
    os.chmod(base, 0o755)
    secret_dir = os.path.join(base, "rootonly")
    os.mkdir(secret_dir, 0o700)
    with open(os.path.join(secret_dir, "secret"), "wb") as f:
        f.write(SECRET)
    os.chmod(os.path.join(secret_dir, "secret"), 0o600)
    yield base, secret_dir
    shutil.rmtree(base, ignore_errors=True)


def snapshot(d):
    return sorted((n, os.lstat(os.path.join(d, n)).st_uid, stat.S_IMODE(os.lstat(os.path.join(d, n)).st_mode),
                   open(os.path.join(d, n), "rb").read()) for n in os.listdir(d))


def racer(mode, target, secret_dir, seconds, *extra):
    return subprocess.Popen(["/usr/bin/python3", "-c", RACER, mode, target, secret_dir, str(time.time() + seconds)] + list(extra),
                            user=NOBODY.pw_uid, group=NOBODY.pw_gid, stdout=subprocess.PIPE, text=True)


def racer_result(proc):
    out, _err = proc.communicate(timeout=120)
    ok, denied = (int(x) for x in out.split())
    return ok, denied


def peer_artifact(base, files=2000):
    """A peer's store with an artefact of `files` small files for KEY."""
    peer = os.path.join(base, "peer")
    wc.prepare(peer)
    cache = os.path.join(peer, "caches", KID)
    for i in range(files):
        d = os.path.join(cache, "triton", "k%02d" % (i % 40))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "kernel%04d.cubin" % i), "wb") as f:
            f.write(b"cubin-%d" % i)
    packed = wc.pack(peer, cache, KEY)
    wc.write_index(peer, KID, packed)
    return peer, packed


def test_restore_against_a_racing_service_user(world, run_module, tmp_path, monkeypatch):
    """The store as a host before the trust fix left it (caches/ owned by the service user, the key's directory
    empty), a racer of that user swapping everything it can see for links into a root-only directory while
    root restores 2,000 files from a peer: root takes caches/ back, stages where the racer cannot reach, and
    nothing in the root-only directory is written or chowned."""
    base, secret_dir = world
    peer, packed = peer_artifact(base)
    store = os.path.join(base, "store")
    os.makedirs(os.path.join(store, "caches", KID))
    for p in (os.path.join(store, "caches"), os.path.join(store, "caches", KID)):
        os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    before = snapshot(secret_dir)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # TEST DOUBLE: ssh that runs here, through a shell, the one command string after '-- HOST'
    (bindir / "ssh").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; exec sh -c "$3"\n')
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    proc = racer("restore", store, secret_dir, 20, KID)
    time.sleep(1)  # the racer owns the old layout first
    r = run_module("warm_cache", state="restore", root=store, key=KEY, owner=NOBODY.pw_name, group=NOGROUP,
                   sources=[{"name": "peer", "address": "peer"}], peer_root=peer)
    ok, denied = racer_result(proc)
    assert r.get("failed") is not True, r
    assert denied > 0, (ok, denied)  # it tried, and was refused
    assert snapshot(secret_dir) == before  # nothing written, chowned or moved in the root-only directory
    cache = os.path.join(store, "caches", KID)
    st = os.lstat(os.path.join(store, "caches"))
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o755 and not os.path.islink(cache), (r, os.listdir(os.path.join(store, "caches")))
    if r["warm"]:
        got = wc.tree(cache)
        assert sum(1 for e in got if e["type"] == "file") == 2000
        for d, dirs, files in os.walk(cache):
            for n in dirs + files:
                st = os.lstat(os.path.join(d, n))
                assert not stat.S_ISLNK(st.st_mode) or n in ("triton", "inductor"), os.path.join(d, n)
                assert st.st_uid == NOBODY.pw_uid
    else:  # the racer can make a start cold (its own cache), never make root act for it
        assert r["verdict"].startswith("cold"), r
    assert not [n for n in os.listdir(os.path.join(store, "caches")) if n != KID]
    assert not os.listdir(os.path.join(store, ".staging"))


def test_pack_against_a_racing_service_user(world):
    """While root packs the cache 25 times, its owner swaps every file for a link to a root-only secret (and
    a FIFO), and tries a hard link to it: no artefact ever holds the secret; a pack either holds exactly
    the owner's files or is refused with the reason."""
    base, secret_dir = world
    store = os.path.join(base, "store")
    wc.prepare(store)
    cache = os.path.join(store, "caches", KID)
    os.mkdir(cache)
    for i in range(40):
        with open(os.path.join(cache, "f%02d" % i), "wb") as f:
            f.write(b"public-%d" % i)
    for p in [cache] + [os.path.join(cache, n) for n in os.listdir(cache)]:
        os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    proc = racer("pack", cache, secret_dir, 15)
    packed = refused = 0
    reasons = set()
    deadline = time.time() + 14
    while time.time() < deadline and packed + refused < 25:
        try:
            art = wc.pack(store, cache, KEY, uid=NOBODY.pw_uid)
        except wc.Refused as exc:
            refused += 1
            reasons.add(str(exc).split(" ", 1)[1][:40])
            continue
        packed += 1
        data = gzip.decompress(open(os.path.join(store, "artifacts", art["sha256"] + ".tar.gz"), "rb").read())
        assert SECRET not in data
    ok, _denied = racer_result(proc)
    assert ok > 0 and packed + refused > 0, (ok, packed, refused)
    assert not os.listdir(os.path.join(store, ".staging"))
    for name in os.listdir(os.path.join(store, "artifacts")):
        assert SECRET not in gzip.decompress(open(os.path.join(store, "artifacts", name), "rb").read())


def test_links_fifos_and_files_of_another_owner_are_never_packed(world):
    base, secret_dir = world
    store = os.path.join(base, "store")
    wc.prepare(store)
    cache = os.path.join(store, "caches", KID)
    os.mkdir(cache)
    with open(os.path.join(cache, "kernel"), "wb") as f:
        f.write(b"public")
    os.symlink(os.path.join(secret_dir, "secret"), os.path.join(cache, "link"))
    os.symlink(secret_dir, os.path.join(cache, "dirlink"))
    os.mkfifo(os.path.join(cache, "fifo"))
    for p in (cache, os.path.join(cache, "kernel")):
        os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    art = wc.pack(store, cache, KEY, uid=NOBODY.pw_uid)
    manifest = [e["path"] for e in json.loads(json.dumps(wc.tree(cache, uid=NOBODY.pw_uid)))]
    assert manifest == ["kernel"] and art["files"] == 1
    assert SECRET not in gzip.decompress(open(os.path.join(store, "artifacts", art["sha256"] + ".tar.gz"), "rb").read())
    with open(os.path.join(cache, "rootfile"), "wb") as f:  # a file the owner could not have written
        f.write(SECRET)
    with pytest.raises(wc.Refused, match="rootfile belongs to uid 0, not the cache's owner"):
        wc.pack(store, cache, KEY, uid=NOBODY.pw_uid)
    # a cache directory that is itself a link is not followed
    os.rename(cache, cache + ".real")
    os.symlink(secret_dir, cache)
    with pytest.raises(wc.Refused, match="without following a link"):
        wc.tree(cache, uid=NOBODY.pw_uid)
