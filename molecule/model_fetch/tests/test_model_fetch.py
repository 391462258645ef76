"""Verify model_fetch on three targets against the hub mirror: byte-identical files with the
manifest, a fetch killed half-way resumes without fetching completed files again, and a corrupt
shard on the mirror or a file missing from it fails naming the file, with nothing published."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import INVENTORY, PROJECT, other, playbook  # noqa: E402

testinfra_hosts = ["ansible://mf-t1", "ansible://mf-t2", "ansible://mf-t3"]
SRC = "/srv/hub/ddtree-test/tiny-model"
DEST = "/opt/ddtree/models/tiny"
CONVERGE = "molecule/model_fetch/converge.yml"


def hashes(host, root):
    out = host.check_output("cd %s && find . -type f ! -name '.ddtree-manifest.json' -exec sha256sum {} + | sort -k2" % root)
    return out


def test_model_is_byte_identical_to_the_hub(host):
    assert hashes(host, DEST) == hashes(other("mf-hub"), SRC)
    man = json.loads(host.file(DEST + "/.ddtree-manifest.json").content_string)
    assert man["repo_id"] == "ddtree-test/tiny-model" and len(man["files"]) == 8
    assert not host.file(DEST + ".partial").exists


def test_fan_out_keeps_origin_bytes_low(host):
    if host.backend.get_hostname() != "mf-t1":
        return
    hub = other("mf-hub")
    size = int(hub.check_output("find %s -type f -printf '%%s\\n' | awk '{s += $1} END {print s}'" % SRC))
    served = [json.loads(ln) for ln in hub.file("/var/log/hub-8090.jsonl").content_string.splitlines()]
    origin = sum(s["bytes"] for s in served)
    assert size <= origin <= 1.5 * size, (origin, size)  # the seed took it all, the others took (almost) nothing
    # the peer server ran only while needed
    assert not host.service("ddtree-model-peer.service").is_running


def test_killed_fetch_resumes_without_refetching_completed_files(host):
    if host.backend.get_hostname() != "mf-t1":
        return
    hub = other("mf-hub")
    slow = "/opt/ddtree/models/slow"
    endpoint = "http://%s:8091" % hub.backend.get_hostname()
    extra = ["-e", json.dumps({"model_fetch_dest": slow, "model_fetch_endpoint": endpoint,
                               "model_fetch_concurrent": 1, "model_fetch_connections": 1}), "--limit", "mf-t1"]
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    proc = subprocess.Popen(["ansible-playbook", "-i", INVENTORY, str(PROJECT / CONVERGE), *extra], cwd=PROJECT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    sizes = dict(reversed(ln.split()) for ln in hub.check_output("cd %s && stat -c '%%s %%n' *.safetensors" % SRC).splitlines())
    deadline = time.time() + 120
    complete = []
    while time.time() < deadline:
        out = host.run("cd %s.partial 2>/dev/null && for f in *.safetensors; do [ -e \"$f.aria2\" ] || stat -c '%%s %%n' \"$f\"; done" % slow)
        have = dict(reversed(ln.split()) for ln in out.stdout.splitlines() if ln.strip())
        complete = [f for f, n in have.items() if sizes.get(f) == n]
        if complete:
            break
        time.sleep(1)
    assert complete, "no shard completed within 120 s"
    os.killpg(proc.pid, signal.SIGKILL)
    host.run("pkill -9 -f 'AnsiballZ_model_fetc[h]'; pkill -9 aria2c")
    time.sleep(1)
    assert host.file(slow + ".partial").exists and not host.file(slow).exists  # nothing published
    mark = len(hub.file("/var/log/hub-8091.jsonl").content_string.splitlines())
    r = playbook(CONVERGE, *extra)
    assert r.returncode == 0, r.text
    assert hashes(host, slow) == hashes(hub, SRC)
    after = [json.loads(ln) for ln in hub.file("/var/log/hub-8091.jsonl").content_string.splitlines()[mark:]]
    fetched_again = {a["path"] for a in after}
    assert not fetched_again & set(complete), (complete, fetched_again)
    assert fetched_again  # the rest was fetched


def test_second_run_and_check_mode_change_nothing(host):
    if host.backend.get_hostname() != "mf-t2":
        return
    r = playbook(CONVERGE, "--check", limit="mf-t2")
    assert r.returncode == 0 and "changed=0" in r.text, r.text


def run_on_t1(**variables):
    return playbook(CONVERGE, "-e", json.dumps(variables), limit="mf-t1")


def test_corrupt_shard_on_the_mirror_is_fetched_again_then_named(host):
    if host.backend.get_hostname() != "mf-t1":
        return
    hub = other("mf-hub")
    shard = "model-00002-of-00004.safetensors"
    dest = "/opt/ddtree/models/corrupt"
    mark = len(hub.file("/var/log/hub-8092.jsonl").content_string.splitlines()) if hub.file("/var/log/hub-8092.jsonl").exists else 0
    r = run_on_t1(model_fetch_dest=dest, model_fetch_endpoint="http://%s:8092" % hub.backend.get_hostname())
    assert r.returncode != 0
    assert "checksum mismatch after fetching again" in r.text and shard + " is something else" in r.text, r.text
    assert not host.file(dest).exists  # nothing published
    served = [json.loads(ln) for ln in hub.file("/var/log/hub-8092.jsonl").content_string.splitlines()[mark:]]
    size = int(hub.check_output("stat -c %%s %s/%s" % (SRC, shard)))
    sent = sum(s["bytes"] for s in served if s["path"] == shard)
    assert 2 * size <= sent < 3 * size, (sent, size)  # once more, not more
    # the other files are verified and kept for the next run
    assert host.file("%s.partial/model-00001-of-00004.safetensors" % dest).exists


def test_file_missing_on_the_mirror_is_named(host):
    if host.backend.get_hostname() != "mf-t1":
        return
    man = json.loads(host.file(DEST + "/.ddtree-manifest.json").content_string)
    man["files"].append({"path": "model-00009-of-00009.safetensors", "size": 10, "sha256": "0" * 64, "sha1": None})
    pinned = "/var/tmp/pinned-manifest.json"
    host.run("cat > %s <<'EOF'\n%s\nEOF" % (pinned, json.dumps(man)))
    dest = "/opt/ddtree/models/missing"
    r = run_on_t1(model_fetch_dest=dest, model_fetch_manifest=pinned)
    assert r.returncode != 0
    assert "model-00009-of-00009.safetensors: HTTP 404" in r.text, r.text
    assert not host.file(dest).exists


def test_hostile_names_fail_before_any_byte_and_the_model_stays(host):
    """A mirror whose listing names ../../escaped.txt: the role fails naming it, nothing is written
    outside (or inside) the destination, and the published model is untouched."""
    if host.backend.get_hostname() != "mf-t1":
        return
    hub = other("mf-hub")
    before = hashes(host, DEST)
    r = run_on_t1(model_fetch_endpoint="http://%s:8093" % hub.backend.get_hostname())
    assert r.returncode != 0
    assert "unsafe file" in r.text and "../../escaped.txt" in r.text and "nothing was downloaded or published" in r.text, r.text
    assert hashes(host, DEST) == before
    for p in ("/opt/ddtree/escaped.txt", "/opt/ddtree/models/escaped-one-up.txt", DEST + ".partial"):
        assert not host.file(p).exists, p


def test_token_stays_on_the_endpoints_host(host):
    """Gated repo, weights redirected to another host: the download works and, at the receiving
    server, no request carried the token; the endpoint's own host got it."""
    if host.backend.get_hostname() != "mf-t1":
        return
    hub = other("mf-hub")
    dest = "/opt/ddtree/models/gated"
    r = run_on_t1(model_fetch_dest=dest, model_fetch_endpoint="http://%s:8094" % hub.check_output(
        "hostname -I").split()[0], model_fetch_token="molecule-hf-token-7c1e")
    assert r.returncode == 0, r.text
    assert "molecule-hf-token-7c1e" not in r.text
    assert hashes(host, dest) == hashes(hub, SRC)
    cdn = [json.loads(ln) for ln in hub.file("/var/log/hub-8095-headers.jsonl").content_string.splitlines()]
    assert {c["path"].rsplit("/", 1)[-1] for c in cdn if c["path"].endswith(".safetensors")} == {
        "model-0000%d-of-00004.safetensors" % i for i in range(1, 5)}
    assert not any(c["auth"] for c in cdn), cdn
    origin = [json.loads(ln) for ln in hub.file("/var/log/hub-8094-headers.jsonl").content_string.splitlines()]
    assert origin and all(o["auth"] for o in origin)


def curl(h, url):
    return h.check_output("curl -s -o /dev/null -w '%%{http_code}' --max-time 10 %s || true" % url)


def test_peer_server_answers_the_fleet_only_and_serves_one_model(host):
    """The seed's peer server (as the last fan-out left its configuration): a fleet host gets the
    model, nothing else; a host outside the play (the hub) is denied."""
    if host.backend.get_hostname() != "mf-t1":
        return
    conf = host.file("/etc/ddtree/model-peer.conf").content_string
    assert "deny all;" in conf and "allow " in conf
    host.run_expect([0], "systemctl start ddtree-model-peer.service")
    try:
        t1 = "http://mf-t1:8099"
        host.run_expect([0], "timeout 10 sh -c 'until curl -s -o /dev/null %s/; do sleep 0.2; done'" % t1)
        t2 = other("mf-t2")
        assert curl(t2, t1 + "/tiny/config.json") == "200"
        assert curl(t2, t1 + "/tiny/.ddtree-manifest.json") == "200"
        assert curl(t2, t1 + "/gated/config.json") == "404"  # another model beside it
        assert curl(t2, t1 + "/") == "404"
        assert curl(t2, t1 + "/tiny.previous/config.json") == "404"
        assert curl(other("mf-hub"), t1 + "/tiny/config.json") == "403"  # not a fleet host of the play
    finally:
        host.run_expect([0], "systemctl stop ddtree-model-peer.service")


def test_peer_server_is_stopped_when_the_peers_fail(host):
    """A fan-out whose peers all fail (no room): the seed serves, the peers fail, the server stops."""
    if host.backend.get_hostname() != "mf-t1":
        return
    dest = "/opt/ddtree/models/fanfail"
    r = playbook(CONVERGE, "-e", json.dumps({"model_fetch_dest": dest}), "-e",
                 "model_fetch_margin_gib={{ 0 if inventory_hostname == 'mf-t1' else 100000 }}")
    assert r.returncode != 0 and "needs" in r.text and "GiB free" in r.text, r.text
    assert host.file(dest).is_directory  # the seed fetched
    assert "Stop serving" in r.stdout
    assert not host.service("ddtree-model-peer.service").is_running
    for t in ("mf-t2", "mf-t3"):
        assert not other(t).file(dest).exists
