"""Verify venv_stream on real hosts: the streamed venv is byte-identical to the source and
works; rollback, an interrupted transfer, a wrong interpreter and the via-controller mode are
driven through ansible-playbook and checked on the hosts."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import testinfra

testinfra_hosts = ["ansible://vs-t1", "ansible://vs-t2"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
V1 = "/opt/ddtree/venvs/sglang-0.5.23-test"
V2 = "/opt/ddtree/venvs/sglang-0.5.23-test2"
ODD = "/opt/ddtree/venvs/odd-python"
HASHES = ("import hashlib, json, os, sys\nroot = sys.argv[1]\nout = {}\n"
          "for d, dirs, files in os.walk(root):\n"
          "    for n in files:\n"
          "        p = os.path.join(d, n)\n"
          "        if not os.path.islink(p):\n"
          "            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
          "print(json.dumps(out))\n")


def other(name):
    return testinfra.get_host("ansible://" + name, ansible_inventory=INVENTORY)


def converge(*extra, limit="gpu_hosts", background=False):
    argv = ["ansible-playbook", "-i", INVENTORY, "--limit", limit,
            str(PROJECT / "molecule" / "venv_stream" / "converge.yml"), *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    if background:
        return subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    p = subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False)
    p.text = " ".join(p.stdout.split())  # the yaml callback wraps long messages
    return p


def live(host):
    return host.check_output("readlink -f /opt/ddtree/venv")


def file_hashes(host, root):
    host.run_test("cat > /tmp/hashes.py <<'PY'\n%sPY" % HASHES)
    return json.loads(host.check_output("python3 /tmp/hashes.py %s" % root))


def test_live_venv_is_the_source_venv(host):
    assert live(host) == V1
    src = file_hashes(other("vs-src"), V1)
    mine = file_hashes(host, V1)
    assert len(mine) > 1000
    assert mine == src


def test_streamed_venv_works(host):
    py = "/opt/ddtree/venv/bin/python"
    out = host.check_output(py + " -c 'import numpy, requests, yaml, msgspec, orjson; print(numpy.arange(4).sum())'")
    assert out == "6"
    assert host.check_output(py + " -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'") == "0.5.23"
    # the shebangs and pyvenv.cfg carry the source's absolute path, which exists here too
    assert host.file(V1 + "/bin/pip").content_string.startswith("#!%s/bin/python" % V1)


def test_no_staging_leftovers(host):
    assert host.check_output("ls -A /opt/ddtree/venvs | grep -c '^.staging-' || true") == "0"


def test_interrupted_transfer_keeps_live_venv_then_resumes(host):
    if host.backend.get_hostname() != "vs-t2":
        pytest.skip("runs once, on vs-t2")
    src = other("vs-src")
    src.run_test("tc qdisc replace dev eth0 root tbf rate 24mbit burst 64kb latency 400ms")
    try:
        job = converge("-e", "venv_stream_source_venv=" + V2, limit="vs-t2", background=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if host.run("ls -d /opt/ddtree/venvs/.staging-*/opt 2>/dev/null").rc == 0:
                break
            time.sleep(0.5)
        else:
            job.kill()
            pytest.fail("the transfer never started")
        time.sleep(1)
        host.run_test("pkill -f 'ssh .*tar.zst'")
        out, _ = job.communicate(timeout=120)
    finally:
        src.run_test("tc qdisc del dev eth0 root")
    assert job.returncode != 0
    out = " ".join(out.split())
    assert "transfer of artifact" in out and "the live venv %s is untouched" % V1 in out
    assert live(host) == V1
    host.run_test("/opt/ddtree/venv/bin/python -c 'import numpy'")
    again = converge("-e", "venv_stream_source_venv=" + V2, limit="vs-t2")
    assert again.returncode == 0, again.stdout[-3000:]
    assert live(host) == V2
    assert host.check_output("readlink -f /opt/ddtree/venv.previous") == V1
    assert host.check_output("ls -A /opt/ddtree/venvs | grep -c '^.staging-' || true") == "0"


def test_rollback(host):
    if host.backend.get_hostname() != "vs-t2":
        pytest.skip("runs once, on vs-t2 (after the resumed transfer put V2 live)")
    p = converge("-e", "venv_stream_state=rollback", limit="vs-t2")
    assert p.returncode == 0, p.stdout[-3000:]
    assert live(host) == V1
    assert host.check_output("readlink -f /opt/ddtree/venv.previous") == V2
    again = converge(limit="vs-t2")  # V1 is the source venv and live: nothing to do
    assert again.returncode == 0 and "vs-t2 : ok=" in again.text and "changed=0" in again.text


def test_wrong_interpreter_is_refused_before_transfer(host):
    if host.backend.get_hostname() != "vs-t1":
        pytest.skip("runs once, on vs-t1")
    p = converge("-e", json.dumps({"venv_stream_source_venv": ODD, "venv_stream_import_check": ["requests"]}), limit="vs-t1")
    assert p.returncode != 0
    assert "base interpreter /opt/py311/bin/python3.11 (Python 3.11.2) does not exist" in p.text, p.text[-2000:]
    assert live(host) == V1
    assert not host.file(ODD).exists


def test_via_controller(host):
    if host.backend.get_hostname() != "vs-t1":
        pytest.skip("runs once, on vs-t1")
    p = converge("-e", "venv_stream_source_venv=" + V2, "-e", "venv_stream_transfer=controller", limit="vs-t1")
    assert p.returncode == 0, p.stdout[-3000:]
    assert live(host) == V2
    assert file_hashes(host, V2) == file_hashes(other("vs-src"), V2)
