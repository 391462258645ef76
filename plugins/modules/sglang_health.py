#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_health
short_description: Health gate of an SGLang server - generates, lists its model, runs the flags it was given
version_added: "0.1.0"
description:
  - Polls C(/health_generate) until it answers 200 (SGLang runs a one-token generation for it), then
    checks that C(/v1/models) lists the model, then reads C(/server_info) (or C(/get_server_info) on
    older servers) and compares it with the values the server was started with (drift).
  - While waiting it watches the systemd unit, so a crashed or crash-looping server fails the gate at
    once instead of at the timeout. Reads only.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  model:
    description: Name C(/v1/models) must list.
    type: str
    required: true
  expect:
    description: server_info keys and the values they must have.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the server (a 590 GB model takes many minutes to load).
    type: int
    default: 3600
  interval:
    description: Seconds between polls.
    type: float
    default: 5
  unit:
    description: systemd unit of the server; empty to not watch one.
    type: str
    default: ""
  api_key:
    description: API key for C(/v1/models) and C(/server_info) (the health endpoints need none); never logged.
    type: str
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Gate
  ddtree.fleet.sglang_health:
    url: http://127.0.0.1:30000
    model: kimi-k2.6
    unit: ddtree-sglang@main.service
    expect: {tp_size: 8, speculative_algorithm: DFLASH}
"""

RETURN = r"""
healthy:
  description: Whether every check passed.
  returned: always
  type: bool
seconds:
  description: Seconds until the server answered /health_generate.
  returned: always
  type: float
server_info:
  description: The compared keys as the server reports them.
  returned: when the server answered
  type: dict
drift:
  description: "Keys whose value differs: key: {expected, actual}."
  returned: always
  type: dict
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url


def get(url, api_key=None, timeout=10):
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        r = open_url(url, headers=headers, timeout=timeout, validate_certs=False)
        return r.getcode(), r.read()
    except Exception as e:  # pylint: disable=broad-except
        return getattr(e, "code", None), str(getattr(e, "reason", e)).encode()


def unit_state(module, unit):
    rc, out, _err = module.run_command(["systemctl", "show", unit, "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts"])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}


def same(expected, actual):
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        try:
            return float(actual) == float(expected)
        except (TypeError, ValueError):
            return False
    return str(actual).lower() == str(expected).lower()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            model=dict(type="str", required=True),
            expect=dict(type="dict", default={}),
            timeout=dict(type="int", default=3600),
            interval=dict(type="float", default=5),
            unit=dict(type="str", default=""),
            api_key=dict(type="str", no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    start = time.time()
    result = dict(changed=False, healthy=False, seconds=0.0, drift={})
    restarts0 = unit_state(module, p["unit"]).get("NRestarts") if p["unit"] else None
    last = None
    while True:
        code, body = get(base + "/health_generate", timeout=30)
        if code == 200:
            break
        last = "%s %s" % (code, body[:200].decode("utf-8", "replace"))
        if p["unit"]:
            st = unit_state(module, p["unit"])
            if st.get("ActiveState") == "failed" or st.get("SubState") == "auto-restart" or st.get("NRestarts") != restarts0:
                module.fail_json(msg="%s stopped while starting (ActiveState=%s, SubState=%s, restarts %s): the server "
                                     "crashed; see its journal" % (p["unit"], st.get("ActiveState"), st.get("SubState"),
                                                                   st.get("NRestarts")), **result)
        if time.time() - start > p["timeout"]:
            module.fail_json(msg="%s/health_generate did not answer 200 within %ds (last: %s)" % (base, p["timeout"], last), **result)
        time.sleep(p["interval"])
    result["seconds"] = round(time.time() - start, 1)
    code, body = get(base + "/v1/models", p["api_key"])
    try:
        models = [m.get("id") for m in json.loads(body).get("data", [])] if code == 200 else []
    except ValueError:
        models = []
    if p["model"] not in models:
        module.fail_json(msg="%s/v1/models lists %s, not %s (HTTP %s)" % (base, models or "nothing", p["model"], code), **result)
    info = None
    for path in ("/server_info", "/get_server_info"):
        code, body = get(base + path, p["api_key"])
        if code == 200:
            info = json.loads(body)
            break
    if info is None:
        module.fail_json(msg="%s answers neither /server_info nor /get_server_info" % base, **result)
    result["server_info"] = dict((k, info.get(k)) for k in p["expect"])
    result["drift"] = dict((k, {"expected": v, "actual": info.get(k)}) for k, v in p["expect"].items() if not same(v, info.get(k)))
    if result["drift"]:
        module.fail_json(msg="the server runs with other settings than it was given: %s" % "; ".join(
            "%s is %s, expected %s" % (k, d["actual"], d["expected"]) for k, d in sorted(result["drift"].items())), **result)
    result["healthy"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
