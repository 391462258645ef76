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
  - With I(prompts) it then sends each prompt to C(/generate) greedily (temperature 0), alone; then I(batch)
    requests at once (the prompts in turn), then one long output (I(long_output_len) tokens), and returns the
    output token ids of every request (RV(requests) names them); with I(reference) it compares them (correctness),
    with I(accept_length_floor) it
    checks the accept length SGLang reports per request (C(meta_info.spec_accept_length), the field
    DFLASH, EAGLE and STANDALONE all fill). The rules are in C(plugins/module_utils/sglang_gate.py).
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
  prompts:
    description: Fixed prompts sent greedily to C(/generate) after the server is up; empty sends none.
    type: list
    elements: str
    default: []
  output_len:
    description: Tokens generated per prompt (C(max_new_tokens), with C(ignore_eos)).
    type: int
    default: 32
  batch:
    description:
      - After the prompts one at a time, this many gate requests sent at once (the prompts in turn), so that
        the answers come from batched decoding - a speculative-decoding bug can corrupt tokens only there
        (TensorRT-LLM issue 17110). 8 or more crosses the first CUDA-graph batch buckets. 0 sends none.
    type: int
    default: 0
  long_output_len:
    description: Then one request of the first prompt generating this many tokens (0 sends none).
    type: int
    default: 0
  reference:
    description:
      - "The autoregressive outputs to compare with, C({outputs: [[token ids] per gate request], host: NAME,
        release: ID}), made with the same prompts, O(output_len), O(batch) and O(long_output_len). Omitted or
        empty, nothing is compared."
    type: dict
  min_prefix:
    description: Tokens each output must share with the reference before it may depart from it.
    type: int
    default: 16
  accept_length_floor:
    description: The mean accept length the gate requests must reach; omitted, acceptance is not checked.
    type: float
  member:
    description:
      - The server is a member of rank 1 or above of a multi-node serving group. SGLang serves only C(/health) there
        (a stand-alone health server, up once the node's schedulers joined rank 0 and loaded their shard), so the gate
        polls C(/health) and stops there; rank 0 answers for the group.
    type: bool
    default: false
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
since_start:
  description:
    - Seconds from the last start of O(unit)'s main process (systemd's C(ExecMainStartTimestampMonotonic)) to the gate's
      answer, both on this host's monotonic clock; null without O(unit) or when systemd does not say.
  returned: when the gate passed
  type: float
server_info:
  description: The compared keys as the server reports them.
  returned: when the server answered
  type: dict
version:
  description: The SGLang version the server reports in C(/server_info) (the fleet report shows it per instance).
  returned: when the server answered
  type: str
device:
  description: The device the server reports in C(/server_info) (C(cuda), C(cpu), ...); null when it reports none.
  returned: when the server answered
  type: str
drift:
  description: "Keys whose value differs: key: {expected, actual}."
  returned: always
  type: dict
outputs:
  description:
    - Greedy output token ids, one list per gate request in the order of RV(requests) (the reference of an
      autoregressive server).
  returned: when prompts were given
  type: list
  elements: list
requests:
  description: What each of RV(outputs) was - C(prompt N) alone, C(batch request J of B (prompt N)), C(long output ...).
  returned: when prompts were given
  type: list
  elements: str
accept_length:
  description: Mean C(meta_info.spec_accept_length) over the gate requests; null when the server reported none.
  returned: when prompts were given
  type: float
gate_problems:
  description: Why the correctness or acceptance check failed; empty when both pass or were not asked.
  returned: always
  type: list
  elements: str
"""

import json
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_gate


def get(url, api_key=None, timeout=10):
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        r = open_url(url, headers=headers, timeout=timeout, validate_certs=False)
        return r.getcode(), r.read()
    except Exception as e:  # pylint: disable=broad-except
        return getattr(e, "code", None), str(getattr(e, "reason", e)).encode()


def generate(base, prompt, max_new_tokens, api_key=None, timeout=600):
    """One greedy /generate: (output token ids, spec_accept_length or None, error or None)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    body = json.dumps({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}})
    try:
        r = open_url(base + "/generate", data=body, headers=headers, method="POST", timeout=timeout, validate_certs=False)
        out = json.loads(r.read())
    except Exception as e:  # pylint: disable=broad-except
        return None, None, "POST /generate failed: %s" % getattr(e, "reason", e)
    meta = out.get("meta_info") or {}
    ids = out.get("output_ids")
    if ids is None:
        return None, None, "/generate answered without output_ids"
    return list(ids), meta.get("spec_accept_length"), None


def send_at_once(base, wave, api_key):
    """The requests of one wave [(label, prompt, max_new_tokens)] sent together, each from its own thread released
    by one barrier (so that the server batches them); their generate() answers in the wave's order."""
    if len(wave) == 1:
        return [generate(base, wave[0][1], wave[0][2], api_key)]
    answers = [None] * len(wave)
    barrier = threading.Barrier(len(wave))

    def one(i, prompt, n):
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        answers[i] = generate(base, prompt, n, api_key)

    threads = [threading.Thread(target=one, args=(i, prompt, n)) for i, (_label, prompt, n) in enumerate(wave)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [a or (None, None, "no answer") for a in answers]


def unit_state(module, unit):
    rc, out, _err = module.run_command(["systemctl", "show", unit, "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts"])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}


def since_start(module, unit):
    """Seconds from the unit's main process start to now, on the host's monotonic clock (systemd's too)."""
    if not unit:
        return None
    rc, out, _err = module.run_command(["systemctl", "show", unit, "-p", "ExecMainStartTimestampMonotonic"])
    try:
        started = int(out.strip().partition("=")[2]) if rc == 0 else 0
    except ValueError:
        started = 0
    return round(time.monotonic() - started / 1e6, 1) if started > 0 else None


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
            prompts=dict(type="list", elements="str", default=[]),
            output_len=dict(type="int", default=32),
            reference=dict(type="dict"),
            min_prefix=dict(type="int", default=16),
            accept_length_floor=dict(type="float"),
            batch=dict(type="int", default=0),
            long_output_len=dict(type="int", default=0),
            member=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    start = time.time()
    result = dict(changed=False, healthy=False, seconds=0.0, drift={}, gate_problems=[])
    restarts0 = unit_state(module, p["unit"]).get("NRestarts") if p["unit"] else None
    last = None
    probe = "/health" if p["member"] else "/health_generate"
    while True:
        # a hung server holds the poll: never past the gate's own timeout
        code, body = get(base + probe, timeout=max(1, min(30, p["timeout"] - (time.time() - start))))
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
            module.fail_json(msg="%s%s did not answer 200 within %ds (last: %s)" % (base, probe, p["timeout"], last), **result)
        time.sleep(p["interval"])
    result["seconds"] = round(time.time() - start, 1)
    if p["member"]:
        result["healthy"], result["since_start"] = True, since_start(module, p["unit"])
        module.exit_json(**result)
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
    result["version"], result["device"] = info.get("version"), info.get("device")
    result["drift"] = dict((k, {"expected": v, "actual": info.get(k)}) for k, v in p["expect"].items() if not same(v, info.get(k)))
    if result["drift"]:
        module.fail_json(msg="the server runs with other settings than it was given: %s" % "; ".join(
            "%s is %s, expected %s" % (k, d["actual"], d["expected"]) for k, d in sorted(result["drift"].items())), **result)
    if p["prompts"]:
        labels, outputs, lengths = [], [], []
        for wave in sglang_gate.waves(p["prompts"], p["output_len"], p["batch"], p["long_output_len"]):
            for (label, _prompt, _n), (ids, length, error) in zip(wave, send_at_once(base, wave, p["api_key"])):
                if error:
                    module.fail_json(msg="%s: the gate request failed (%s): %s" % (base, label, error), **result)
                labels.append(label)
                outputs.append(ids)
                lengths.append(length)
        result["requests"], result["outputs"], result["accept_length"] = labels, outputs, sglang_gate.mean(lengths)
        if p["reference"]:
            result["gate_problems"] += ["correctness against %s (release %s): %s" % (
                p["reference"].get("host"), p["reference"].get("release"), problem)
                for problem in sglang_gate.correctness_problems(outputs, p["reference"], p["min_prefix"], labels)]
        result["gate_problems"] += ["acceptance: " + problem
                                    for problem in sglang_gate.acceptance_problems(lengths, p["accept_length_floor"])]
        if result["gate_problems"]:
            module.fail_json(msg="%s is up but not admitted: %s" % (base, "; ".join(result["gate_problems"])), **result)
    result["healthy"], result["since_start"] = True, since_start(module, p["unit"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
