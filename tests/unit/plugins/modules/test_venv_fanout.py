"""venv_install's fan-out for real through ansible-playbook: hosts that pull the venv artifact from each other.

Each "host" runs in its own mount namespace (unshare -m) where the prefix and the artifact directory are its own
directories bind-mounted at the same absolute paths, as on separate machines. Hosts reach each other through a
TEST DOUBLE of ssh that runs the remote command string here with the artifact directory put in the host's place,
logs each artefact it serves (serve.log: host per line), and answers a host's first N connections (resets.txt)
as an sshd past MaxStartups does. The real ssh path runs in molecule/venv_stream."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va

ROOT = Path(__file__).resolve().parents[4]


def make_venv(path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python3.*/site-packages"))
    (site / "ddtree_probe.py").write_text("VERSION = '1.0'\n")
    (site / "blob.bin").write_bytes(os.urandom(3 << 20))  # so that a transfer takes a moment
    return path


@pytest.fixture
def fleet(tmp_path, run_module):
    """Source host a holds the artifact; hosts b, c, d, ... start empty. install(host, sources, **kw) runs
    venv_install as that host."""
    prefix, art_dir = tmp_path / "prefix", tmp_path / "art"
    hosts = tmp_path / "hosts"
    src = make_venv(prefix / "venvs" / "app")
    built = run_module("venv_artifact", venv=str(src), artifact_dir=str(hosts / "a" / "art"))
    assert not built.get("failed"), built
    shutil.rmtree(prefix / "venvs" / "app")  # the targets bring it back to this same path
    art_dir.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(r'''#!/bin/sh
while [ "$1" != "--" ]; do shift; done
host=$2; base=%(base)s
n=$(grep -c "^$host$" $base/resets.txt 2>/dev/null)
if [ "${n:-0}" -gt 0 ]; then
  sed -i "0,/^$host$/{//d}" $base/resets.txt
  echo "kex_exchange_identification: read: Connection reset by peer" >&2; exit 255
fi
cmd=$(printf %%s "$3" | sed "s#$base/art/#$base/hosts/$host/art/#g")
case "$cmd" in *.tar.zst*) echo "$host" >> $base/serve.log;; esac
exec sh -c "$cmd"
''' % {"base": tmp_path})
    (bindir / "ssh").chmod(0o755)

    def install(host, sources, check=False, **kw):
        mine = hosts / host
        for d in ("prefix", "art"):
            (mine / d).mkdir(parents=True, exist_ok=True)
        work = tmp_path / ("run-" + host)
        work.mkdir(exist_ok=True)
        out = work / "result.json"
        args = dict(prefix=str(prefix), artifact_id=built["id"], artifact_bytes=built["artifact_bytes"],
                    artifact_dir=str(art_dir), sources=sources, import_check=["ddtree_probe"],
                    progress_file=str(work / "progress.json"), ssh_identity="/nonexistent/key")
        args.update(kw)
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"block": [{"ddtree.fleet.venv_install": args, "register": "r", "check_mode": check}],
             "rescue": [{"ansible.builtin.set_fact": {"r": "{{ ansible_failed_result }}"}}]},
            {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out), "mode": "0600"}}]}]
        (work / "play.yml").write_text(json.dumps(play))
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                   PATH="%s:%s" % (bindir, os.environ["PATH"]))
        script = ('mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4 && exec "$@"')
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                str(mine / "prefix"), str(prefix), str(mine / "art"), str(art_dir),
                "ansible-playbook", str(work / "play.yml")]
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(out.read_text())

    return tmp_path, built, install


def served(base):
    return sorted((base / "serve.log").read_text().split()) if (base / "serve.log").exists() else []


def holds(base, host, aid):
    adir = base / "hosts" / host / "art"
    return (adir / (aid + ".manifest.json")).is_file() and (adir / (aid + ".tar.zst")).is_file()


def live(base, host):
    link = base / "hosts" / host / "prefix" / "venv"
    return os.readlink(link) if os.path.islink(link) else None


SRC_A = {"name": "a", "address": "a"}


def test_a_child_waits_for_its_parent_and_the_source_sends_one_copy(fleet):
    """c's parent b installs in the same run: c waits while b fetches, then takes the artifact from b; a, the
    source, sends one copy. b keeps what it verified (0644 in a 0755 root directory) and serves it."""
    base, built, install = fleet
    aid = built["id"]
    got = {}
    child = threading.Thread(target=lambda: got.update(c=install("c", [{"name": "b", "address": "b", "wait": True}, SRC_A])))
    child.start()
    time.sleep(3)
    b = install("b", [SRC_A])
    child.join(300)
    assert not b.get("failed") and b["source"] == "a" and b["tried"] == ["a: served"] and b["serving"], b
    c = got["c"]
    assert not c.get("failed") and c["source"] == "b" and c["tried"] == ["b: served"], c
    assert served(base) == ["a", "b"]  # one copy from the source, one from the parent
    for h in ("b", "c"):
        assert holds(base, h, aid) and live(base, h).endswith("/venvs/app")
        adir = base / "hosts" / h / "art"
        assert [n for n in os.listdir(adir) if n.startswith(".incoming-")] == []
        st = (adir / (aid + ".tar.zst")).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o644) and (adir.stat().st_mode & 0o777) == 0o755
        # what it keeps is the source's artifact, byte for byte, and its manifest hashes to the id
        assert (adir / (aid + ".tar.zst")).read_bytes() == (base / "hosts" / "a" / "art" / (aid + ".tar.zst")).read_bytes()
        assert va.manifest_id(json.loads((adir / (aid + ".manifest.json")).read_text())) == aid
    progress = json.loads((base / "run-c" / "progress.json").read_text())
    assert progress["finished"]


def test_a_waiting_host_shows_waiting_for_its_parent(fleet):
    base, built, install = fleet
    got = {}
    chain = [{"name": "b", "address": "b", "wait": True}, SRC_A]
    child = threading.Thread(target=lambda: got.update(c=install("c", chain, wait_grace=30)))
    child.start()
    doc, deadline = None, time.time() + 60
    while time.time() < deadline:
        try:
            doc = json.loads((base / "run-c" / "progress.json").read_text())
            break
        except (OSError, ValueError):
            time.sleep(0.2)
    assert doc and doc["waiting_for"] == "b" and doc["state"] == "absent", doc
    # the incoming copy exists from the start, so the hosts that wait for c see it fetching
    assert [n for n in os.listdir(base / "hosts" / "c" / "art") if n.startswith(".incoming-")]
    b = install("b", [SRC_A])
    child.join(300)
    assert b["source"] == "a" and got["c"]["source"] == "b", got


def test_a_parent_that_fetches_nothing_is_passed_over(fleet):
    base, built, install = fleet
    r = install("c", [{"name": "b", "address": "b", "wait": True}, SRC_A], wait_grace=2)
    assert not r.get("failed") and r["source"] == "a", r
    assert r["tried"] == ["b: not waited for: it has no copy and fetches none", "a: served"], r["tried"]
    assert served(base) == ["a"]


def test_a_source_whose_sshd_resets_is_tried_again(fleet):
    base, built, install = fleet
    (base / "resets.txt").write_text("a\na\na\n")  # its first three connections are reset (MaxStartups)
    r = install("b", [SRC_A])
    assert not r.get("failed") and r["source"] == "a" and r["tried"] == ["a: served"], r
    assert (base / "resets.txt").read_text() == ""
    assert served(base) == ["a"]


def test_the_dry_run_before_a_real_run_asks_no_source(fleet):
    """venv_stream's dry run ('is it live already') runs on every target at once: with check_sources=false it
    answers from the host's state and opens no connection (each would count against the source's MaxStartups)."""
    base, built, install = fleet
    (base / "resets.txt").write_text("a\n")  # any connection to a consumes it
    r = install("b", [SRC_A], check=True, check_sources=False)
    assert not r.get("failed") and r["needed"] and r["tried"] == [], r
    assert (base / "resets.txt").read_text() == "a\n" and served(base) == []
    assert live(base, "b") is None and not holds(base, "b", built["id"])
    # an operator's --check (check_sources=true, the default) reads the manifest: the reset is tried again
    r = install("b", [SRC_A], check=True)
    assert not r.get("failed") and r["needed"] and r["tried"] == ["a: has it"], r
    assert (base / "resets.txt").read_text() == "" and served(base) == []


def test_the_old_ssh_host_is_one_source(fleet):
    base, built, install = fleet
    r = install("b", [], ssh_host="a")
    assert not r.get("failed") and r["source"] == "a" and holds(base, "b", built["id"]), r


def hostile_holder(base, aid, how):
    """Host h holds the artifact as a or as an attacker left it."""
    src, h = base / "hosts" / "a" / "art", base / "hosts" / "h" / "art"
    h.mkdir(parents=True)
    shutil.copy(src / (aid + ".tar.zst"), h / (aid + ".tar.zst"))
    man = json.loads((src / (aid + ".manifest.json")).read_text())
    if how == "manifest":  # a file of another content listed: the manifest no longer hashes to the id
        f = next(f for f in man["files"] if f["type"] == "file")
        f["sha256"] = "0" * 64
        (h / (aid + ".manifest.json")).write_text(json.dumps(man))
    elif how == "bytes":  # the true manifest, but the archive of another venv
        (h / (aid + ".manifest.json")).write_text(json.dumps(man))
        other = base / "other"
        make_venv(other / os.path.relpath(man["venv_path"], "/"))
        rel = os.path.relpath(man["venv_path"], "/")
        subprocess.run("tar -C %s -cf - %s | zstd -q -c > %s" % (other, rel, h / (aid + ".tar.zst")), shell=True, check=True)
    elif how == "junk":
        (h / (aid + ".manifest.json")).write_bytes(b"\xff not json")


@pytest.mark.parametrize("how,why", [
    ("manifest", "h: its manifest does not hash to the artifact id"),
    ("bytes", "h: artifact %s does not match its manifest: "),
    ("junk", "h: its manifest is not JSON"),
])
def test_a_hostile_holder_is_refused_and_the_next_source_serves(fleet, how, why):
    base, built, install = fleet
    aid = built["id"]
    hostile_holder(base, aid, how)
    r = install("b", [{"name": "h", "address": "h"}, SRC_A], artifact_bytes=0)
    assert not r.get("failed") and r["source"] == "a", r
    assert len(r["tried"]) == 2 and r["tried"][0].startswith(why % aid if "%s" in why else why), r["tried"]
    assert r["tried"][1] == "a: served"
    assert holds(base, "b", aid) and va.manifest_id(
        json.loads((base / "hosts" / "b" / "art" / (aid + ".manifest.json")).read_text())) == aid
    assert not [n for n in os.listdir(base / "hosts" / "b" / "prefix" / "venvs") if n.startswith(".staging-")]


def test_no_source_serves_the_live_venv_stays_and_nothing_is_kept(fleet):
    base, built, install = fleet
    hostile_holder(base, built["id"], "bytes")
    r = install("b", [{"name": "h", "address": "h"}, {"name": "gone", "address": "gone"}], artifact_bytes=0)
    assert r.get("failed") and "no source could serve it" in r["msg"] and "the live venv (none) is untouched" in r["msg"], r
    assert "h: artifact" in r["msg"] and "gone: cannot read its manifest" in r["msg"]
    adir = base / "hosts" / "b" / "art"
    assert os.listdir(adir) == []
    assert not (base / "hosts" / "b" / "prefix" / "venvs" / "app").exists()


def test_a_bad_source_address_is_refused_before_anything(fleet):
    base, built, install = fleet
    r = install("b", [{"name": "x", "address": "-oProxyCommand=touch /tmp/pwned"}])
    assert r.get("failed") and "sources[0].address" in r["msg"] and "nothing was changed" in r["msg"], r


def test_the_kept_copy_is_pruned_with_its_venv(fleet, run_module):
    base, built, install = fleet
    aid = built["id"]
    assert install("b", [SRC_A], keep=0)["source"] == "a"
    assert holds(base, "b", aid)
    # a second venv installed with keep=0: the first stays as venv.previous, so its copy stays too
    state = base / "hosts" / "b" / "prefix" / "venvs" / ".installed.json"
    doc = json.loads(state.read_text())
    assert doc[aid]["served"] is True
    # an older entry this module kept a copy for, no longer live or previous: removed with its venv
    old = "0123456789abcdef"
    for suffix in (".tar.zst", ".manifest.json"):
        (base / "hosts" / "b" / "art" / (old + suffix)).write_text("x")
    (base / "hosts" / "b" / "prefix" / "venvs" / "old").mkdir()
    doc[old] = {"path": str(base / "prefix" / "venvs" / "old"), "installed": 1, "served": True}
    state.write_text(json.dumps(doc))
    os.unlink(base / "hosts" / "b" / "prefix" / "venv")  # so that this run installs (switches) again
    r = install("b", [SRC_A], keep=0)
    assert not r.get("failed"), r
    assert not (base / "hosts" / "b" / "art" / (old + ".tar.zst")).exists()
    assert not (base / "hosts" / "b" / "art" / (old + ".manifest.json")).exists()
    assert holds(base, "b", aid)
