# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's view of the day-two action log (day2_state; documented in day2_state.yml beside this file)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils import day2


def day2_state(text, last=10):
    """{'hosts': {host: [line, ...]} (what the report says: 'fallback since <time>: <reason>' per instance,
    'drained since <time>: <reason>'), 'last': the last actions (newest first), 'unparsed': lines skipped}."""
    entries, bad = day2.read_log(text or "")
    hosts = {}
    for host, s in sorted(day2.fold(entries).items()):
        lines = []
        if s["drain"]:
            lines.append("drained since %s: %s" % (s["drain"]["since"], s["drain"]["reason"]))
        for inst, mark in sorted(s["fallback"].items()):
            lines.append("fallback%s since %s: %s" % ("" if inst == "*" else " (%s)" % inst, mark["since"], mark["reason"]))
        hosts[host] = lines
    keys = ("time", "action", "host", "instance", "reason", "dry_run", "outcome", "detail", "seconds")
    recent = [dict((k, e.get(k)) for k in keys) for e in entries[-int(last):]][::-1] if int(last) > 0 else []
    return {"hosts": hosts, "last": recent, "unparsed": bad}


class FilterModule:
    def filters(self):
        return {"day2_state": day2_state}
