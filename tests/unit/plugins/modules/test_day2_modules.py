"""The day-two modules for real: day2_marker writes, reads back and refuses what is not its own form; day2_log appends
one JSON line; day2_request reads the request untemplated from a real playbook run with -e @file (Jinja in a label
stays text: nothing runs) and applies the guard rails over the log."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_marker_present_read_absent_with_check_and_diff(run_module, tmp_path):
    d = tmp_path / "day2"
    args = dict(path=str(d), state="present", kind="fallback", instances=["main"], since="2026-12-08T10:00:00Z",
                reason="accept && $(id) 'q'")
    r = run_module("day2_marker", check=True, diff=True, **args)
    assert r["changed"] and not (d / "markers.json").exists() and '"main"' in r["diff"]["after"]
    r = run_module("day2_marker", **args)
    assert r["changed"] and oct((d / "markers.json").stat().st_mode & 0o777) == "0o644"
    assert run_module("day2_marker", **args)["changed"] is False
    r = run_module("day2_marker", path=str(d))
    assert r["markers"] == {"drain": None, "fallback": {"main": {"since": "2026-12-08T10:00:00Z", "reason": "accept && $(id) 'q'"}}}
    r = run_module("day2_marker", path=str(d), state="present", kind="drain", since="2026-12-08T11:00:00Z", reason="XID 79")
    assert r["markers"]["drain"]["reason"] == "XID 79" and r["markers"]["fallback"]["main"]
    assert run_module("day2_marker", path=str(d), state="absent")["changed"] and not (d / "markers.json").exists()
    assert run_module("day2_marker", path=str(d), state="absent")["changed"] is False


def test_a_marker_that_is_not_its_own_form_is_refused_with_the_fix(run_module, tmp_path):
    d = tmp_path / "day2"
    d.mkdir()
    (d / "markers.json").write_text('{"version": 1, "drain": {"since": "soon", "reason": ""}}')
    r = run_module("day2_marker", path=str(d))
    assert r["failed"] and "not a UTC time" in r["msg"] and "rm %s/markers.json" % d in r["msg"] and "ddtree_day2_action=clear" in r["msg"]
    (d / "markers.json").unlink()
    (tmp_path / "elsewhere.json").write_text('{"version": 1}')
    os.symlink(tmp_path / "elsewhere.json", d / "markers.json")
    r = run_module("day2_marker", path=str(d))
    assert r["failed"] and "symbolic link is refused" in r["msg"]
    os.unlink(d / "markers.json")
    (d / "markers.json").write_text('{"version": 1}')
    os.chmod(d / "markers.json", 0o666)
    assert "only root can write" in run_module("day2_marker", path=str(d))["msg"]


def test_log_appends_one_json_line(run_module, tmp_path):
    log = tmp_path / "day2" / "actions.jsonl"
    req = {"action": "drain", "host": "rtx-1", "instance": "", "reason": "GPUXidRefused\n| $(id)", "dry_run": False}
    assert run_module("day2_log", check=True, path=str(log), request=req, outcome="done")["changed"] is False
    assert not log.exists()
    run_module("day2_log", path=str(log), request=req, outcome="done", detail="drained", seconds=2.26)
    run_module("day2_log", path=str(log), request=req, outcome="refused", detail="interval")
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and [json.loads(x)["outcome"] for x in lines] == ["done", "refused"]
    e = json.loads(lines[0])
    assert e["reason"] == req["reason"] and e["seconds"] == 2.3 and set(e) == {
        "time", "action", "host", "instance", "reason", "dry_run", "outcome", "detail", "seconds"}


def request_play(tmp_path, extra, log_lines=()):
    """The entry point request through ansible-playbook with the request in a JSON file (as the loop passes it)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"rtx-1": {}, "cpu-1": {}}},
                                                    "routers": {"hosts": {"rt": {}}}}}}))
    log = tmp_path / "reports" / "day2" / "actions.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(json.dumps(x) + "\n" for x in log_lines))
    (tmp_path / "req.json").write_text(json.dumps(extra))
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "ddtree.fleet.ddtree_day2", "tasks_from": "request"}},
        {"ansible.builtin.copy": {"content": "{{ ddtree_day2_checked | to_json }}", "dest": str(tmp_path / "out.json"), "mode": "0600"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), DDTREE_REPORT_DIR=str(tmp_path / "reports"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false")
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(tmp_path / "play.yml"), "-e", "@" + str(tmp_path / "req.json")],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    out = json.loads((tmp_path / "out.json").read_text()) if (tmp_path / "out.json").exists() else None
    return p, out, [json.loads(x) for x in log.read_text().splitlines()]


def test_jinja_in_the_request_stays_data_and_is_refused(tmp_path):
    canary = tmp_path / "pwned"
    p, out, log = request_play(tmp_path, {
        "ddtree_day2_action": "fallback", "ddtree_day2_host": "{{ lookup('pipe', 'touch %s') }}" % canary,
        "ddtree_day2_instance": "{{ lookup('pipe', 'touch %s') }}" % canary,
        "ddtree_day2_reason": "{{ lookup('pipe', 'touch %s') }}" % canary})
    assert not canary.exists(), "a template in the request ran"
    assert p.returncode == 2 and "day-two request refused, nothing changed" in p.stdout
    assert "ddtree_day2_host must be an inventory host of group gpu_hosts (got \"{{ lookup('pipe'" in p.stdout
    assert len(log) == 1 and log[0]["outcome"] == "refused" and log[0]["reason"].startswith("{{ lookup('pipe'")


def test_a_good_request_proceeds_a_dry_run_is_recorded_and_the_interval_refuses(tmp_path):
    good = {"ddtree_day2_action": "drain", "ddtree_day2_host": "rtx-1", "ddtree_day2_reason": "GPUXidRefused {{ 1 }}"}
    p, out, log = request_play(tmp_path / "a", good)
    assert p.returncode == 0, p.stdout + p.stderr
    assert out["outcome"] == "proceed" and out["request"]["reason"] == "GPUXidRefused {{ 1 }}" and log == []
    p, out, log = request_play(tmp_path / "b", dict(good, ddtree_day2_dry_run=True))
    assert p.returncode == 0 and out["outcome"] == "would" and log[0]["outcome"] == "would" and log[0]["dry_run"] is True
    recent = {"time": __import__("time").strftime("%Y-%m-%dT%H:%M:%SZ", __import__("time").gmtime()), "action": "fallback",
              "host": "rtx-1", "outcome": "done"}
    p, out, log = request_play(tmp_path / "c", good, [recent])
    assert p.returncode == 0 and out["outcome"] == "refused" and "one action per host per interval" in log[-1]["detail"]
