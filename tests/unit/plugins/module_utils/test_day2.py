"""Day-two actions as data (module_utils/day2.py): the request checked for type, form and size, the guard rails over
the log, the log's lines and the markers' form."""
import json
import time

import pytest
from ansible_collections.ddtree.fleet.plugins.module_utils import day2

HOSTS = ["b300-1", "b300-2", "rtx-1", "cpu-1"]


def req(**kw):
    raw = {"action": "fallback", "host": "rtx-1", "instance": "main", "reason": "SGLangAcceptLengthUnderFloor", "dry_run": False}
    raw.update(kw)
    return day2.check_request(raw, HOSTS)


def test_a_good_request_passes_as_plain_data():
    r, problems = req()
    assert problems == [] and r == {"action": "fallback", "host": "rtx-1", "instance": "main",
                                    "reason": "SGLangAcceptLengthUnderFloor", "dry_run": False}
    assert req(dry_run="true")[0]["dry_run"] is True and req(instance=None)[0]["instance"] == ""


@pytest.mark.parametrize("field,value,words", [
    ("host", "all", "ddtree_day2_host must be an inventory host of group gpu_hosts (got 'all'"),
    ("host", "gpu_hosts:!rtx-1", "ddtree_day2_host"),
    ("host", "{{ lookup('pipe', 'id') }}", "ddtree_day2_host"),
    ("host", ["rtx-1"], "ddtree_day2_host"),
    ("instance", "main; rm -rf /", "ddtree_day2_instance must be an instance name"),
    ("instance", "{{ 7*7 }}", "ddtree_day2_instance must be an instance name"),
    ("instance", "$(id)", "ddtree_day2_instance"),
    ("reason", "x" * 301, "ddtree_day2_reason has 301 characters, more than 300"),
    ("reason", "line\x1b[2J", "control characters"),
    ("reason", {"a": 1}, "ddtree_day2_reason must be text"),
    ("action", "reboot", "ddtree_day2_action must be one of fallback, drain, restart_group, clear (got 'reboot')"),
    ("dry_run", "maybe", "ddtree_day2_dry_run must be true or false"),
])
def test_hostile_input_is_refused_naming_variable_and_value(field, value, words):
    r, problems = req(**{field: value})
    assert len(problems) == 1 and words in problems[0], problems
    # what goes to the log is data, cut to size
    assert all(isinstance(v, (str, bool)) and len(str(v)) <= 300 + 40 for v in r.values()), r


def test_an_oversize_host_label_is_quoted_cut():
    r, problems = req(host="h" * 10000)
    assert "(10002 characters)" in problems[0] and len(r["host"]) < 120


def test_instance_is_for_fallback_only():
    assert "taken by fallback only" in req(action="drain")[1][0]
    assert req(action="drain", instance="")[1] == []


def entry(action, host, outcome="done", ago=0.0, now=None, **kw):
    t = (now or time.time()) - ago
    e = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "action": action, "host": host, "outcome": outcome,
         "reason": "r-" + action, "instance": ""}
    e.update(kw)
    return e


def test_one_action_per_host_per_interval_and_clear_is_exempt():
    now = time.time()
    log = [entry("fallback", "rtx-1", ago=100, now=now)]
    r = req()[0]
    why = day2.guard(log, r, now, 600, "50%", 4)
    assert why.startswith("one action per host per interval: rtx-1 had fallback (done) at") and "600" in why
    assert day2.guard(log, r, now, 60, "50%", 4) is None
    # a refused or dry-run line does not count; another host is free
    assert day2.guard([entry("fallback", "rtx-1", outcome="refused", ago=1, now=now)], r, now, 600, "50%", 4) is None
    assert day2.guard(log, dict(r, host="cpu-1"), now, 600, "50%", 4) is None
    assert day2.guard(log, dict(r, action="clear"), now, 600, "50%", 4) is None
    # a serving group's action reached every member: a member had it too
    group = [entry("restart_group", "b300-2", ago=10, now=now, members=["b300-1", "b300-2"])]
    assert day2.guard(group, dict(r, host="b300-1"), now, 600, "50%", 4).startswith("one action per host per interval: b300-1 had restart_group")


def test_hosts_out_at_once_and_a_drained_host_takes_only_clear():
    now = time.time()
    log = [entry("drain", "b300-1", ago=5000, now=now)]
    why = day2.guard(log, dict(req()[0], action="drain", instance=""), now, 600, 1, 4)
    assert why.startswith("at most 1 host(s) may be out of the gateway at once") and "drained: b300-1" in why
    assert day2.guard(log, dict(req()[0], action="drain"), now, 600, "50%", 4) is None
    assert "only clear acts on it" in day2.guard(log, dict(req()[0], host="b300-1"), now, 600, 4, 4)
    cleared = log + [entry("clear", "b300-1", ago=4000, now=now)]
    assert day2.guard(cleared, dict(req()[0], action="drain"), now, 600, 1, 4) is None
    assert day2.max_out_hosts("25%", 4) == 1 and day2.max_out_hosts("25%", 5) == 2 and day2.max_out_hosts("0", 4) is None


def test_fold_says_what_holds_now():
    log = [entry("fallback", "rtx-1", instance="main"), entry("drain", "b300-1"), entry("drain", "cpu-1", outcome="would"),
           entry("fallback", "b300-1", members=["b300-1", "b300-2"]), entry("clear", "b300-2")]
    s = day2.fold(log)
    assert s["rtx-1"]["fallback"]["main"]["reason"] == "r-fallback" and s["b300-1"]["drain"]["reason"] == "r-drain"
    assert "cpu-1" not in s and "b300-2" not in s and s["b300-1"]["fallback"]["*"]


def test_log_lines_are_one_json_object_each():
    line = day2.log_entry({"action": "drain", "host": "x", "reason": "a\nb {{ 7*7 }} \"q\""}, "done", "d", 1.234)
    assert "\n" not in line and json.loads(line)["reason"] == "a\nb {{ 7*7 }} \"q\"" and json.loads(line)["seconds"] == 1.2
    entries, bad = day2.read_log(line + "\nnot json\n[1]\n\n" + line)
    assert len(entries) == 2 and bad == 2


def test_markers_are_checked_before_use():
    good = day2.render_markers(day2.apply_marker({"drain": None, "fallback": {}}, "fallback", ["main"], "2026-12-08T10:00:00Z", "r"))
    assert day2.parse_markers(good.encode())["fallback"] == {"main": {"since": "2026-12-08T10:00:00Z", "reason": "r"}}
    for bad, words in [(b"x" * 70000, "more than"), (b"{", "not JSON"), (b"[]", "version 1"),
                       (b'{"version": 1, "drain": {"since": "yesterday", "reason": ""}}', "not a UTC time"),
                       (b'{"version": 1, "fallback": {"../x": {"since": "2026-12-08T10:00:00Z"}}}', "not a name"),
                       (b'{"version": 1, "drain": {"since": "2026-12-08T10:00:00Z", "reason": "' + b"x" * 400 + b'"}}', "at most 300"),
                       (b'{"version": 1, "extra": 1}', "version 1")]:
        with pytest.raises(day2.BadMarker, match=words):
            day2.parse_markers(bad)
    kept = day2.apply_marker(day2.parse_markers(good.encode()), "fallback", ["main", "b"], "2026-12-09T10:00:00Z", "later")
    assert kept["fallback"]["main"]["since"] == "2026-12-08T10:00:00Z" and kept["fallback"]["b"]["reason"] == "later"
