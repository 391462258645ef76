"""Day-two actions (playbooks/day2.yml, roles/ddtree_day2), after test_fleet.py, against the fleet as site.yml left it:
an instance whose acceptance collapses after admission falls back to its autoregressive release (gated, back in the
gateway, kept so by site.yml) until clear; a drained host leaves the gateway and is refused by site.yml's preflight
while the rest deploys, until clear; restart_group restarts every member of the serving group and puts it back; the
guard rails refuse a second action within the interval, a dry run changes nothing, and hostile input is refused before
anything changes. Every run is checked in the action log (reports/day2/actions.jsonl) and on the hosts."""
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://fl-router"]
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports")
LOG = REPORTS / "day2" / "actions.jsonl"
GROUP = ["fl-b300-1", "fl-b300-2"]
WORKERS = ["fl-b300-1", "fl-rtx-1"]
UNIT = "ddtree-sglang@main.service"
DOUBLE = "/etc/ddtree-sglang-double"
COLLAPSED = DOUBLE + "/collapsed"  # the stand-in's acceptance collapses while this file exists
MARKERS = "/opt/ddtree/day2/markers.json"


def day2(action, host, interval=0, **request):
    """playbooks/day2.yml with the request as the loop sends it (-e @file.json); interval: ddtree_day2_min_interval_s."""
    doc = dict({"ddtree_day2_action": action, "ddtree_day2_host": host}, **dict(("ddtree_day2_" + k, v) for k, v in request.items()))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    extra = [] if interval is None else ["-e", "ddtree_day2_min_interval_s=%d" % interval]
    try:
        return playbook("playbooks/day2.yml", "-e", "@" + f.name, *extra, limit=None)
    finally:
        os.unlink(f.name)


def logged(n=1):
    """The last n entries of the action log."""
    return [json.loads(line) for line in LOG.read_text().splitlines()[-n:]]


def workers(router):
    return sorted(w["url"] for w in json.loads(router.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"])


def url_of(name):
    return "http://%s:30000" % other(name).ansible.get_variables()["ansible_host"]


def info(name):
    return json.loads(other(name).check_output("curl -sf http://127.0.0.1:30000/server_info"))


def main_pid(name):
    return other(name).check_output("systemctl show -P MainPID %s" % UNIT)


def started(name):
    """How the instance's last start went (ddtree_service keeps it beside the release: release, admission)."""
    return json.loads(other(name).file("/opt/ddtree/service/main/start.json").content_string)


def recap(text, name):
    """The PLAY RECAP counts of one host ({'ok': .., 'changed': .., ...})."""
    part = text.rsplit("PLAY RECAP", 1)[1].split(name + " : ", 1)[1]
    return dict((k, int(v)) for k, v in (kv.split("=") for kv in part.split()[:7]))


@pytest.fixture(scope="module")
def collapsing():
    """fl-rtx-1's stand-in told accept_collapsed_while (one fault file for the module), restarted to read it: admitted
    with a good accept length, it collapses when the test says so."""
    rtx = other("fl-rtx-1")
    rtx.run_test("mkdir -p %s && echo '%s' > %s/faults.json" % (DOUBLE, json.dumps(
        [{"match": "--speculative-algorithm", "mode": "accept_collapsed_while:%s" % COLLAPSED}]), DOUBLE))
    rtx.run_test("systemctl restart %s" % UNIT)
    yield rtx
    rtx.run_test("rm -f %s %s/faults.json" % (COLLAPSED, DOUBLE))


def test_fallback_then_drain_until_clear(host, collapsing):
    """fl-rtx-1 falls back (its acceptance collapsed after admission), site.yml keeps it so; then it is drained too,
    site.yml refuses it while the rest deploys; one clear, refused while its GPUs fail the health preflight, then
    brings it back: speculation on, gated, in the gateway."""
    rtx = collapsing
    rtx.run_test("touch %s" % COLLAPSED)
    metrics = rtx.check_output("for i in $(seq 60); do curl -sf http://127.0.0.1:30000/metrics && break; sleep 1; done")
    assert "sglang:spec_accept_length" in metrics and ' 1.0' in metrics.split("sglang:spec_accept_length{", 1)[1].splitlines()[0]
    reason = "SGLangAcceptLengthUnderFloor: accept length 1.0 under the floor on fl-rtx-1/main"
    r = day2("fallback", "fl-rtx-1", instance="main", reason=reason)
    assert r.returncode == 0, r.text[-4000:]
    done = logged()[0]
    assert (done["action"], done["host"], done["instance"], done["outcome"], done["reason"]) == (
        "fallback", "fl-rtx-1", "main", "done", reason), done
    assert not info("fl-rtx-1").get("speculative_algorithm")  # its autoregressive release
    start = started("fl-rtx-1")
    assert start["admission"]["correctness"] == "reference" and start["admission"]["accept_length"] is None, start
    assert workers(host) == sorted(url_of(n) for n in WORKERS)
    marker = json.loads(rtx.file(MARKERS).content_string)
    assert marker["drain"] is None and marker["fallback"]["main"]["reason"] == reason, marker
    # site.yml keeps it autoregressive: nothing to change on it
    r = playbook("site.yml")
    assert r.returncode == 0, r.text[-3000:]
    assert recap(r.text, "fl-rtx-1")["changed"] == 0, r.text[-3000:]
    assert not info("fl-rtx-1").get("speculative_algorithm")
    assert "| fl-rtx-1 | fallback (main) since %s: %s |" % (done["time"], reason) in (REPORTS / "fleet.md").read_text()
    # drained: out of the gateway, its server left running; site.yml refuses it, the rest deploys
    pid = main_pid("fl-rtx-1")
    r = day2("drain", "fl-rtx-1", reason="GPUXidRefused: XID 79 on GPU 3")
    assert r.returncode == 0, r.text[-4000:]
    assert logged()[0]["outcome"] == "done"
    assert workers(host) == [url_of("fl-b300-1")] and main_pid("fl-rtx-1") == pid
    r = playbook("site.yml")
    assert r.returncode != 0
    since = json.loads(rtx.file(MARKERS).content_string)["drain"]["since"]
    assert ("fl-rtx-1: drained by a day-two action since %s (reason: GPUXidRefused: XID 79 on GPU 3)" % since) in r.text, r.text[-3000:]
    assert "ddtree_day2_action=clear -e ddtree_day2_host=fl-rtx-1" in r.text
    assert all(recap(r.text, n)["failed"] == 0 for n in GROUP + ["fl-router"]), r.text[-2000:]  # the rest deployed
    assert workers(host) == [url_of("fl-b300-1")] and main_pid("fl-rtx-1") == pid
    # clear is refused while the host's GPUs fail the health preflight: it stays drained
    rtx.run_test("echo health/h100-sxm-8x-hw-slowdown-power-brake__1.txt > /etc/nvidia-smi-replay/q")
    try:
        r = day2("clear", "fl-rtx-1", reason="operator: too early")
    finally:
        rtx.run_test("rm -f /etc/nvidia-smi-replay/q")
    assert r.returncode != 0 and "clock event reason is HW Slowdown" in r.text, r.text[-3000:]
    assert logged()[0]["outcome"] == "failed" and json.loads(rtx.file(MARKERS).content_string)["drain"]["since"] == since
    assert workers(host) == [url_of("fl-b300-1")]
    # the acceptance recovered and the GPU is fixed: clear brings speculation back through the gates, into the gateway
    rtx.run_test("rm -f %s" % COLLAPSED)
    r = day2("clear", "fl-rtx-1", reason="operator: GPU replaced, drafter fixed")
    assert r.returncode == 0, r.text[-4000:]
    assert logged()[0]["outcome"] == "done"
    assert info("fl-rtx-1").get("speculative_algorithm")
    start = started("fl-rtx-1")
    assert start["admission"]["correctness"].startswith("equal on ") and start["admission"]["accept_length"] > 2, start
    assert workers(host) == sorted(url_of(n) for n in WORKERS)
    assert not rtx.file(MARKERS).exists


def test_restart_group_restarts_every_member(host):
    pids = dict((n, main_pid(n)) for n in GROUP)
    r = day2("restart_group", "fl-b300-2", reason="SGLangGroupMemberDown: fl-b300-2")
    assert r.returncode == 0, r.text[-4000:]
    done = logged()[0]
    assert (done["outcome"], done["members"]) == ("done", GROUP), done
    assert all(main_pid(n) != pids[n] for n in GROUP), pids
    assert workers(host) == sorted(url_of(n) for n in WORKERS)
    # the guard rails: a second action on a member within the interval (the default 600 s) is refused, run ends 0
    r = day2("fallback", "fl-b300-1", interval=None, reason="again")
    assert r.returncode == 0, r.text[-3000:]
    refused = logged()[0]
    assert refused["outcome"] == "refused" and "one action per host per interval" in refused["detail"], refused
    assert all(main_pid(n) != pids[n] for n in GROUP) and workers(host) == sorted(url_of(n) for n in WORKERS)


def test_dry_run_and_hostile_input_change_nothing(host):
    before = (workers(host), main_pid("fl-rtx-1"), other("fl-rtx-1").file(MARKERS).exists)
    r = day2("drain", "fl-rtx-1", dry_run=True, reason="dry")
    assert r.returncode == 0, r.text[-3000:]
    assert logged()[0]["outcome"] == "would"
    for bad in ({"host": "fl-nowhere"}, {"host": "fl-rtx-1", "instance": "main; touch /tmp/pwned {{ 7 * 7 }}"}):
        r = day2("fallback", bad.pop("host"), **bad)
        assert r.returncode == 2 and "day-two request refused, nothing changed" in r.text, r.text[-3000:]
        e = logged()[0]
        assert e["outcome"] == "refused" and "49" not in e["detail"], e
    assert "'fl-nowhere'" in logged(2)[0]["detail"] and "{{ 7 * 7 }}" in logged()[0]["detail"]
    assert (workers(host), main_pid("fl-rtx-1"), other("fl-rtx-1").file(MARKERS).exists) == before
    assert not other("fl-rtx-1").file("/tmp/pwned").exists
