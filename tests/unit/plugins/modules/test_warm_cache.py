"""warm_cache for real through ansible-playbook: the key from a real venv's records and patch stamp, pack,
restore from this host's store and from a "peer" (another store, reached through a TEST DOUBLE of ssh
that runs the remote command locally: the real ssh path runs in molecule/fleet), and every refusal -
another key, a corrupt, partial or hostile artefact - ends cold with the reason, never failed."""
import grp
import gzip
import io
import json
import os
import pwd
import shutil
import stat
import sys
import tarfile

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc

ME = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def make_venv(path, version="1.0"):
    site = path / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    dist = site / ("probe-%s.dist-info" % version)
    dist.mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\nversion = %d.%d.%d\n" % sys.version_info[:3])
    (dist / "RECORD").write_text("probe.py,sha256=abc,%d\n" % len(version))
    (site / "probe.py").write_text(version)
    return path


def fill(cache, n=3):
    (cache / "triton" / "k1").mkdir(parents=True)
    for i in range(n):
        (cache / "triton" / "k1" / ("kernel%d.cubin" % i)).write_bytes(os.urandom(2000))
    (cache / "inductor").mkdir()
    (cache / "inductor" / "graph.so").write_bytes(b"\x7fELF" + os.urandom(500))


@pytest.fixture
def fleet(tmp_path, run_module, monkeypatch):
    """Two hosts' stores (a, b) with the same venv; key(store) runs state=key against it."""
    venv = make_venv(tmp_path / "venv")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # TEST DOUBLE: ssh that runs here, through a shell as sshd would, the one command string after '-- HOST'
    # (the peer's store is a local directory)
    (bindir / "ssh").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; exec sh -c "$3"\n')
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))

    def key(store, **kw):
        args = dict(state="key", root=str(store), arch="sm_103", driver="580.95.05", cuda="12.9", venv=str(venv))
        args.update(kw)
        return run_module("warm_cache", **args)

    def call(state, store, k, check=False, **kw):
        return run_module("warm_cache", check=check, state=state, root=str(store), key=k, owner=ME, group=GROUP, **kw)
    return tmp_path / "a", tmp_path / "b", venv, key, call


@pytest.fixture(scope="session")
def packed_once(tmp_path_factory):
    """Where the session's packed store is made (by the first test that asks for it: see packed)."""
    return {"base": tmp_path_factory.mktemp("warm-packed")}


def modes(root):
    """Every path under root (root itself included) with its mode, owner and group, not following links."""
    out = {}
    for d, dirs, files in os.walk(str(root)):
        for p in [d] + [os.path.join(d, n) for n in dirs + files]:
            st = os.lstat(p)
            out[os.path.relpath(p, str(root))] = (st.st_mode, st.st_uid, st.st_gid)
    return out


@pytest.fixture
def packed(packed_once, run_module):
    """packed(store) -> the key ({key, key_id}) of a store a host packed a cache in, copied to store (none: the
    key alone). The store is made once a session (per xdist worker) by the real module, as fleet's tests made
    their own (key of a make_venv venv, restore, fill, pack), and never changed: each test gets its own copy,
    modes and owners as the module left them. The key is the venv's content and the arguments, not its path, so
    it is the key of every fleet's venv."""
    base = packed_once["base"]
    if "key" not in packed_once:
        venv = make_venv(base / "venv")
        store = base / "store"
        k = run_module("warm_cache", workdir=base / "run", state="key", root=str(store), arch="sm_103",
                       driver="580.95.05", cuda="12.9", venv=str(venv))
        assert k.get("failed") is not True and not k["held"], k
        run_module("warm_cache", workdir=base / "run", state="restore", root=str(store), key=k["key"], owner=ME, group=GROUP)
        fill(store / "caches" / k["key_id"])
        p = run_module("warm_cache", workdir=base / "run", state="pack", root=str(store), key=k["key"], owner=ME, group=GROUP)
        assert p["changed"] and p["artifact"]["files"] == 4, p
        packed_once.update(key=dict(key=k["key"], key_id=k["key_id"]), modes=modes(store))

    def copy(store=None):
        if store is not None:
            shutil.copytree(str(base / "store"), str(store), symlinks=True)
            assert modes(store) == packed_once["modes"]  # as freshly made: the module's checks see no difference
        return dict(packed_once["key"])
    return copy


def test_key_follows_arch_driver_branch_cuda_venv_and_patch(fleet):
    a, _b, venv, key, _call = fleet
    k = key(a)
    assert k["changed"] is False and not k["held"] and k["cache_dir"] == str(a / "caches" / k["key_id"])
    assert k["key"]["arch"] == "sm_103" and k["key"]["driver_branch"] == "580" and k["key"]["patch"] == "unpatched"
    assert key(a, driver="580.105.08")["key_id"] == k["key_id"]  # the same branch
    for other in (dict(arch="sm_120"), dict(driver="575.57.08"), dict(cuda="13.0")):
        assert key(a, **other)["key_id"] != k["key_id"], other
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "probe-1.0.dist-info" / "RECORD").write_text("probe.py,sha256=def,3\n")  # a rebuilt package
    rebuilt = key(a)
    assert rebuilt["key_id"] != k["key_id"] and rebuilt["key"]["venv"] != k["key"]["venv"]
    (venv / ".ddtree").mkdir()
    (venv / ".ddtree" / "sglang-patch.json").write_text(json.dumps({"series": "s", "patches": ["p1"]}))
    patched = key(a)
    assert patched["key"]["patch"] != "unpatched" and patched["key_id"] != rebuilt["key_id"]
    cpu = key(a, arch="", driver="")
    assert cpu["key"]["arch"].startswith("cpu-") and cpu["key"]["driver_branch"] == "none"


def test_a_venv_without_records_is_a_clear_failure(fleet, tmp_path):
    a, _b, _venv, key, _call = fleet
    (tmp_path / "empty").mkdir()
    r = key(a, venv=str(tmp_path / "empty"))
    assert r["failed"] and "not a venv (no pyvenv.cfg)" in r["msg"] and str(tmp_path / "empty") in r["msg"]


def test_pack_is_content_addressed_and_idempotent(fleet):
    a, _b, _venv, key, call = fleet
    k = key(a)
    cold = call("restore", a, k["key"])
    assert cold["warm"] is False and cold["verdict"].startswith("cold (key %s: no artefact" % k["key_id"])
    assert cold["changed"] and os.path.isdir(cold["cache_dir"])
    assert call("pack", a, k["key"])["changed"] is False  # nothing compiled yet: nothing to pack
    fill(a / "caches" / k["key_id"])
    p = call("pack", a, k["key"], host="a")
    art = p["artifact"]
    assert p["changed"] and art["files"] == 4 and (a / "artifacts" / (art["sha256"] + ".tar.gz")).exists()
    assert wc.sha256_file(str(a / "artifacts" / (art["sha256"] + ".tar.gz"))) == art["sha256"]
    index = json.loads((a / "keys" / (k["key_id"] + ".json")).read_text())
    assert index["key"] == k["key"] and index["packed_by"] == "a"
    again = call("pack", a, k["key"])
    assert again["changed"] is False and again["artifact"]["sha256"] == art["sha256"]
    assert key(a)["held"] is True


def test_restore_from_a_peer_verifies_and_becomes_a_source(fleet, packed):
    a, b, _venv, key, call = fleet
    k = packed(a)
    art = json.loads((a / "keys" / (k["key_id"] + ".json")).read_text())
    kb = key(b)
    assert kb["key_id"] == k["key_id"] and not kb["held"]
    check = call("restore", b, kb["key"], check=True, sources=[{"name": "a", "address": "a"}], peer_root=str(a))
    assert check["changed"] and not (b / "caches").exists()  # check mode writes nothing
    r = call("restore", b, kb["key"], sources=[{"name": "gone", "address": ""}, {"name": "a", "address": "a"}],
             peer_root=str(a))
    assert r["warm"] and r["source"] == "a" and r["verdict"] == "warm (key %s, from a, 4 files)" % k["key_id"]
    assert wc.tree(str(b / "caches" / k["key_id"])) == wc.tree(str(a / "caches" / k["key_id"]))
    st = os.stat(b / "caches" / k["key_id"] / "triton" / "k1" / "kernel0.cubin")
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o022 == 0
    assert (b / "artifacts" / (art["sha256"] + ".tar.gz")).exists() and key(b)["held"]  # b now serves it
    assert not [p for p in (b / "caches").iterdir() if p.name.startswith(".")]
    kept = call("restore", b, kb["key"])
    assert kept["changed"] is False and kept["verdict"].endswith("kept on this host)")


def test_a_lost_cache_comes_back_from_this_hosts_artefact(fleet, packed):
    a, _b, _venv, _key, call = fleet
    k = packed(a)
    before = wc.tree(str(a / "caches" / k["key_id"]))
    shutil.rmtree(a / "caches" / k["key_id"])
    r = call("restore", a, k["key"])
    assert r.get("warm") and r["source"] == "this host", r
    assert wc.tree(str(a / "caches" / k["key_id"])) == before  # the same files, restored from the artefact


def peer_with(a, packed, mutate):
    """a packed a cache (a copy of the session's packed store); mutate(artefact path, index path) damages its
    store. Returns the key."""
    key = packed(a)
    index = a / "keys" / (key["key_id"] + ".json")
    mutate(a / "artifacts" / (json.loads(index.read_text())["sha256"] + ".tar.gz"), index)
    return key


def hostile(path, extra):
    """Rewrite the artefact at path with extra members appended (and its index kept in step)."""
    with tarfile.open(str(path), "r:gz") as t:
        members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m, data in members + extra:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    path.write_bytes(gzip.compress(buf.getvalue()))


def refit_index(art, index):
    doc = json.loads(index.read_text())
    doc.update(sha256=wc.sha256_file(str(art)), size=art.stat().st_size)
    index.write_text(json.dumps(doc))
    art.rename(art.parent / (doc["sha256"] + ".tar.gz"))


def link_member():
    m = tarfile.TarInfo("cache/triton/evil")
    m.type, m.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return [(m, None)]


def outside_member():
    m = tarfile.TarInfo("cache/../../escape")
    m.size = 1
    return [(m, b"x")]


CASES = {
    "corrupt": (lambda art, idx: art.write_bytes(art.read_bytes()[:100] + b"X" + art.read_bytes()[101:]), "(corrupt)"),
    "partial": (lambda art, idx: art.write_bytes(art.read_bytes()[:len(art.read_bytes()) // 2]), "(partial or replaced)"),
    "other key": (lambda art, idx: idx.write_text(json.dumps(dict(json.loads(idx.read_text()), key=dict(
        json.loads(idx.read_text())["key"], arch="sm_90")))), "its key differs (arch sm_90, not sm_103)"),
    "a link": (lambda art, idx: (hostile(art, link_member()), refit_index(art, idx)), "which its manifest does not list"),
    "a path out": (lambda art, idx: (hostile(art, outside_member()), refit_index(art, idx)), "not a normalised relative path"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_artefact_is_refused_and_the_start_goes_cold(fleet, packed, case):
    a, b, _venv, _key, call = fleet
    mutate, reason = CASES[case]
    k = peer_with(a, packed, mutate)
    r = call("restore", b, k["key"], sources=[{"name": "a", "address": "a"}], peer_root=str(a))
    assert r.get("failed") is not True and r["warm"] is False, r
    assert r["verdict"].startswith("cold (key %s: a: " % k["key_id"]) and reason in r["verdict"], r["verdict"]
    assert os.listdir(b / "caches" / k["key_id"]) == []  # an empty cache dir: the server compiles
    assert not [p for p in (b / "caches").iterdir() if p.name.startswith(".")]
    assert not list((b / "artifacts").iterdir()) and not list((b / "keys").iterdir())
    assert not list((b / ".staging").iterdir())  # nothing left behind
    assert not (b.parent / "escape").exists()


def peer_store(a, packed):
    """a packed a cache: returns (key, artefact path, index path, index document)."""
    key = packed(a)
    idx = a / "keys" / (key["key_id"] + ".json")
    doc = json.loads(idx.read_text())
    return key, a / "artifacts" / (doc["sha256"] + ".tar.gz"), idx, doc


def restore_b(b, key, call, a):
    return call("restore", b, key["key"], sources=[{"name": "a", "address": "a"}], peer_root=str(a))


def assert_cold_and_clean(r, b, key, reason):
    assert r.get("failed") is not True and r["warm"] is False, r
    assert r["verdict"].startswith("cold (key %s: a: " % key["key_id"]) and reason in r["verdict"], r["verdict"]
    assert all(32 <= ord(c) < 127 for c in r["verdict"]), r["verdict"]  # a peer's text cannot forge report lines
    assert os.listdir(b / "caches" / key["key_id"]) == []
    assert not list((b / "artifacts").iterdir()) and not list((b / "keys").iterdir())
    assert not list((b / ".staging").iterdir())


INDEX_CASES = {
    "a list": (lambda doc: [doc], "its index is not a JSON object"),
    "size a string": (lambda doc: dict(doc, size=str(doc["size"])), "its index gives no artefact size"),
    "size a bool": (lambda doc: dict(doc, size=True), "its index gives no artefact size"),
    "size negative": (lambda doc: dict(doc, size=-1), "its index gives no artefact size"),
    "size beyond the cap": (lambda doc: dict(doc, size=10 ** 15), "more than the"),
    "sha a path": (lambda doc: dict(doc, sha256="../../../../etc/passwd"), "its index names no artefact sha256"),
    "sha a number": (lambda doc: dict(doc, sha256=12), "its index names no artefact sha256"),
    "key a string": (lambda doc: dict(doc, key="sm_103"), "its key differs (no key)"),
    "key a forged line": (lambda doc: dict(doc, key=dict(doc["key"], arch="x\n" + "A" * 5000)), "its key differs (arch x?AAA"),
    "not JSON": (None, "its index is not JSON"),
    "too large": (lambda doc: dict(doc, pad="x" * 100000), "more than the 65536 bytes expected"),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_a_hostile_index_is_refused_before_any_transfer(fleet, packed, case):
    a, b, _venv, _key, call = fleet
    k, _art, idx, doc = peer_store(a, packed)
    change, reason = INDEX_CASES[case]
    idx.write_text("{not json" if change is None else json.dumps(change(doc)))
    assert_cold_and_clean(restore_b(b, k, call, a), b, k, reason)


def test_an_index_names_no_local_path(fleet, packed, tmp_path):
    """A peer's key_id (and every other field but the checked ones) is never used: the restored host writes its
    index under its own key id, from the checked fields alone."""
    a, b, _venv, _key, call = fleet
    k, _art, idx, doc = peer_store(a, packed)
    idx.write_text(json.dumps(dict(doc, key_id="../../../planted", packed_by="x", tree="y")))
    r = restore_b(b, k, call, a)
    assert r["warm"], r
    assert sorted(p.name for p in (b / "keys").iterdir()) == [k["key_id"] + ".json"]
    assert not list(tmp_path.rglob("planted*"))
    mine = json.loads((b / "keys" / (k["key_id"] + ".json")).read_text())
    assert mine["key_id"] == k["key_id"] and mine["fetched_from"] == "a" and "packed_by" not in mine


def rebuild(art, idx, manifest=None, members=None, raw_manifest=None, manifest_size=None):
    """Rewrite the artefact at art: a new manifest (the document, raw bytes, or a header claiming
    manifest_size), the members (TarInfo, bytes) that follow; the index kept in step (a peer that lies
    consistently)."""
    with tarfile.open(str(art), "r:gz") as t:
        old = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
    head, rest = old[0], old[1:] if members is None else members
    data = raw_manifest if raw_manifest is not None else json.dumps(manifest).encode() if manifest is not None else head[1]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        m = tarfile.TarInfo(wc.MANIFEST)
        m.size = len(data)
        t.addfile(m, io.BytesIO(data))
        for m, d in rest:
            t.addfile(m, io.BytesIO(d) if d is not None else None)
    body = buf.getvalue()
    if manifest_size is not None:  # a header that claims more than follows
        h = tarfile.TarInfo(wc.MANIFEST)
        h.size = manifest_size
        body = h.tobuf(tarfile.USTAR_FORMAT) + b" " * 1024
    art.write_bytes(gzip.compress(body))
    refit_index(art, idx)


def manifest_of(art):
    with tarfile.open(str(art), "r:gz") as t:
        return json.loads(t.extractfile(t.next()).read())


def member(name, size, data=None, **kw):
    m = tarfile.TarInfo(name)
    m.size = size
    for k, v in kw.items():
        setattr(m, k, v)
    return (m, data if data is not None else b"x" * size)


MANIFEST_CASES = {
    "a list": (lambda art, m: dict(manifest=[m]), "the artefact's manifest is not a JSON object"),
    "files a dict": (lambda art, m: dict(manifest=dict(m, files={"a": 1})), "has no list of at most"),
    "an entry a string": (lambda art, m: dict(manifest=dict(m, files=["x"] + m["files"])), "not a file or directory"),
    "a size string": (lambda art, m: dict(manifest=dict(m, files=[dict(e, size="12") if e["type"] == "file" else e
                                                                  for e in m["files"]])), "has no valid size, sha256 and mode"),
    "a setuid mode": (lambda art, m: dict(manifest=dict(m, files=[dict(e, mode="4755") if e["type"] == "file" else e
                                                                  for e in m["files"]])), "has no valid size, sha256 and mode"),
    "a path twice": (lambda art, m: dict(manifest=dict(m, files=m["files"] + m["files"][-1:])), "lists"),
    "an absolute path": (lambda art, m: dict(manifest=dict(m, files=m["files"] + [{"path": "/etc/x", "type": "dir"}])), "is absolute"),
    "not JSON": (lambda art, m: dict(raw_manifest=b"\xff{"), "cannot be unpacked"),
    "beyond the unpack cap": (lambda art, m: dict(manifest=dict(m, files=m["files"] + [dict(
        path="big", type="file", size=10 ** 13, sha256="0" * 64, mode="0644")])), "unpacks to more than"),
    "padded past its cap": (lambda art, m: dict(manifest_size=200 * 2 ** 20), "more than the 67108864 accepted"),
    "a member larger than listed": (lambda art, m: dict(manifest=dict(m, files=m["files"] + [dict(
        path="small", type="file", size=1, sha256="0" * 64, mode="0644")]), members=[member("cache/small", 2 ** 20)]),
        "is 1048576 bytes, its manifest says 1"),
    "a pax header bomb": (lambda art, m: dict(members=[member("cache/p", 1, pax_headers={"comment": "x" * (5 * 2 ** 20)})]),
                          "a hostile tar header"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_a_hostile_manifest_or_member_is_refused_before_its_bytes_are_read(fleet, packed, case):
    a, b, _venv, _key, call = fleet
    k, art, idx, _doc = peer_store(a, packed)
    make, reason = MANIFEST_CASES[case]
    rebuild(art, idx, **make(art, manifest_of(art)))
    art = next((a / "artifacts").glob("*.tar.gz"))
    assert_cold_and_clean(restore_b(b, k, call, a), b, k, reason)


def test_a_large_manifest_within_its_cap_is_taken(fleet, packed):
    """A manifest of several MiB (a cache of tens of thousands of files) is read in chunks, not refused as a
    hostile header."""
    a, b, _venv, _key, call = fleet
    k, art, idx, _doc = peer_store(a, packed)
    rebuild(art, idx, manifest=dict(manifest_of(art), note="x" * (6 * 2 ** 20)))
    r = restore_b(b, k, call, a)
    assert r["warm"] and r["source"] == "a", r


def test_an_artefact_larger_than_its_index_is_cut_off(fleet, packed):
    """The peer serves 2 GiB (sparse) where its index says a few kB: the transfer stops past the index's size."""
    a, b, _venv, _key, call = fleet
    k, art, _idx, doc = peer_store(a, packed)
    with open(str(art), "r+b") as f:
        f.truncate(2 * 2 ** 30)
    r = restore_b(b, k, call, a)
    assert_cold_and_clean(r, b, k, "it sent more than the %d bytes expected" % doc["size"])


def test_damaged_local_state_and_leftovers_of_a_killed_run(fleet, packed):
    """A cache directory holding only empty directories is replaced, not a crash; what a killed run left (in
    .staging and the old names beside the caches and artefacts) is removed by the next run."""
    a, _b, _venv, _key, call = fleet
    k = packed(a)
    cache = a / "caches" / k["key_id"]
    shutil.rmtree(cache)
    (cache / "triton" / "k1").mkdir(parents=True)
    (a / ".staging" / "unpack-x-99").mkdir()
    (a / ".staging" / "unpack-x-99" / "f").write_text("left")
    (a / "caches" / (".%s.incoming-123" % k["key_id"])).mkdir()
    (a / "artifacts" / ".incoming-77.tar.gz").write_text("left")
    r = call("restore", a, k["key"])
    assert r.get("warm") and r["source"] == "this host", r
    assert sorted(p.name for p in (a / "caches").iterdir()) == [k["key_id"]]
    assert not list((a / ".staging").iterdir()) and not list((a / "artifacts").glob(".incoming*"))
    assert len(wc.tree(str(cache))) == 7


def test_a_store_path_that_is_a_link_is_a_cold_start(fleet, packed, tmp_path):
    a, _b, _venv, _key, call = fleet
    k = packed()
    a.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(a / "caches"))
    r = call("restore", a, k["key"])
    assert r.get("failed") is not True and r["warm"] is False and "a symbolic link" in r["verdict"], r
    assert not list((tmp_path / "elsewhere").iterdir())
    p = call("pack", a, k["key"])
    assert p["changed"] is False and "not packed" in p["msg"], p


def test_inventory_values_never_become_ssh_options(fleet, packed, tmp_path):
    """A source address beginning with '-' is refused by name, and nothing runs; bad ssh settings fail the
    task before any source is asked."""
    a, b, _venv, _key, call = fleet
    k = packed(a)
    marker = tmp_path / "pwned"
    evil = {"name": "evil", "address": "-oProxyCommand=touch %s" % marker}
    r = call("restore", b, k["key"], sources=[evil, {"name": "a", "address": "a"}], peer_root=str(a))
    assert r["warm"] and "evil: not asked: ssh_host '-oProxyCommand" in r["tried"][0], r
    assert not marker.exists()
    bad = call("restore", b, k["key"], ssh_options=["-o", "ProxyCommand=touch %s" % marker])
    assert bad["failed"] and "ProxyCommand" in bad["msg"] and not marker.exists()
    semi = call("restore", tmp_path / "c", k["key"], sources=[{"name": "a", "address": "a"}],
                peer_root="%s; touch %s" % (a, marker))
    # the path stays one path on the other side, where there is no such store: cold, and nothing ran
    assert semi["warm"] is False and "a: no artefact for this key" in semi["verdict"] and not marker.exists(), semi


def test_prune_keeps_the_live_key_and_the_newest_others(tmp_path):
    root = tmp_path / "w"
    for i, kid in enumerate(["k1", "k2", "k3", "k4"]):
        (root / "caches" / kid).mkdir(parents=True)
        (root / "caches" / kid / "f").write_text(kid)
        (root / "artifacts").mkdir(exist_ok=True)
        (root / "artifacts" / ("%064d.tar.gz" % i)).write_text("x")
        (root / "keys").mkdir(exist_ok=True)
        (root / "keys" / (kid + ".json")).write_text(json.dumps({"key_id": kid, "sha256": "%064d" % i, "packed_at": i}))
    (root / "artifacts" / ("%064d.tar.gz" % 9)).write_text("stray")
    removed = wc.prune(str(root), 2, "k1")
    assert sorted(p.name for p in (root / "caches").iterdir()) == ["k1", "k4"]
    assert sorted(p.name for p in (root / "keys").iterdir()) == ["k1.json", "k4.json"]
    assert sorted(p.name for p in (root / "artifacts").iterdir()) == ["%064d.tar.gz" % 0, "%064d.tar.gz" % 3]
    assert "caches/k2" in removed and "artifacts/%064d.tar.gz" % 9 in removed


@pytest.fixture
def hosts3(tmp_path, run_module, monkeypatch, packed):
    """Three hosts' stores under stores/<host> (a packed a cache: a copy of the session's packed store),
    reached through a TEST DOUBLE of ssh that runs the command string here with the placeholder store /STORE/
    put in the host's place, and logs every artefact it serves (serve.log: host per line). A host named in
    resets.txt answers its first N connections as an sshd past MaxStartups does."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "stores").mkdir()
    (bindir / "ssh").write_text(r'''#!/bin/sh
while [ "$1" != "--" ]; do shift; done
host=$2; base=%(base)s
n=$(grep -c "^$host$" $base/resets.txt 2>/dev/null)
if [ "${n:-0}" -gt 0 ]; then
  sed -i "0,/^$host$/{//d}" $base/resets.txt
  echo "kex_exchange_identification: read: Connection reset by peer" >&2; exit 255
fi
cmd=$(printf %%s "$3" | sed "s#$base/STORE/#$base/stores/$host/#g")
case "$cmd" in *artifacts/*.tar.gz*) echo "$host" >> $base/serve.log;; esac
exec sh -c "$cmd"
''' % {"base": tmp_path})
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    k = packed(tmp_path / "stores" / "a")

    def call(host, sources, **kw):
        return run_module("warm_cache", workdir=tmp_path / ("run-" + host), state="restore", root=str(tmp_path / "stores" / host),
                          key=k["key"], owner=ME, group=GROUP, sources=sources, peer_root=str(tmp_path / "STORE"), **kw)
    return tmp_path, k, call


def served(base):
    return sorted((base / "serve.log").read_text().split()) if (base / "serve.log").exists() else []


def test_a_child_waits_for_its_parent_and_the_holder_sends_one_copy(hosts3):
    """c's parent b restores in the same run: c waits while b fetches, then takes it from b; a, the holder,
    sends one copy."""
    import threading
    base, k, call = hosts3
    got = {}
    chain = [{"name": "b", "address": "b", "wait": True}, {"name": "a", "address": "a"}]
    child = threading.Thread(target=lambda: got.update(c=call("c", chain, wait_grace=60)))
    child.start()
    import time
    time.sleep(3)
    b = call("b", [{"name": "a", "address": "a"}])
    child.join(300)
    assert b["warm"] and b["source"] == "a", b
    assert got["c"]["warm"] and got["c"]["source"] == "b" and got["c"]["tried"] == ["b: warm"], got["c"]
    assert served(base) == ["a", "b"]  # one copy from the holder, one from the parent


def test_a_parent_that_fetches_nothing_is_passed_over(hosts3):
    base, k, call = hosts3
    r = call("c", [{"name": "b", "address": "b", "wait": True}, {"name": "a", "address": "a"}], wait_grace=2)
    assert r["warm"] and r["source"] == "a", r
    assert r["tried"][0] == "b: not waited for: it has no copy and fetches none", r["tried"]
    assert served(base) == ["a"]


def test_a_source_whose_sshd_resets_is_tried_again(hosts3):
    base, k, call = hosts3
    (base / "resets.txt").write_text("a\na\n")  # its first two connections are reset (MaxStartups)
    r = call("b", [{"name": "a", "address": "a"}])
    assert r["warm"] and r["source"] == "a" and r["tried"] == ["a: warm"], r
    assert (base / "resets.txt").read_text() == ""
