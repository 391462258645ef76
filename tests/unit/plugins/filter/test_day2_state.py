"""The fleet report's view of the day-two log (filter day2_state): what holds per host, the last actions."""
import json

from ansible_collections.ddtree.fleet.plugins.filter.day2 import day2_state


def line(**kw):
    e = {"time": "2026-12-08T10:00:00Z", "action": "fallback", "host": "rtx-1", "instance": "main", "reason": "accept 1.0",
         "dry_run": False, "outcome": "done", "detail": "", "seconds": 3.1}
    e.update(kw)
    return json.dumps(e)


def test_state_and_last_actions():
    text = "\n".join([line(), line(action="drain", host="b300-1", instance="", reason="Xid 79", time="2026-12-08T11:00:00Z"),
                      line(action="drain", host="cpu-1", outcome="refused"), "garbage", line(action="clear", host="b300-1")])
    s = day2_state(text, last=3)
    assert s["hosts"] == {"rtx-1": ["fallback (main) since 2026-12-08T10:00:00Z: accept 1.0"]}
    assert [a["action"] for a in s["last"]] == ["clear", "drain", "drain"] and s["unparsed"] == 1
    s = day2_state("\n".join([line(action="drain", host="b300-1", instance="", reason="Xid 79")]))
    assert s["hosts"] == {"b300-1": ["drained since 2026-12-08T10:00:00Z: Xid 79"]}
    assert day2_state("") == {"hosts": {}, "last": [], "unparsed": 0}
