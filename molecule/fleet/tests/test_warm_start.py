"""Warm start across the fleet (docs/warm_start.md), after test_fleet.py: every GPU host packed the JIT cache
its admitted server wrote, keyed by what it was built for (the two B300 hosts share a key, the RTX PRO 6000
host has its own); a re-imaged B300 host gets the cache from its peer over ssh before its first start and
its server finds its kernel there (the stand-in's JIT step: tests/doubles/sglang_server.py), while a
re-imaged host whose key no peer holds starts cold and says why; a corrupt artefact on the peer is refused
and the start goes cold, never fails."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import PROJECT, other, playbook  # noqa: E402

testinfra_hosts = ["ansible://fl-router"]
WARM = "/opt/ddtree/warm"
UNIT = "ddtree-sglang@main.service"


def index(name):
    """This host's warm-start index, by key id."""
    h = other(name)
    out = {}
    for path in h.check_output("ls %s/keys/ 2>/dev/null || true" % WARM).split():
        doc = json.loads(h.file("%s/keys/%s" % (WARM, path)).content_string)
        out[doc["key_id"]] = doc
    return out


def live_cache(name):
    env = other(name).file("/opt/ddtree/service/main/current/env").content_string
    # the release's env file quotes its values (systemd's EnvironmentFile syntax)
    return dict(line.split("=", 1) for line in env.splitlines() if "=" in line)["SGLANG_CACHE_DIR"].strip('"')


def reimage(*names):
    """What a re-imaged host lacks: its server, its releases and its warm-start store (the venv and the
    weights come back through venv_stream and model_fetch, tested elsewhere; here they stay)."""
    for n in names:
        h = other(n)
        h.run("systemctl stop %s" % UNIT)
        h.check_output("rm -rf %s /opt/ddtree/service/main && echo gone" % WARM)


def serve():
    """site.yml's facts and service stages (what a re-imaged host needs to serve again), then the report.
    Returns (result, {host: its instance's row in fleet.json})."""
    r = playbook("playbooks/gpu_facts.yml", str(PROJECT / "playbooks" / "service.yml"),
                 str(PROJECT / "playbooks" / "report.yml"), limit=None)
    doc = json.loads(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "fleet.json").read_text())
    return r, dict((x["host"], (x.get("service") or [{}])[0]) for x in doc["hosts"])


def jit_since(name, since):
    """What the server's JIT step did at each start since the epoch second `since` (the stand-in's start line:
    jit=compiled when it wrote its kernel, jit=cached when the kernel was there: tests/doubles/sglang_server.py)."""
    out = other(name).check_output("journalctl -u %s -o cat --no-pager --since @%d" % (UNIT, since))
    return [line.rsplit("jit=", 1)[1] for line in out.splitlines() if line.startswith("sglang-double ") and "jit=" in line]


def now(name):
    return int(other(name).check_output("date +%s"))


def test_every_gpu_host_packed_the_cache_of_what_it_runs():
    keys = {}
    for n in ("fl-b300-1", "fl-b300-2", "fl-rtx-1"):
        idx = index(n)
        cache = live_cache(n)
        kid = cache.rsplit("/", 1)[1]
        assert cache == "%s/caches/%s" % (WARM, kid) and kid in idx, (n, cache, sorted(idx))
        entry = idx[kid]
        art = "%s/artifacts/%s.tar.gz" % (WARM, entry["sha256"])
        assert other(n).check_output("sha256sum %s" % art).split()[0] == entry["sha256"]
        assert entry["files"] >= 1 and entry["packed_by"] == n
        keys[n] = entry["key"]
    assert keys["fl-b300-1"] == keys["fl-b300-2"] and keys["fl-b300-1"]["arch"] == "sm_103"
    assert keys["fl-rtx-1"]["arch"] == "sm_120" and keys["fl-rtx-1"]["venv"] == keys["fl-b300-1"]["venv"]
    assert keys["fl-b300-1"]["driver_branch"] not in ("", "none")
    # the server (the service user, under ProtectSystem=strict) wrote its kernel into the key's directory
    kernel = other("fl-rtx-1").check_output("find %s -name '*.cubin' -user ddtree" % live_cache("fl-rtx-1"))
    assert kernel.endswith(".cubin")


def test_a_reimaged_host_starts_warm_from_its_peer_and_one_without_a_peer_cold():
    peer_cache = live_cache("fl-b300-1")
    want = other("fl-b300-1").check_output("cd %s && find . -type f -exec sha256sum {} + | sort" % peer_cache)
    reimage("fl-b300-2", "fl-rtx-1")
    t0 = {n: now(n) for n in ("fl-b300-2", "fl-rtx-1")}
    r, rows = serve()
    assert r.returncode == 0, r.text[-3000:]
    kid = peer_cache.rsplit("/", 1)[1]
    # the report says per host how it started: from the peer, kept, or cold and why
    assert rows["fl-b300-2"]["warm"].startswith("warm (key %s, from fl-b300-1, " % kid), rows["fl-b300-2"]
    assert rows["fl-b300-1"]["warm"] == "warm (key %s, kept on this host)" % kid  # restarted with its group
    assert rows["fl-b300-2"]["start_seconds"] > 0
    assert other("fl-b300-2").check_output("cd %s && find . -type f -exec sha256sum {} + | sort" % live_cache("fl-b300-2")) == want
    starts = jit_since("fl-b300-2", t0["fl-b300-2"])
    assert starts and set(starts) == {"cached"}, starts  # its server found the kernel at every start: nothing compiled
    rtx = live_cache("fl-rtx-1").rsplit("/", 1)[1]
    assert rows["fl-rtx-1"]["warm"].startswith("cold (key %s: " % rtx), rows["fl-rtx-1"]
    assert jit_since("fl-rtx-1", t0["fl-rtx-1"])[0] == "compiled"
    assert "start warm (key %s, from fl-b300-1" % kid in Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "fleet.md").read_text()
    # fl-b300-2 now holds the artefact too: it serves the next host of its key
    assert kid in index("fl-b300-2") and index("fl-b300-2")[kid]["fetched_from"] == "fl-b300-1"


def test_a_corrupt_artefact_on_the_peer_is_refused_and_the_start_goes_cold():
    kid = live_cache("fl-b300-1").rsplit("/", 1)[1]
    sha = index("fl-b300-1")[kid]["sha256"]
    other("fl-b300-1").check_output(
        "printf 'X' | dd of=%s/artifacts/%s.tar.gz bs=1 seek=64 conv=notrunc status=none && echo flipped" % (WARM, sha))
    reimage("fl-b300-2")
    t0 = now("fl-b300-2")
    r, rows = serve()
    assert r.returncode == 0, r.text[-3000:]
    verdict = rows["fl-b300-2"]["warm"]
    assert verdict.startswith("cold (key %s: fl-b300-1: the artefact's sha256 is " % kid) and "(corrupt)" in verdict, verdict
    assert jit_since("fl-b300-2", t0)[0] == "compiled"
    assert other("fl-b300-2").service(UNIT).is_running
    # the peer packed its cache again (its artefact no longer matched its index), so the next host is warm
    fixed = index("fl-b300-1")[kid]["sha256"]
    assert other("fl-b300-1").check_output("sha256sum %s/artifacts/%s.tar.gz" % (WARM, fixed)).split()[0] == fixed
