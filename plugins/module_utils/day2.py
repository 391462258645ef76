# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Day-two actions (roles/ddtree_day2, issue #41): the request checked as data, the guard rails over the
action log, the log's lines and the host-side markers (fallback, drain) that ddtree_service honours.

Every value here may come from an alert label (untrusted): it is checked for type, form and size and is
never templated, passed to a shell or used as a path."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re
from datetime import datetime, timezone

ACTIONS = ("fallback", "drain", "restart_group", "clear")
OUTCOMES = ("done", "would", "refused", "failed")
# Actions that take workers out of the gateway (a drain until cleared, the others while they restart).
TAKES_OUT = ("fallback", "drain", "restart_group")
REASON_MAX = 300
NAME_MAX = 64
INSTANCE_RE = re.compile(r"^[A-Za-z0-9_-]{1,%d}$" % NAME_MAX)
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|\+00:00)$")
MARKER_MAX_BYTES = 64 * 1024
MARKER_NAME = "markers.json"
SHOWN_MAX = 80  # characters of a refused value quoted back in a message
# How an operator clears a host (HOST: its inventory name), for the messages that refuse it.
CLEAR_COMMAND = "ansible-playbook ddtree.fleet.day2 -i INVENTORY -e ddtree_day2_action=clear -e ddtree_day2_host=HOST"


def shown(value):
    """A refused value as a message quotes it: its repr, cut to SHOWN_MAX characters (never templated)."""
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX] + "... (%d characters)" % len(text)


def plain(value):
    """A plain str (no tags, no subclass) of a str, else the value unchanged."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    return value


def now_iso():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    """Seconds since the epoch of an ISO time of this module's form (UTC), else None."""
    if not isinstance(text, str) or not TIME_RE.match(text):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    return None


def check_request(raw, gpu_hosts):
    """(request, problems): the request's fields as plain data, and what is wrong with them in words, each naming
    the variable, the value and the fix. raw: the variables as given (action, host, instance, reason, dry_run)."""
    problems = []
    action, host, instance, reason, dry = (raw.get(k) for k in ("action", "host", "instance", "reason", "dry_run"))
    if not isinstance(action, str) or action not in ACTIONS:
        problems.append("ddtree_day2_action must be one of %s (got %s)" % (", ".join(ACTIONS), shown(action)))
    if not isinstance(host, str) or host not in gpu_hosts:
        problems.append("ddtree_day2_host must be an inventory host of group gpu_hosts (got %s; the group has %d "
                        "hosts, e.g. %s): an alert's host label that names no such host is not acted on"
                        % (shown(host), len(gpu_hosts), ", ".join(sorted(gpu_hosts)[:3]) or "none"))
    if instance in (None, ""):
        instance = ""
    elif not isinstance(instance, str) or not INSTANCE_RE.match(instance):
        problems.append("ddtree_day2_instance must be an instance name (letters, digits, - and _, at most %d; got %s)"
                        % (NAME_MAX, shown(instance)))
    elif action in ACTIONS and action != "fallback":
        problems.append("ddtree_day2_instance is taken by fallback only (got %s for %s)" % (shown(instance), shown(action)))
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        problems.append("ddtree_day2_reason must be text (got %s)" % type(reason).__name__)
    elif len(reason) > REASON_MAX:
        problems.append("ddtree_day2_reason has %d characters, more than %d: shorten it (the alert's name and summary)"
                        % (len(reason), REASON_MAX))
    elif any(ord(c) < 32 and c not in "\t" for c in reason):
        problems.append("ddtree_day2_reason holds control characters (got %s)" % shown(reason))
    dry_run = _bool(False if dry in (None, "") else dry)
    if dry_run is None:
        problems.append("ddtree_day2_dry_run must be true or false (got %s)" % shown(dry))

    def field(value, ok):
        return plain(value) if ok else shown(value)
    request = {"action": field(action, isinstance(action, str) and action in ACTIONS),
               "host": field(host, isinstance(host, str) and host in gpu_hosts),
               "instance": field(instance, isinstance(instance, str) and (not instance or INSTANCE_RE.match(instance))),
               "reason": plain(reason)[:REASON_MAX] if isinstance(reason, str) else shown(reason),
               "dry_run": bool(dry_run)}
    return request, problems


def read_log(text):
    """The log's entries (dicts) from its text; lines that do not parse as an object are skipped and counted."""
    entries, bad = [], 0
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(e, dict):
            entries.append(e)
        else:
            bad += 1
    return entries, bad


def fold(entries):
    """Each host's day-two state from the log: {host: {'drain': {since, reason} or None, 'fallback': {instance or
    '*': {since, reason}}}}. Only actions that were done count; clear resets the host."""
    state = {}
    for e in entries:
        if e.get("outcome") != "done" or not isinstance(e.get("host"), str):
            continue
        hosts = [e["host"]] + [m for m in e.get("members") or [] if isinstance(m, str) and m != e["host"]]
        for h in hosts:
            s = state.setdefault(h, {"drain": None, "fallback": {}})
            mark = {"since": e.get("time"), "reason": e.get("reason") or ""}
            if e.get("action") == "clear":
                s["drain"], s["fallback"] = None, {}
            elif e.get("action") == "drain" and h == e["host"]:
                s["drain"] = s["drain"] or mark
            elif e.get("action") == "fallback":
                key = e.get("instance") or "*"
                s["fallback"].setdefault(key, mark)
    return dict((h, s) for h, s in state.items() if s["drain"] or s["fallback"])


def max_out_hosts(setting, fleet_size):
    """ddtree_day2_max_out (a number, or a percentage of the GPU hosts, as ddtree_rollout_batch) as a number of
    hosts (at least 1), else None when it is neither."""
    text = str(setting).strip()
    if re.match(r"^[1-9][0-9]*$", text):
        return int(text)
    m = re.match(r"^([1-9][0-9]?|100)%$", text)
    if m:
        return max(1, int(math.ceil(int(m.group(1)) * fleet_size / 100.0)))
    return None


def guard(entries, request, now, min_interval_s, max_out, fleet_size):
    """None when the guard rails let the request through, else why not (in words). clear always passes: it brings
    hosts back, and an operator sends it."""
    action, host = request["action"], request["host"]
    if action == "clear":
        return None
    for e in reversed(entries):
        # a serving group's action reached every member: each had it
        if host not in [e.get("host")] + list(e.get("members") or []) or e.get("outcome") not in ("done", "failed"):
            continue
        at = parse_time(e.get("time"))
        if at is not None and now - at < float(min_interval_s):
            return ("one action per host per interval: %s had %s (%s) at %s, %d s ago; ddtree_day2_min_interval_s is %s"
                    % (host, e.get("action"), e.get("outcome"), e.get("time"), int(now - at), min_interval_s))
        break
    drained = fold(entries)
    out = sorted(h for h, s in drained.items() if s["drain"])
    if host in out:
        return ("%s is drained since %s (%s): only clear acts on it"
                % (host, drained[host]["drain"]["since"], drained[host]["drain"]["reason"]))
    limit = max_out_hosts(max_out, fleet_size)
    if limit is None:
        return "ddtree_day2_max_out must be a number of hosts or a percentage (got %s)" % shown(max_out)
    if action in TAKES_OUT and len(out) + 1 > limit:
        return ("at most %d host(s) may be out of the gateway at once (ddtree_day2_max_out %s of %d GPU hosts) and %d "
                "already are (drained: %s); clear one first" % (limit, max_out, fleet_size, len(out), ", ".join(out)))
    return None


def log_entry(request, outcome, detail, seconds, time=None, members=None):
    """One line of the action log (a JSON object, no newline inside)."""
    e = {"time": time or now_iso(), "action": request.get("action", ""), "host": request.get("host", ""),
         "instance": request.get("instance", ""), "reason": request.get("reason", ""),
         "dry_run": bool(request.get("dry_run")), "outcome": outcome, "detail": str(detail)[:2000],
         "seconds": round(float(seconds or 0), 1)}
    if members:
        e["members"] = list(members)
    return json.dumps(e, sort_keys=True, ensure_ascii=True)


class BadMarker(ValueError):
    pass


def _mark(value, where):
    if not isinstance(value, dict) or set(value) - {"since", "reason", "action"}:
        raise BadMarker("%s must be an object with since and reason" % where)
    if parse_time(value.get("since")) is None:
        raise BadMarker("%s.since is not a UTC time (got %s)" % (where, shown(value.get("since"))))
    reason = value.get("reason", "")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise BadMarker("%s.reason must be text of at most %d characters" % (where, REASON_MAX))
    return {"since": value["since"], "reason": reason}


def parse_markers(data):
    """The markers of a host from the bytes of its marker file: {'drain': {since, reason} or None, 'fallback':
    {instance: {since, reason}}}; BadMarker naming what is wrong."""
    if len(data) > MARKER_MAX_BYTES:
        raise BadMarker("it has %d bytes, more than %d" % (len(data), MARKER_MAX_BYTES))
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise BadMarker("it is not JSON (%s)" % e)
    if not isinstance(doc, dict) or doc.get("version") != 1 or set(doc) - {"version", "drain", "fallback"}:
        raise BadMarker("it is not a version 1 marker object (keys %s)" % shown(sorted(doc) if isinstance(doc, dict) else doc))
    drain = doc.get("drain")
    fallback = doc.get("fallback") or {}
    if not isinstance(fallback, dict) or len(fallback) > 64:
        raise BadMarker("fallback must be an object of at most 64 instances")
    for name in fallback:
        if not INSTANCE_RE.match(name):
            raise BadMarker("fallback names an instance %s that is not a name" % shown(name))
    return {"drain": _mark(drain, "drain") if drain is not None else None,
            "fallback": dict((n, _mark(v, "fallback.%s" % n)) for n, v in sorted(fallback.items()))}


def apply_marker(markers, kind, instances, since, reason):
    """The markers with a drain or a fallback of these instances added (an existing one keeps its time and reason)."""
    new = {"drain": markers.get("drain"), "fallback": dict(markers.get("fallback") or {})}
    mark = {"since": since, "reason": reason}
    if kind == "drain":
        new["drain"] = new["drain"] or mark
    else:
        for name in instances:
            new["fallback"].setdefault(name, mark)
    return new


def render_markers(markers):
    return json.dumps({"version": 1, "drain": markers.get("drain"), "fallback": markers.get("fallback") or {}},
                      sort_keys=True, indent=2) + "\n"
