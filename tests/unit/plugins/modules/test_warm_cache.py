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
    # TEST DOUBLE: ssh that runs what follows '--' here (the peer's store is a local directory)
    (bindir / "ssh").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))

    def key(store, **kw):
        args = dict(state="key", root=str(store), arch="sm_103", driver="580.95.05", cuda="12.9", venv=str(venv))
        args.update(kw)
        return run_module("warm_cache", **args)

    def call(state, store, k, check=False, **kw):
        return run_module("warm_cache", check=check, state=state, root=str(store), key=k, owner=ME, group=GROUP, **kw)
    return tmp_path / "a", tmp_path / "b", venv, key, call


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


def test_restore_from_a_peer_verifies_and_becomes_a_source(fleet):
    a, b, _venv, key, call = fleet
    k = key(a)
    call("restore", a, k["key"])
    fill(a / "caches" / k["key_id"])
    packed = call("pack", a, k["key"])["artifact"]
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
    assert (b / "artifacts" / (packed["sha256"] + ".tar.gz")).exists() and key(b)["held"]  # b now serves it
    assert not [p for p in (b / "caches").iterdir() if p.name.startswith(".")]
    kept = call("restore", b, kb["key"])
    assert kept["changed"] is False and kept["verdict"].endswith("kept on this host)")


def test_a_lost_cache_comes_back_from_this_hosts_artefact(fleet):
    a, _b, _venv, key, call = fleet
    k = key(a)
    call("restore", a, k["key"])
    fill(a / "caches" / k["key_id"])
    call("pack", a, k["key"])
    before = wc.tree(str(a / "caches" / k["key_id"]))
    import shutil
    shutil.rmtree(a / "caches" / k["key_id"])
    r = call("restore", a, k["key"])
    assert r.get("warm") and r["source"] == "this host", r and wc.tree(str(a / "caches" / k["key_id"])) == before


def peer_with(a, key, call, mutate):
    """a packs a cache; mutate(artefact path, index path) damages its store."""
    call("restore", a, key["key"])
    fill(a / "caches" / key["key_id"])
    art = call("pack", a, key["key"])["artifact"]
    mutate(a / "artifacts" / (art["sha256"] + ".tar.gz"), a / "keys" / (key["key_id"] + ".json"))
    return art


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
def test_a_bad_artefact_is_refused_and_the_start_goes_cold(fleet, case):
    a, b, _venv, key, call = fleet
    mutate, reason = CASES[case]
    k = key(a)
    peer_with(a, k, call, mutate)
    r = call("restore", b, k["key"], sources=[{"name": "a", "address": "a"}], peer_root=str(a))
    assert r.get("failed") is not True and r["warm"] is False, r
    assert r["verdict"].startswith("cold (key %s: a: " % k["key_id"]) and reason in r["verdict"], r["verdict"]
    assert os.listdir(b / "caches" / k["key_id"]) == []  # an empty cache dir: the server compiles
    assert not [p for p in (b / "caches").iterdir() if p.name.startswith(".")]
    assert not list((b / "artifacts").iterdir()) and not (b / "keys").exists()
    assert not (b.parent / "escape").exists()


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
