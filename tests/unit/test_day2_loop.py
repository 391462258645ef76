"""The day-two loop end to end on 127.0.0.1, with the real programs: Debian's Alertmanager (DDTREE_ALERTMANAGER)
routes alerts to the real ansible-rulebook (DDTREE_RULEBOOK, on Java) running the collection's rulebook
(extensions/eda/rulebooks/day2.yml) and event source, which runs the collection's day-two playbook (ddtree.fleet.day2)
in dry run: it checks each request as data (a host of gpu_hosts, given as a string) and logs it to actions.jsonl. scripts/test unpacks and builds both
(ensure_alertmanager, ensure_rulebook). One test: the Java start is the expensive part.

Alerts go in through Alertmanager's own API, as Prometheus sends them; hostile ones too, and raw bodies straight
at the webhook. Asserted: the right actions with the right extra vars, once per host (throttle), in dry run; names that look like
numbers ("100", "0") arrive as strings (the playbook takes no other type); no action for a resolved alert, a warning, a label of the wrong form, a host
outside the allow-list (the inventory's gpu_hosts) or an oversize body; no label or annotation is ever templated (a
Jinja lookup in them would create a file) and a $ANSIBLE_VAULT marker does not reach ansible-rulebook's vault.
Alertmanager's API takes anyone's alerts: the source's confirmation in Prometheus (prometheus_url) is off here and
unit-tested in test_day2_alertmanager_source.py."""
import datetime
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1].parent
AM = os.environ.get("DDTREE_ALERTMANAGER")
RB = os.environ.get("DDTREE_RULEBOOK")
pytestmark = pytest.mark.skipif(not (AM and RB), reason="DDTREE_ALERTMANAGER/DDTREE_RULEBOOK unset: run through scripts/test")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_for(what, check, timeout, procs):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for name, p, log in procs:
            assert p.poll() is None, "%s exited %s while waiting for %s:\n%s" % (name, p.returncode, what, log.read_text()[-3000:])
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("no %s within %d s:\n%s" % (what, timeout, "\n".join(
        "--- %s\n%s" % (name, log.read_text()[-3000:]) for name, _p, log in procs)))


def test_alerts_through_alertmanager_and_the_rulebook_run_the_checked_actions(tmp_path):
    am_port, hook_port = free_port(), free_port()
    reports = tmp_path / "reports"
    actions = reports / "day2" / "actions.jsonl"
    marker = tmp_path / "templated"
    token = tmp_path / "token"
    token.write_text("day2-loop-test-token-0123456789\n")
    token.chmod(0o600)
    inv = tmp_path / "inventory"
    inv.mkdir()
    # "100": a name NativeEnvironment would make an int (the rulebook passes names | tojson: they stay strings)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": {
        "b300-1": {}, "b300-2": {}, "rtxpro-1": {}, "100": {}}}, "routers": {"hosts": {"router": {}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), DDTREE_REPORT_DIR=str(reports),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
               PATH=os.pathsep.join([os.path.dirname(RB), os.path.dirname(sys.executable), os.environ["PATH"]]))
    # the allow-list as docs/day2.md writes it: the inventory's listing, whose gpu_hosts the source takes
    hosts_file = tmp_path / "inventory.json"
    subprocess.run(["ansible-inventory", "-i", str(inv), "--list", "--output", str(hosts_file)], env=env, check=True,
                   capture_output=True)
    # no prometheus_url: alerts go in through Alertmanager's API here (the confirmation is unit-tested against a
    # stand-in Prometheus in test_day2_alertmanager_source.py)
    (tmp_path / "vars.yml").write_text(yaml.safe_dump({
        "ddtree_day2_dry_run": True, "ddtree_day2_listen_port": hook_port, "ddtree_day2_token_file": str(token),
        "ddtree_day2_hosts_file": str(hosts_file)}))
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "ddtree-day2", "group_by": ["alertname", "host", "sglang_instance"], "group_wait": "1s",
                  "group_interval": "2s", "repeat_interval": "1h"},
        "receivers": [{"name": "ddtree-day2", "webhook_configs": [{
            "url": "http://127.0.0.1:%d/alerts" % hook_port, "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token)}}}]}]}))
    procs = []
    try:
        for name, argv in (
                ("alertmanager", [AM, "--config.file=%s" % (tmp_path / "alertmanager.yml"), "--storage.path=%s" % (tmp_path / "am"),
                                  "--web.listen-address=127.0.0.1:%d" % am_port, "--cluster.listen-address="]),
                ("ansible-rulebook", [RB, "-r", "ddtree.fleet.day2", "-i", str(inv), "--vars", str(tmp_path / "vars.yml")])):
            log = tmp_path / (name + ".log")
            with open(log, "wb") as out:
                procs.append((name, subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT), log))
        wait_for("Alertmanager ready", lambda: request(am_port, "GET", "/-/ready")[0] == 200, 60, procs)
        wait_for("the webhook listening", lambda: socket.create_connection(("127.0.0.1", hook_port), 1).close() is None, 90, procs)

        # straight at the webhook: refused whole, nothing queued, the loop keeps serving
        auth = {"Authorization": "Bearer day2-loop-test-token-0123456789", "Content-Type": "application/json"}
        assert request(hook_port, "POST", "/alerts", b"x" * (2 * 1024 * 1024), auth)[0] == 413
        assert request(hook_port, "POST", "/alerts", b"{not json", auth)[0] == 400
        labels = {"alertname": "GPUXidRefused", "host": "rtxpro-1"}
        ok = json.dumps({"version": "4", "alerts": [{"status": "firing", "labels": labels}]})
        assert request(hook_port, "POST", "/alerts", ok, {"Content-Type": "application/json"})[0] == 401  # no token

        now = datetime.datetime.now(datetime.timezone.utc)
        jinja = "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % marker

        def alert(name, ends=None, summary="", **labels):
            a = {"labels": dict(alertname=name, **labels), "annotations": {"summary": summary}, "startsAt": now.isoformat()}
            if ends is not None:
                a["startsAt"] = (now - datetime.timedelta(seconds=60)).isoformat()
                a["endsAt"] = (now + datetime.timedelta(seconds=ends)).isoformat()
            return a
        alerts = [
            alert("GPUXidRefused", host="b300-1", gpu="0", summary="GPU 0 on b300-1 reported Xid 79"),
            alert("SGLangAcceptLengthUnderFloor", host="rtxpro-1", sglang_instance="main", summary="Accept length 1.0 " + jinja),
            alert("SGLangAcceptLengthUnderFloor", host="100", sglang_instance="0", summary="$ANSIBLE_VAULT;1.1;AES256"),
            alert("SGLangGroupMemberDown", host="b300-2", serving_group="b300-2x8-1", node_rank="0", summary="member down"),
            alert("GPUXidRefused", host="ghost-1", summary="a host outside the inventory"),
            alert("GPUXidRefused", host="router", summary="a host of the inventory, not of gpu_hosts"),
            alert("GPUXidRefused", host="b300-2; touch %s" % marker, summary="shell in a label"),
            alert("GPUXidRefused", host=jinja, summary="Jinja in a label"),
            alert("GPUXidWarning", host="rtxpro-1", summary="a warning: no action"),
            alert("GPUXidRefused", ends=-1, host="rtxpro-1", summary="resolved already: no action"),
        ]
        status, body = request(am_port, "POST", "/api/v2/alerts", json.dumps(alerts), {"Content-Type": "application/json"})
        assert status == 200, body

        def lines():
            return [json.loads(x) for x in actions.read_text().splitlines()] if actions.exists() else []
        wait_for("four actions in %s" % actions, lambda: len(lines()) >= 4, 120, procs)
        # the same host again within the interval (another GPU of b300-1, a new notification of its group): throttled
        status, body = request(am_port, "POST", "/api/v2/alerts", json.dumps([alert(
            "GPUXidRefused", host="b300-1", gpu="3", summary="GPU 3 on b300-1 reported Xid 79")]), {"Content-Type": "application/json"})
        assert status == 200, body
        time.sleep(10)  # group_interval 2 s: a second notification has come and gone by now
        got = sorted(lines(), key=lambda r: (r["action"], r["host"]))
        for r in got:
            r.pop("time"), r.pop("seconds")
        assert got == [
            {"action": "drain", "host": "b300-1", "instance": "", "reason": "GPUXidRefused: GPU 0 on b300-1 reported Xid 79",
             "dry_run": True, "outcome": "would", "detail": "dry run: would drain b300-1"},
            {"action": "fallback", "host": "100", "instance": "0", "reason": "SGLangAcceptLengthUnderFloor: ANSIBLE_VAULT;1.1;AES256",
             "dry_run": True, "outcome": "would", "detail": "dry run: would fallback 100"},
            {"action": "fallback", "host": "rtxpro-1", "instance": "main",
             "reason": "SGLangAcceptLengthUnderFloor: Accept length 1.0 lookup('ansible.builtin.pipe', 'touch %s')" % marker,
             "dry_run": True, "outcome": "would", "detail": "dry run: would fallback rtxpro-1"},
            {"action": "restart_group", "host": "b300-2", "instance": "", "reason": "SGLangGroupMemberDown: member down",
             "dry_run": True, "outcome": "would", "detail": "dry run: would restart_group b300-2"},
        ], got
        assert not marker.exists(), "a label or annotation was templated"
        rb_log = procs[1][2].read_text()
        assert "label host='b300-2; touch" in rb_log and "label host=\"{{ lookup(" in rb_log, rb_log[-3000:]  # dropped, logged
        for outside in ("ghost-1", "router"):  # not in the allow-list (gpu_hosts): dropped before the queue, logged
            assert "label host='%s' is not a host of the allow-list" % outside in rb_log, rb_log[-3000:]
    finally:
        for _name, p, _log in procs:
            p.terminate()
        for _name, p, _log in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
