# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree.fleet.job_wait: follow a background job to its end in one task (documentation: plugins/modules/job_wait.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

GIB, MIB = 2 ** 30, 2 ** 20
FIRST_DELAY = 0.5
GROWTH = 1.5


def delays(interval):
    """Seconds to sleep before each check: from FIRST_DELAY up by GROWTH to `interval`, then `interval`."""
    d = min(FIRST_DELAY, interval)
    while True:
        yield d
        d = min(d * GROWTH, interval)


def progress_line(label, p):
    """'label: 1.25 of 4.00 GiB (31%), 12.5 MiB/s, ETA 220 s' from a progress document; 'label: waiting for HOST
    (it has 1.25 of 4.00 GiB)' while the job waits for the host it pulls from (waiting_for, the fan-out's parent)."""
    done, total = int(p.get("bytes") or 0), int(p.get("total") or 0)
    unit, name = (GIB, "GiB") if max(done, total) >= GIB else (MIB, "MiB")
    if p.get("waiting_for"):
        has = ("it has %.2f of %.2f %s" % (done / float(unit), total / float(unit), name)
               if p.get("state") == "progress" else "it has no copy yet")
        return "%s: waiting for %s (%s)" % (label, p["waiting_for"], has)
    pct = int(round(100.0 * done / max(total, 1)))
    return "%s: %.2f of %.2f %s (%d%%), %.1f MiB/s, ETA %d s" % (
        label, done / float(unit), total / float(unit), name, pct, int(p.get("rate_bps") or 0) / float(MIB), int(p.get("eta_s") or 0))


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    ARGS = {
        "jid": {"type": "str", "required": True},
        "progress_file": {"type": "path", "default": ""},
        "label": {"type": "str", "default": "job"},
        "interval": {"type": "float", "default": 10.0},
        "timeout": {"type": "int", "default": 0},
    }

    def _status(self, jid, async_dir, task_vars):
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": "status", "_async_dir": async_dir})

    def _progress(self, path, task_vars):
        """The job's progress document, or None (not written yet, or caught mid-write)."""
        r = self._execute_module(module_name="ansible.legacy.slurp", task_vars=task_vars, module_args={"src": path})
        if r.get("failed") or "content" not in r:
            return None
        try:
            return json.loads(base64.b64decode(r["content"]).decode("utf-8"))
        except ValueError:
            return None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _v, args = self.validate_argument_spec(argument_spec=self.ARGS)
        if args["interval"] <= 0:
            raise AnsibleActionFail("interval must be above 0 seconds (got %s)" % args["interval"])
        host = (task_vars or {}).get("inventory_hostname", "?")
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        start, polls, lines, last_line = time.time(), 0, [], None
        try:
            for delay in delays(args["interval"]):
                status = self._status(args["jid"], async_dir, task_vars)
                polls += 1
                if status.get("finished") or (status.get("failed") and not status.get("started")):
                    break
                now = time.time()
                if args["progress_file"] and (last_line is None or now - last_line >= args["interval"] - 1e-6):
                    doc = self._progress(args["progress_file"], task_vars)
                    if doc is not None:
                        line = progress_line(args["label"], doc)
                        lines.append(line)
                        display.display("%s: %s" % (host, line))
                        last_line = now
                if args["timeout"] and now - start >= args["timeout"]:
                    status = {"failed": True, "finished": False,
                              "msg": "%s: %s did not end within %d s (job %s goes on in the background)"
                                     % (host, args["label"], args["timeout"], args["jid"])}
                    break
                time.sleep(delay)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        # the job's result is this task's; bookkeeping of async_status is not
        for key in ("ansible_job_id", "started", "results_file", "_ansible_parsed"):
            status.pop(key, None)
        result.update(status)
        result["finished"] = bool(status.get("finished"))
        result.update(polls=polls, waited_s=round(time.time() - start, 1), progress_lines=lines)
        return result
