#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: load_probe
short_description: A steady, bounded request load through an SGLang endpoint until told to stop, counting failures
version_added: "0.1.0"
description:
  - Sends small greedy C(/generate) requests to I(url) (the sglang-router, or one server) from I(concurrency)
    threads, back to back, until the file C(stop) appears in I(state_dir) or I(max_seconds) pass, then returns
    how many requests ran, how many failed and why, and their latency.
  - Meant to run in the background (C(async), C(poll 0)) for the whole of a rollout, so the rollout can show
    that no request failed while hosts left and rejoined the router. C(playbooks/rollout.yml) runs it with
    C(ddtree_rollout_probe_concurrency).
  - Writes its running counts to C(status.json) in I(state_dir) every second, so they can be watched while it
    runs and read after a rollout that stopped early. A probe started while an earlier one still runs (a
    rollout that was interrupted) stops the earlier one first.
  - A request fails when it gets no answer within I(request_timeout), an HTTP status other than 200, or an
    answer without generated text.
options:
  url:
    description: Base URL requests are sent to (C(/generate) is appended).
    type: str
    required: true
  concurrency:
    description: Requests in flight at any time (the load is bounded by it).
    type: int
    default: 1
  max_new_tokens:
    description: Tokens generated per request.
    type: int
    default: 8
  prompt:
    description: Prompt text; each request appends its number, so requests differ.
    type: str
    default: "Rolling the fleet, request"
  state_dir:
    description: Directory of the C(stop) signal and the C(status.json) counts.
    type: path
    default: /run/ddtree-fleet-probe
  max_seconds:
    description: The probe ends after this long even without the stop signal.
    type: int
    default: 7200
  request_timeout:
    description: Seconds one request may take.
    type: float
    default: 120
  max_failed:
    description: The module fails when more requests than this failed.
    type: int
    default: 0
notes:
  - Check mode sends nothing.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Probe the router for the whole rollout
  ddtree.fleet.load_probe:
    url: http://127.0.0.1:30080
    concurrency: 2
  async: 7260
  poll: 0
  register: probe

# ... roll the hosts ...

- name: Tell the probe to stop
  ansible.builtin.copy:
    content: ""
    dest: /run/ddtree-fleet-probe/stop
    mode: "0644"

- name: Its count
  ansible.builtin.async_status:
    jid: "{{ probe.ansible_job_id }}"
  register: probe_result
  until: probe_result.finished
  retries: 130
  delay: 1
"""

RETURN = r"""
requests:
  description: Requests sent (answered or not).
  returned: always
  type: int
ok:
  description: Requests answered with generated text.
  returned: always
  type: int
failed_requests:
  description: Requests that failed.
  returned: always
  type: int
failures:
  description: The first 20 failures, each with its time from the start (C(at_s)) and the reason.
  returned: always
  type: list
  elements: dict
seconds:
  description: How long the probe ran.
  returned: always
  type: float
latency_p50_s:
  description: Median latency of the answered requests (null when none was).
  returned: always
  type: float
latency_p99_s:
  description: 99th percentile latency of the answered requests (null when none was).
  returned: always
  type: float
stopped_by:
  description: C(stop) (the signal), C(max_seconds), or C(check_mode).
  returned: always
  type: str
"""

import json
import os
import signal
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

FAILURES_KEPT = 20


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 4)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except (OSError, TypeError):
        return False
    return True


class Probe(object):
    def __init__(self, p):
        self.p = p
        self.lock = threading.Lock()
        self.requests = 0
        self.ok = 0
        self.failed = 0
        self.failures = []
        self.latencies = []
        self.start = time.time()
        self.stopped_by = None
        self.stop_file = os.path.join(p["state_dir"], "stop")
        self.status_file = os.path.join(p["state_dir"], "status.json")

    def one(self, n):
        body = json.dumps({"text": "%s %d" % (self.p["prompt"], n),
                           "sampling_params": {"max_new_tokens": self.p["max_new_tokens"], "temperature": 0}})
        t0 = time.time()
        error = None
        try:
            r = open_url(self.p["url"].rstrip("/") + "/generate", data=body, method="POST",
                         headers={"Content-Type": "application/json"}, timeout=self.p["request_timeout"])
            answer = json.loads(r.read())
            if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
                error = "answer without generated text: %s" % json.dumps(answer)[:200]
        except Exception as e:  # pylint: disable=broad-except
            # HTTPError carries the status and the router's or server's body; anything else is the connection
            detail = getattr(e, "code", None)
            error = ("HTTP %s: %s" % (detail, e.read()[:200].decode("utf-8", "replace")) if detail else
                     "%s: %s" % (type(e).__name__, e))
        with self.lock:
            self.requests += 1
            if error is None:
                self.ok += 1
                self.latencies.append(time.time() - t0)
            else:
                self.failed += 1
                if len(self.failures) < FAILURES_KEPT:
                    self.failures.append({"at_s": round(t0 - self.start, 1), "error": error})

    def should_stop(self):
        if self.stopped_by:
            return True
        if os.path.exists(self.stop_file):
            self.stopped_by = "stop"
        elif time.time() - self.start >= self.p["max_seconds"]:
            self.stopped_by = "max_seconds"
        return bool(self.stopped_by)

    def worker(self, counter):
        while not self.should_stop():
            with self.lock:
                counter[0] += 1
                n = counter[0]
            self.one(n)

    def result(self, running):
        with self.lock:
            return {"running": running, "pid": os.getpid(), "url": self.p["url"], "concurrency": self.p["concurrency"],
                    "requests": self.requests, "ok": self.ok, "failed_requests": self.failed,
                    "failures": list(self.failures), "seconds": round(time.time() - self.start, 1),
                    "latency_p50_s": percentile(self.latencies, 0.5), "latency_p99_s": percentile(self.latencies, 0.99),
                    "stopped_by": self.stopped_by}

    def write_status(self, running):
        tmp = self.status_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.result(running), f)
        os.rename(tmp, self.status_file)

    def run(self):
        counter = [0]
        threads = [threading.Thread(target=self.worker, args=(counter,)) for dummy in range(self.p["concurrency"])]
        for t in threads:
            t.daemon = True
            t.start()
        while any(t.is_alive() for t in threads):
            self.write_status(True)
            for t in threads:
                t.join(1.0 / len(threads))
        self.write_status(False)


def stop_earlier(state_dir, wait):
    """Stop a probe an interrupted rollout left running (its status says running and its pid lives)."""
    try:
        with open(os.path.join(state_dir, "status.json")) as f:
            pid = json.load(f).get("pid")
    except (IOError, OSError, ValueError):
        return None
    if not pid or pid == os.getpid() or not pid_alive(pid):
        return None
    open(os.path.join(state_dir, "stop"), "w").close()
    deadline = time.time() + wait
    while time.time() < deadline and pid_alive(pid):
        time.sleep(0.5)
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
    return pid


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            concurrency=dict(type="int", default=1),
            max_new_tokens=dict(type="int", default=8, no_log=False),
            prompt=dict(type="str", default="Rolling the fleet, request"),
            state_dir=dict(type="path", default="/run/ddtree-fleet-probe"),
            max_seconds=dict(type="int", default=7200),
            request_timeout=dict(type="float", default=120),
            max_failed=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["concurrency"] < 1 or p["max_new_tokens"] < 1 or p["max_seconds"] < 1:
        module.fail_json(msg="concurrency, max_new_tokens and max_seconds must be at least 1 (got %d, %d, %d)"
                         % (p["concurrency"], p["max_new_tokens"], p["max_seconds"]))
    if module.check_mode:
        module.exit_json(changed=False, requests=0, ok=0, failed_requests=0, failures=[], seconds=0.0,
                         latency_p50_s=None, latency_p99_s=None, stopped_by="check_mode")
    if not os.path.isdir(p["state_dir"]):
        os.makedirs(p["state_dir"], 0o755)
    earlier = stop_earlier(p["state_dir"], p["request_timeout"] + 5)
    stop_file = os.path.join(p["state_dir"], "stop")
    if os.path.exists(stop_file):
        os.remove(stop_file)
    probe = Probe(p)
    probe.run()
    out = probe.result(False)
    out.pop("running")
    out["stopped_earlier_probe"] = earlier
    if out["failed_requests"] > p["max_failed"]:
        first = out["failures"][0] if out["failures"] else {}
        msg = ("%d of %d requests through %s failed while the probe ran (%.0f s; at most %d may fail); the first at %s s: %s"
               % (out["failed_requests"], out["requests"], p["url"], out["seconds"], p["max_failed"], first.get("at_s"),
                  first.get("error")))
        module.fail_json(msg=msg, **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
