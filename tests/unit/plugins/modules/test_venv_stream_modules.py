"""venv_artifact and venv_install for real, through ansible-playbook, on a real venv.

The source venv lives at <prefix>/venvs/app; to play "another host", it is moved away after the
artifact is built, and venv_install (transfer=file) brings it back to the same absolute path."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va


def make_venv(path, version="1.0"):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python3.*/site-packages"))
    (site / "ddtree_probe.py").write_text("VERSION = %r\n" % version)
    dist = site / ("ddtree_probe-%s.dist-info" % version)
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ddtree-probe\nVersion: %s\n" % version)
    return path


@pytest.fixture
def setup(tmp_path, run_module):
    prefix = tmp_path / "prefix"
    src = make_venv(prefix / "venvs" / "app")
    adir = tmp_path / "artifacts"
    art = run_module("venv_artifact", venv=str(src), artifact_dir=str(adir))
    aside = tmp_path / "source-host"
    aside.mkdir()
    shutil.move(str(src), str(aside / "app"))

    def install(**kw):
        args = dict(prefix=str(prefix), artifact_id=art["id"], transfer="file", import_check=["ddtree_probe"],
                    artifact_file=str(adir / (art["id"] + ".tar.zst")), manifest_file=str(adir / (art["id"] + ".manifest.json")))
        args.update(kw)
        return run_module("venv_install", **args)
    return prefix, art, adir, aside, install


def test_artifact_manifest(setup):
    prefix, art, adir, _aside, _install = setup
    m = art["manifest"]
    assert m["venv_path"] == str(prefix / "venvs" / "app")
    assert m["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert "ddtree-probe==1.0" in m["packages"]
    full = json.loads((adir / (art["id"] + ".manifest.json")).read_text())
    assert va.manifest_id(full) == art["id"]
    assert any(f["path"].endswith("ddtree_probe.py") and len(f["sha256"]) == 64 for f in full["files"] if f["type"] == "file")


def test_artifact_reused_while_unchanged(tmp_path, run_module):
    venv = make_venv(tmp_path / "p" / "venvs" / "v")
    first = run_module("venv_artifact", venv=str(venv), artifact_dir=str(tmp_path / "a"))
    again = run_module("venv_artifact", venv=str(venv), artifact_dir=str(tmp_path / "a"))
    assert (first["changed"], again["changed"], again["reused"], again["id"]) == (True, False, True, first["id"])
    (next(venv.glob("lib/python3.*/site-packages")) / "extra.py").write_text("x = 1\n")
    changed = run_module("venv_artifact", venv=str(venv), artifact_dir=str(tmp_path / "a"))
    assert changed["changed"] and changed["id"] != first["id"]


def test_install_verify_switch_idempotent(setup):
    prefix, art, _adir, _aside, install = setup
    res = install()
    assert res["changed"] and res["path"] == str(prefix / "venvs" / "app")
    assert os.path.realpath(prefix / "venv") == str(prefix / "venvs" / "app")
    out = subprocess.run([str(prefix / "venv" / "bin" / "python"), "-c", "import ddtree_probe; print(ddtree_probe.VERSION)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1.0"
    assert not [p for p in (prefix / "venvs").iterdir() if p.name.startswith(".staging-")]
    again = install()
    assert again["changed"] is False and again["needed"] is False and "transferred_bytes" not in again


def test_check_mode_changes_nothing(setup, run_module):
    prefix, art, adir, _aside, _install = setup
    res = run_module("venv_install", check=True, diff=True, prefix=str(prefix), artifact_id=art["id"], transfer="file",
                     artifact_file=str(adir / (art["id"] + ".tar.zst")), manifest_file=str(adir / (art["id"] + ".manifest.json")))
    assert res["changed"] and res["needed"] and res["diff"]["after"]["venv"] == str(prefix / "venvs" / "app")
    assert not (prefix / "venv").exists() and not (prefix / "venvs" / "app").exists()


def test_corrupt_stream_is_refused_then_good_one_installs(setup, tmp_path):
    prefix, art, adir, _aside, install = setup
    # the artifact's tar with one file altered after hashing (same length, so only sha256 can tell)
    unpack = tmp_path / "unpack"
    unpack.mkdir()
    subprocess.run("zstd -dc %s | tar -x -C %s" % (adir / (art["id"] + ".tar.zst"), unpack), shell=True, check=True)
    probe = next(unpack.rglob("ddtree_probe.py"))
    probe.write_text(probe.read_text().replace("1.0", "6.6"))
    subprocess.run("tar -C %s -cf - . | zstd -q -c > %s/bad.tar.zst" % (unpack, tmp_path), shell=True, check=True)
    res = install(artifact_file=str(tmp_path / "bad.tar.zst"))
    assert "does not match its manifest: sha256 of lib/" in res["msg"] and "ddtree_probe.py differs" in res["msg"]
    assert not (prefix / "venv").exists() and not (prefix / "venvs" / "app").exists()
    assert not [p for p in (prefix / "venvs").iterdir() if p.name.startswith(".staging-")]
    assert install()["changed"] is True


def test_failed_import_switches_back(setup, tmp_path, run_module):
    prefix, art, adir, aside, install = setup
    install()
    v2 = make_venv(prefix / "venvs" / "app2", version="2.0")
    art2 = run_module("venv_artifact", venv=str(v2), artifact_dir=str(adir))
    shutil.move(str(v2), str(aside / "app2"))
    res = install(artifact_id=art2["id"], import_check=["ddtree_probe", "not_there_module"],
                  artifact_file=str(adir / (art2["id"] + ".tar.zst")), manifest_file=str(adir / (art2["id"] + ".manifest.json")))
    assert "import not_there_module failed" in res["msg"] and "switched back" in res["msg"]
    assert os.path.realpath(prefix / "venv") == str(prefix / "venvs" / "app")


def test_rollback(setup, run_module):
    prefix, art, adir, aside, install = setup
    install()
    v2 = make_venv(prefix / "venvs" / "app2", version="2.0")
    art2 = run_module("venv_artifact", venv=str(v2), artifact_dir=str(adir))
    shutil.move(str(v2), str(aside / "app2"))
    install(artifact_id=art2["id"], artifact_file=str(adir / (art2["id"] + ".tar.zst")),
            manifest_file=str(adir / (art2["id"] + ".manifest.json")))
    assert os.path.realpath(prefix / "venv") == str(prefix / "venvs" / "app2")
    back = run_module("venv_install", state="rollback", prefix=str(prefix), import_check=["ddtree_probe"])
    assert back["changed"] and back["path"] == str(prefix / "venvs" / "app")
    assert os.path.realpath(prefix / "venv.previous") == str(prefix / "venvs" / "app2")


def test_the_base_interpreter_is_found_through_the_venvs_own_links(tmp_path):
    """python3 -m venv on Debian/Ubuntu: python3.11 -> python3 -> /usr/bin/python3. The base interpreter is the
    first link target outside the venv, never a path inside it (which does not exist on a new target)."""
    cfg = {"home": "/usr/bin", "version": "3.11.2"}
    venv = tmp_path / "venvs" / "debian"
    (venv / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3", venv / "bin" / "python3")
    os.symlink("python3", venv / "bin" / "python3.11")
    os.symlink("python3", venv / "bin" / "python")
    assert va.base_interpreter(str(venv), cfg) == "/usr/bin/python3"
    made = tmp_path / "venvs" / "made-with-python3.11"  # python3.11 -m venv: python3.11 -> /usr/bin/python3.11
    (made / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3.11", made / "bin" / "python3.11")
    assert va.base_interpreter(str(made), cfg) == "/usr/bin/python3.11"
    copies = tmp_path / "venvs" / "copies"  # --copies: a file, the base is home/pythonX.Y
    (copies / "bin").mkdir(parents=True)
    (copies / "bin" / "python3.11").write_text("")
    assert va.base_interpreter(str(copies), cfg) == "/usr/bin/python3.11"


def test_preflight_messages():
    m = {"python": {"version": "3.11.2", "base_interpreter": "/usr/bin/python3.11"},
         "platform": {"machine": "x86_64", "glibc": "2.36"}, "total_size": 10 * 2 ** 30}
    ok = {"base_interpreter_version": "3.11.9", "machine": "x86_64", "glibc": "2.39", "free_bytes": 100 * 2 ** 30}
    assert va.preflight(m, ok) == []
    f = va.preflight(m, dict(ok, base_interpreter_version="3.12.3"))
    assert f and "is Python 3.12.3, the venv needs Python 3.11" in f[0]
    assert "does not exist" in va.preflight(m, dict(ok, base_interpreter_version=None))[0]
    assert "glibc 2.31 is older than the source's 2.36" in va.preflight(m, dict(ok, glibc="2.31"))[0]
    assert "CPU architecture aarch64" in va.preflight(m, dict(ok, machine="aarch64"))[0]
    assert "GiB free under the prefix" in va.preflight(m, dict(ok, free_bytes=2 ** 30))[0]
