"""venv_install against a hostile source, a racing unprivileged user and a killed run, for real through
ansible-playbook. Each case ends refused with a message, nothing written outside the prefix, no staging left."""
import hashlib
import io
import json
import os
import pathlib
import platform
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va

NOBODY = 65534


def make_venv(path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python3.*/site-packages"))
    (site / "ddtree_probe.py").write_text("VERSION = '1.0'\n")
    return path


def staging_left(prefix):
    venvs = prefix / "venvs"
    return [p.name for p in venvs.iterdir() if p.name.startswith(".staging-")] if venvs.is_dir() else []


def honest_manifest(venv_path, files):
    base = os.path.realpath(sys.executable)
    m = {"manifest_version": 1, "venv_path": str(venv_path),
         "python": {"version": "%d.%d.%d" % sys.version_info[:3], "base_interpreter": base},
         "platform": {"machine": platform.machine(), "glibc": va.glibc_version()}, "packages": [], "sglang_version": None,
         "files": files, "total_size": sum(f.get("size", 0) for f in files),
         "file_count": sum(1 for f in files if f["type"] == "file")}
    return m


def write_manifest(path, doc):
    path.write_text(json.dumps(doc))
    return va.manifest_id(doc) if isinstance(doc, dict) else "0123456789abcdef"


@pytest.fixture
def hostile(tmp_path, run_module):
    prefix = tmp_path / "prefix"
    outside = tmp_path / "outside"
    outside.mkdir()

    def install(doc, tar=None, **kw):
        man = tmp_path / "m.json"
        aid = write_manifest(man, doc) if not isinstance(doc, bytes) else "0123456789abcdef"
        if isinstance(doc, bytes):
            man.write_bytes(doc)
        art = tar or (tmp_path / "empty.tar.zst")
        if not art.exists():
            art.write_bytes(b"")
        args = dict(prefix=str(prefix), artifact_id=aid, transfer="file", artifact_file=str(art), manifest_file=str(man))
        args.update(kw)
        return run_module("venv_install", **args)
    return prefix, outside, install


def good_entry():
    return {"path": "ok.txt", "type": "file", "size": 2, "mode": "0644", "sha256": "a" * 64}


@pytest.mark.parametrize("doc,named", [
    ([1, 2], "the document is [1, 2], not a JSON object"),
    ("a string", "the document is"),
    ({"manifest_version": 1}, "venv_path is"),
    ("venv_path=5", "venv_path is 5"),
    ("python=list", "python is [], not an object"),
    ("files=str", "files is \"x\", not a list"),
    ("size=str", "files[0].size is \"2\", not a size in bytes"),
    ("size=bool", "files[0].size is true"),
    ("sha=short", "files[0].sha256"),
    ("mode=setuid", "files[0].mode is \"4755\""),
    ("mode=worldw", "files[0].mode is \"0666\""),
    ("path=dotdot", "'../../etc/passwd' is not a normalised relative path"),
    ("path=abs", "'/etc/passwd' is absolute"),
    ("path=dup", "a path listed once"),
    ("total=lie", "total_size is 1"),
    ("base=shell", "python.base_interpreter"),
    ("type=dev", "files[0].type is \"chardev\""),
])
def test_hostile_manifest_is_refused_cleanly(hostile, doc, named):
    prefix, _outside, install = hostile
    if isinstance(doc, str) and "=" in doc:
        m = honest_manifest(prefix / "venvs" / "app", [good_entry()])
        field, how = doc.split("=")
        f0 = m["files"][0]
        {"venv_path": lambda: m.update(venv_path=5), "python": lambda: m.update(python=[]),
         "files": lambda: m.update(files="x"), "size": lambda: f0.update(size="2" if how == "str" else True),
         "sha": lambda: f0.update(sha256="abc"), "mode": lambda: f0.update(mode="4755" if how == "setuid" else "0666"),
         "path": lambda: (f0.update(path={"dotdot": "../../etc/passwd", "abs": "/etc/passwd"}[how]) if how != "dup"
                          else m["files"].append(dict(f0))),
         "total": lambda: m.update(total_size=1), "base": lambda: m["python"].update(base_interpreter="/bin/sh -c id"),
         "type": lambda: f0.update(type="chardev")}[field]()
        doc = m
    res = install(doc)
    assert res.get("failed") and named in res["msg"], res["msg"]
    assert "Traceback" not in json.dumps(res) and "nothing was changed" in res["msg"]
    assert not (prefix / "venvs" / "app").exists() and not staging_left(prefix)


def test_not_json_and_oversized_manifest_refused_before_reading(hostile, tmp_path):
    prefix, _outside, install = hostile
    res = install(b"\xff\xfe not json")
    assert res.get("failed") and "is not JSON" in res["msg"]
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: the size is checked before a byte is read
        f.truncate(va.MANIFEST_MAX_BYTES + 1)
    res = install({"x": 1}, manifest_file=str(big))
    assert res.get("failed") and "not a regular file of at most %d bytes" % va.MANIFEST_MAX_BYTES in res["msg"]
    assert not staging_left(prefix)


def test_run_capped_stops_reading_an_endless_peer():
    rc, out, _err = va.run_capped(["sh", "-c", "yes manifest"], limit=1 << 20)
    assert out is None and rc != 0
    rc, out, err = va.run_capped(["sh", "-c", "printf '{}'; echo oops >&2"], limit=1 << 20)
    assert (rc, out, err.strip()) == (0, b"{}", "oops")


def tar_zst(path, members):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    p = subprocess.run(["zstd", "-q", "-c"], input=raw.getvalue(), stdout=subprocess.PIPE, check=True)
    path.write_bytes(p.stdout)
    return path


def member(name, kind=tarfile.REGTYPE, data=b"", link="", mode=0o644):
    i = tarfile.TarInfo(name)
    i.type, i.linkname, i.mode, i.uid, i.gid = kind, link, mode, NOBODY, NOBODY
    i.size = len(data) if kind == tarfile.REGTYPE else 0
    return i, (data if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("extra", ["link-out-then-write", "device", "dotdot", "absolute", "hardlink-out"])
def test_hostile_archive_members_are_refused(hostile, tmp_path, extra):
    prefix, outside, install = hostile
    venv = prefix / "venvs" / "app"
    rel = os.path.relpath(str(venv), "/")
    data = b"hi"
    files = [{"path": "ok.txt", "type": "file", "size": 2, "mode": "0644",
              "sha256": hashlib.sha256(data).hexdigest()}]
    m = honest_manifest(venv, files)
    members = [member(rel, tarfile.DIRTYPE, mode=0o755), member(rel + "/ok.txt", data=data)]
    members += {
        "link-out-then-write": [member(rel + "/evil", tarfile.SYMTYPE, link=str(outside)), member(rel + "/evil/pwned", data=b"x")],
        "device": [member(rel + "/dev", tarfile.CHRTYPE, mode=0o666)],
        "dotdot": [member(rel + "/../../../outside/dd", data=b"x")],
        "absolute": [member(str(outside / "abs"), data=b"x")],
        "hardlink-out": [member(rel + "/h", tarfile.LNKTYPE, link="etc/hostname")],
    }[extra]
    art = tar_zst(tmp_path / "hostile.tar.zst", members)
    res = install(m, tar=art)
    assert res.get("failed") and ("does not match its manifest" in res["msg"] or "transfer of artifact" in res["msg"]), res["msg"]
    assert list(outside.iterdir()) == [] and not venv.exists() and not staging_left(prefix)
    assert not os.path.lexists(tmp_path / "outside" / "dd")


def test_honest_archive_installs_as_roots_files_and_stream_is_capped(hostile, tmp_path):
    prefix, _outside, install = hostile
    venv = prefix / "venvs" / "app"
    rel = os.path.relpath(str(venv), "/")
    data = b"hi"
    m = honest_manifest(venv, [{"path": "ok.txt", "type": "file", "size": 2, "mode": "0644",
                                "sha256": hashlib.sha256(data).hexdigest()}])
    art = tar_zst(tmp_path / "ok.tar.zst", [member(rel, tarfile.DIRTYPE, mode=0o755), member(rel + "/ok.txt", data=data)])
    res = install(m, tar=art, artifact_bytes=10)  # the source sends more than its module said
    assert res.get("failed") and "sent more than 10 bytes" in res["msg"] and not venv.exists() and not staging_left(prefix)
    res = install(m, tar=art, artifact_bytes=art.stat().st_size)
    assert not res.get("failed"), res["msg"]
    st = (venv / "ok.txt").stat()
    assert (st.st_uid, st.st_gid) == (0, 0)  # the archive said nobody: no owner from the source lands here


def test_leftover_staging_of_a_killed_run_is_removed_and_links_not_followed(hostile, tmp_path):
    prefix, outside, install = hostile
    (prefix / "venvs" / ".staging-0123456789abcdef" / "lib").mkdir(parents=True)
    (prefix / "venvs" / ".staging-0123456789abcdef" / "lib" / "x").write_text("partial")
    (outside / "keep").write_text("keep")
    os.symlink(str(outside), str(prefix / "venvs" / ".staging-fedcba9876543210"))
    res = install({"bad": 1})  # even a run that then refuses its manifest cleans up first
    assert res.get("failed") and sorted(res.get("cleaned", [])) in ([], [".staging-0123456789abcdef", ".staging-fedcba9876543210"])
    assert not staging_left(prefix) and (outside / "keep").read_text() == "keep"


@pytest.fixture
def shared_tmp():
    """A root-owned 0755 directory outside pytest's 0700 one, so that nobody can reach into it."""
    d = tempfile.mkdtemp(prefix="ddtree-race-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


RACER = """
import os, sys, time
venvs, outside, stop_after, report = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
tries = wins = 0
end = time.time() + stop_after
while time.time() < end:
    names = [n for n in (os.listdir(venvs) if os.path.isdir(venvs) else []) if n.startswith(".staging-")]
    for name in names + ([".staging-x"] if not names else []):
        tries += 1
        tmp = os.path.join(venvs, ".r%d" % tries)
        try:
            os.symlink(outside, tmp)
            os.rename(tmp, os.path.join(venvs, name))
            wins += 1
        except OSError:
            pass
    try:  # also the venvs directory itself
        os.rename(venvs, venvs + ".moved")
        os.symlink(outside, venvs)
        wins += 1
    except OSError:
        pass
with open(report, "w") as f:
    f.write("%d %d" % (tries, wins))
"""


def race(venvs, outside, stop_after, report):
    """A real unprivileged process (nobody): keeps swapping every name root could use under venvs, and venvs
    itself, for a link to outside."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # one nobody may run
    return subprocess.Popen([python, "-c", RACER, venvs, outside, str(stop_after), report],
                            user=NOBODY, group=NOBODY, extra_groups=[])


def test_racing_service_user_cannot_redirect_root_and_a_user_writable_prefix_is_refused(run_module, shared_tmp):
    base = shared_tmp
    outside = os.path.join(base, "outside")
    os.mkdir(outside, 0o755)
    report = os.path.join(base, "report")
    os.mkdir(report)
    os.chmod(report, 0o777)  # the racer (nobody) writes its tally here
    prefix = os.path.join(base, "prefix")
    src = make_venv(pathlib.Path(prefix) / "venvs" / "app")
    adir = os.path.join(base, "artifacts")
    art = run_module("venv_artifact", venv=str(src), artifact_dir=adir)
    assert not art.get("failed"), art
    shutil.move(str(src), os.path.join(base, "app-on-source"))
    args = dict(prefix=prefix, artifact_id=art["id"], transfer="file", import_check=["ddtree_probe"],
                artifact_file=os.path.join(adir, art["id"] + ".tar.zst"), manifest_file=os.path.join(adir, art["id"] + ".manifest.json"))

    # the prefix as the service user's (the base role's 0775 group ddtree was this): refused before anything
    os.chown(prefix, NOBODY, NOBODY)
    child = race(os.path.join(prefix, "venvs"), outside, 8, os.path.join(report, "a"))
    res = run_module("venv_install", **args)
    child.wait(30)
    tries, wins = map(int, open(os.path.join(report, "a")).read().split())
    assert res.get("failed") and "owned by uid %d" % NOBODY in res["msg"] and "nothing was changed" in res["msg"], res
    assert wins > 0  # the racer did have the power here; root refused to work under it
    assert os.listdir(outside) == []

    # root-only prefix: the racer runs the whole install and wins nothing; root writes only under the prefix
    for p in (os.path.join(prefix, "venvs.moved"),):
        if os.path.isdir(p):
            shutil.rmtree(p)
    if os.path.islink(os.path.join(prefix, "venvs")):
        os.unlink(os.path.join(prefix, "venvs"))
    for n in os.listdir(prefix):
        q = os.path.join(prefix, n)
        if os.path.islink(q) or not os.path.isdir(q):
            os.unlink(q)
        else:
            shutil.rmtree(q)
    os.chown(prefix, 0, 0)
    os.chmod(prefix, 0o755)
    child = race(os.path.join(prefix, "venvs"), outside, 8, os.path.join(report, "b"))
    res = run_module("venv_install", **args)
    child.wait(30)
    tries, wins = map(int, open(os.path.join(report, "b")).read().split())
    assert not res.get("failed"), res
    assert tries > 0 and wins == 0
    assert os.listdir(outside) == []
    venvs = os.path.join(prefix, "venvs")
    assert stat.S_IMODE(os.lstat(venvs).st_mode) == 0o755 and os.lstat(venvs).st_uid == 0
    assert os.path.realpath(os.path.join(prefix, "venv")) == os.path.join(venvs, "app")
    assert not [n for n in os.listdir(venvs) if n.startswith(".staging-")]
