#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: router_workers
short_description: The workers of an smg gateway (Shepherd Model Gateway) - list, add, or drain and remove them
version_added: "0.2.0"
description:
  - Talks to the worker REST API of C(smg) 1.13 (C(GET|POST /workers), C(GET|PATCH|DELETE /workers/{id})) on the
    gateway host. Worker ids are UUIDs that change when a worker is removed and added again, or the gateway restarts,
    so every call looks the id up by the worker's URL first.
  - C(add) registers the URLs the gateway lacks (C(POST /workers) is create-only; a URL it already has, still
    registering, answers 409 and is waited for, not posted again) and waits until each is C(ready), so requests reach
    it. A URL left C(draining) by an earlier drain is first removed.
  - C(drain) takes the URLs out of the rotation through the gateway's drain state and waits until their in-flight
    requests are zero, not for a fixed time. Per worker, C(PATCH health.drain_settle_secs) to I(drain_settle)
    (at least the longest request, so the gateway keeps the worker and its count while requests finish), then
    C(DELETE) (the worker becomes C(draining); no policy picks it any more), then C(GET /workers/{id}) is polled while
    it is C(draining) until C(load), the gateway's count of its in-flight requests, is 0. Only then is the removal
    finished (a second C(DELETE) of a draining worker removes it at once) and the worker's engine may stop. A worker
    that is not C(ready) (failed, not ready) carries no traffic and is removed without the wait.
  - C(list) only reads.
options:
  api:
    description: The gateway's HTTP address as this host reaches it, e.g. C(http://127.0.0.1:30080).
    type: str
    required: true
  op:
    description: What to do.
    type: str
    choices: [list, add, drain]
    default: list
  urls:
    description: The worker URLs (C(http://<address>:<port>)) to add or drain.
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds to wait, per call, for added workers to become C(ready), or for drained workers' in-flight requests to
        reach 0. A drain that does not reach 0 in this time fails, and its workers stay C(draining) (out of the rotation).
    type: int
    default: 600
  drain_settle:
    description:
      - Seconds set as the worker's C(health.drain_settle_secs) before a drain - the time the gateway keeps a draining
        worker before it removes it by itself. At least the longest request; the module ends the drain sooner, as soon
        as the in-flight count is 0. 0 takes I(timeout). The gateway's job queue caps it (600 s).
    type: int
    default: 0
  interval:
    description: Seconds between two looks at the gateway while waiting.
    type: float
    default: 0.5
  api_key:
    description:
      - The gateway's own API key (sent as a bearer token in the C(Authorization) header), where it was launched with one. Sent in a header only,
        never logged.
    type: str
notes:
  - The worker API of sglang-router 0.3.x is not the same (no drain state, an idempotent C(POST)); this module is
    for C(smg) 1.13.
attributes:
  check_mode:
    support: full
    description: In check mode the module reads the gateway's workers and reports what C(add) or C(drain) would change.
  diff_mode:
    support: none
    description: No diff.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Drain a host's workers (delegated to the gateway host)
  ddtree.fleet.router_workers:
    api: http://127.0.0.1:30080
    op: drain
    urls: [http://10.0.0.5:30000]
    drain_settle: 600
  register: drained

- name: Add them back once the new release passed its gate
  ddtree.fleet.router_workers:
    api: http://127.0.0.1:30080
    op: add
    urls: [http://10.0.0.5:30000]
"""

RETURN = r"""
workers:
  description: The gateway's workers afterwards (C(GET /workers)), in its order.
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The worker URL.
      type: str
    id:
      description: Its current id.
      type: str
    status:
      description: C(ready), C(not_ready), C(failed) or C(draining).
      type: str
    load:
      description: Its in-flight requests, as the gateway counts them.
      type: int
urls:
  description: The URLs of I(workers).
  returned: always
  type: list
  elements: str
routable:
  description: How many of I(workers) are C(ready), the ones a policy may pick.
  returned: always
  type: int
drained:
  description:
    - C(drain) - per drained worker, its in-flight count over the drain, C([seconds since the DELETE, in-flight]) at
      the DELETE and at every change until 0, and how it ended.
  returned: always
  type: list
  elements: dict
  sample:
    - url: http://10.0.0.5:30000
      status: draining
      in_flight: [[0.0, 2], [3.1, 1], [4.6, 0]]
      seconds: 4.6
      outcome: in-flight 0
added:
  description: C(add) - the URLs it registered.
  returned: always
  type: list
  elements: str
"""

import json
import re
import time
from urllib.error import HTTPError, URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# The gateway's job queue waits at most this long for a removal (smg-1.13 notes, section 2).
SETTLE_CAP = 600


class GatewayError(Exception):
    pass


class Gateway(object):
    """The smg worker API: (status, parsed JSON body or None)."""

    def __init__(self, api, api_key=None, timeout=30):
        self.api = api.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer %s" % api_key
        self.timeout = timeout

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        try:
            r = open_url(self.api + path, data=data, method=method, headers=self.headers, timeout=self.timeout,
                         validate_certs=False, follow_redirects="none")
            status, raw = r.getcode(), r.read()
        except HTTPError as e:
            status, raw = e.code, e.read()
        except (URLError, OSError) as e:
            raise GatewayError("the gateway at %s does not answer %s %s: %s" % (self.api, method, path, e))
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, {"error": raw.decode("utf-8", "replace")[:300]}

    def workers(self):
        status, body = self.call("GET", "/workers")
        if status != 200 or not isinstance(body, dict) or "workers" not in body:
            raise GatewayError("GET %s/workers answered %s %s: is this smg 1.13?" % (self.api, status, body))
        return body["workers"]

    def worker(self, wid):
        """The worker, or None once the gateway no longer has it (404)."""
        status, body = self.call("GET", "/workers/%s" % wid)
        if status == 404:
            return None
        if status != 200:
            raise GatewayError("GET /workers/%s answered %s %s" % (wid, status, body))
        return body

    def expect(self, method, path, body, ok):
        status, out = self.call(method, path, body)
        if status not in ok:
            raise GatewayError("%s %s answered %s %s" % (method, path, status, out))
        return status, out


def by_url(workers):
    return dict((w["url"], w) for w in workers)


def summary(workers):
    return [dict(url=w["url"], id=w.get("id"), status=w.get("status"), load=w.get("load")) for w in workers]


def wait_gone(gw, wid, deadline, interval):
    while gw.worker(wid) is not None:
        if time.time() > deadline:
            return False
        time.sleep(interval)
    return True


def add(gw, urls, timeout, interval):
    """Register the URLs the gateway lacks and wait until every URL is ready. Returns the URLs it posted."""
    deadline = time.time() + timeout
    have = by_url(gw.workers())
    ids, posted = {}, []
    for url in urls:
        w = have.get(url)
        if w is not None and w.get("status") == "draining":
            # left draining by an earlier drain: finish its removal (no settle wait for a draining worker)
            gw.expect("DELETE", "/workers/%s" % w["id"], None, (200, 202, 204, 404))
            if not wait_gone(gw, w["id"], deadline, interval):
                raise GatewayError("%s stays draining in the gateway; it cannot be added again before it is removed" % url)
            w = None
        if w is not None:
            ids[url] = w["id"]
            continue
        status, body = gw.call("POST", "/workers", {"url": url})
        if status in (200, 201, 202):
            ids[url] = (body or {}).get("worker_id")
            posted.append(url)
        elif status == 409:
            # already registered, still pending (GET /workers does not list those yet): wait for it, post nothing
            found = UUID.search((body or {}).get("error", ""))
            if not found:
                raise GatewayError("POST /workers %s answered 409 without the existing id: %s" % (url, body))
            ids[url] = found.group(0)
        else:
            raise GatewayError("POST /workers %s answered %s %s" % (url, status, body))
    waiting = dict(ids)
    last = {}
    while waiting:
        for url, wid in list(waiting.items()):
            w = gw.worker(wid)
            last[url] = w
            if w is not None and w.get("status") == "ready":
                del waiting[url]
        if not waiting:
            break
        if time.time() > deadline:
            raise GatewayError("not ready in the gateway after %ss: %s" % (timeout, "; ".join(
                "%s (%s%s)" % (u, (last.get(u) or {}).get("status", "gone"),
                               ", " + str((last.get(u) or {}).get("job_status", {}).get("message", ""))
                               if (last.get(u) or {}).get("job_status") else "")
                for u in sorted(waiting))))
        time.sleep(interval)
    return posted


def drain(gw, urls, timeout, settle, interval):
    """Drain the URLs the gateway has: out of the rotation, in-flight to 0, then removed. Returns one record per URL."""
    deadline = time.time() + timeout
    have = by_url(gw.workers())
    records, draining = [], {}
    for url in urls:
        w = have.get(url)
        if w is None:
            continue
        rec = dict(url=url, status=w.get("status"), in_flight=[], seconds=0.0, outcome="")
        records.append(rec)
        if w.get("status") == "ready":
            gw.expect("PATCH", "/workers/%s" % w["id"], {"health": {"drain_settle_secs": settle}}, (200, 202, 204))
        gw.expect("DELETE", "/workers/%s" % w["id"], None, (200, 202, 204))
        rec["started"] = time.time()
        rec["in_flight"].append([0.0, int(w.get("load") or 0)])
        if w.get("status") in ("ready", "draining"):
            draining[url] = (w["id"], rec)
        else:
            rec["outcome"] = "removed (%s: no traffic)" % w.get("status")
    pending = dict(draining)
    while pending:
        for url, (wid, rec) in list(pending.items()):
            w = gw.worker(wid)
            at = round(time.time() - rec["started"], 1)
            if w is None:
                # the gateway removed it by itself: its settle time ended before the count reached 0
                del pending[url]
                rec["outcome"] = "removed by the gateway before in-flight reached 0"
                continue
            load = int(w.get("load") or 0)
            if load != rec["in_flight"][-1][1]:
                rec["in_flight"].append([at, load])
            if w.get("status") != "draining" or load == 0:
                rec["seconds"] = at
                rec["outcome"] = "in-flight 0"
                del pending[url]
        if not pending:
            break
        if time.time() > deadline:
            raise GatewayError("in-flight requests did not reach 0 in %ss, the workers stay draining (out of the rotation): %s"
                               % (timeout, "; ".join("%s (%s in flight)" % (u, r["in_flight"][-1][1])
                                                     for u, (_i, r) in sorted(pending.items()))))
        time.sleep(interval)
    bad = [r for r in records if r["outcome"].startswith("removed by the gateway")]
    if bad:
        raise GatewayError("the gateway removed %s while requests were in flight (last count %s): raise drain_settle to at "
                           "least the longest request" % (", ".join(r["url"] for r in bad),
                                                          ", ".join(str(r["in_flight"][-1][1]) for r in bad)))
    # in-flight is 0: finish the removals now (a draining worker is removed without another settle wait)
    for url, (wid, rec) in draining.items():
        gw.expect("DELETE", "/workers/%s" % wid, None, (200, 202, 204, 404))
    for url, (wid, rec) in draining.items():
        if not wait_gone(gw, wid, max(deadline, time.time() + 30), interval):
            raise GatewayError("%s: in-flight reached 0, but the gateway did not remove it" % url)
    for rec in records:
        rec.pop("started", None)
    return records


def main():
    module = AnsibleModule(
        argument_spec=dict(
            api=dict(type="str", required=True),
            op=dict(type="str", default="list", choices=["list", "add", "drain"]),
            urls=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=600),
            drain_settle=dict(type="int", default=0),
            interval=dict(type="float", default=0.5),
            api_key=dict(type="str", no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    gw = Gateway(p["api"], p["api_key"])
    settle = min(p["drain_settle"] or p["timeout"], SETTLE_CAP)
    result = dict(changed=False, added=[], drained=[])
    try:
        before = gw.workers()
        have = by_url(before)
        if p["op"] == "add":
            todo = [u for u in p["urls"] if u not in have or have[u].get("status") == "draining"]
            result["changed"] = bool(todo)
            if module.check_mode:
                result["added"] = todo
            else:
                result["added"] = add(gw, p["urls"], p["timeout"], p["interval"])
                result["changed"] = bool(result["added"]) or result["changed"]
        elif p["op"] == "drain":
            todo = [u for u in p["urls"] if u in have]
            result["changed"] = bool(todo)
            if module.check_mode:
                result["drained"] = [dict(url=u, status=have[u].get("status"), in_flight=[[0.0, have[u].get("load") or 0]],
                                          seconds=0.0, outcome="check mode") for u in todo]
            else:
                result["drained"] = drain(gw, p["urls"], p["timeout"], settle, p["interval"])
        after = before if module.check_mode or not result["changed"] else gw.workers()
    except GatewayError as e:
        module.fail_json(msg=str(e), **result)
    result.update(workers=summary(after), urls=[w["url"] for w in after],
                  routable=len([w for w in after if w.get("status") == "ready"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
