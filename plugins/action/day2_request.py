# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree.fleet.day2_request: a day-two request checked as data, and the guard rails over the action log
(documentation: plugins/modules/day2_request.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.ddtree.fleet.plugins.module_utils import day2

# The request's variables: read as given (never templated: an alert's label may hold Jinja), by these names.
REQUEST_VARS = {"action": "ddtree_day2_action", "host": "ddtree_day2_host", "instance": "ddtree_day2_instance",
                "reason": "ddtree_day2_reason", "dry_run": "ddtree_day2_dry_run"}
LOG_MAX_BYTES = 32 * 1024 * 1024


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("log", "gpu_hosts", "min_interval_s", "max_out", "defaults"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        unknown = set(args) - self._VALID_ARGS
        if unknown:
            raise AnsibleActionFail("unknown options: %s" % ", ".join(sorted(unknown)))
        task_vars = task_vars or {}
        defaults = args.get("defaults") or {}
        # the raw values: task_vars holds them untemplated; a value that is a template stays text (data)
        raw = dict((k, task_vars[v] if v in task_vars else defaults.get(k)) for k, v in REQUEST_VARS.items())
        gpu_hosts = [day2.plain(h) for h in args.get("gpu_hosts") or []]
        request, problems = day2.check_request(raw, gpu_hosts)
        entries, bad = [], 0
        path = args.get("log")
        if path and os.path.isfile(path):
            with open(path, "rb") as f:
                data = f.read(LOG_MAX_BYTES + 1)
            if len(data) > LOG_MAX_BYTES:
                data = data[-LOG_MAX_BYTES:]  # the newest actions are the ones the guard rails need
            entries, bad = day2.read_log(data.decode("utf-8", "replace"))
        refusal = None
        if not problems:
            refusal = day2.guard(entries, request, time.time(), args.get("min_interval_s", 600),
                                 args.get("max_out", 1), len(gpu_hosts))
        result.update(changed=False, request=request, problems=problems, started=time.time(),
                      outcome="refused" if problems or refusal else ("would" if request["dry_run"] else "proceed"),
                      detail="; ".join(problems) if problems else (refusal or ""),
                      state=day2.fold(entries), log_unparsed=bad)
        return result
