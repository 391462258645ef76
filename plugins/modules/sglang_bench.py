#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Load an SGLang server at given concurrencies and measure output tok/s, TTFT and accept length
version_added: "0.1.0"
description:
  - Sends O(num_prompts) requests at each concurrency to SGLang's native C(/generate) API with
    random input ids (like C(sglang.bench_serving --dataset-name random), without needing a tokenizer
    or the benchmark's dependencies on the host), streaming, with C(ignore_eos) so every request
    decodes O(output_len) tokens.
  - Measures output tokens per second over the wall time, time to first token, per-request decode
    speed, and reads the speculative accept length from C(/server_info) (C(/get_server_info)).
  - Reads only (the server's state aside); for the full benchmark use C(python -m sglang.bench_serving).
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: API key, if the server has one; never logged.
    type: str
  concurrency:
    description: Concurrencies to measure, one after the other.
    type: list
    elements: int
    default: [1]
  num_prompts:
    description: Requests per concurrency (at least the concurrency).
    type: int
    default: 16
  input_len:
    description: Input tokens per request.
    type: int
    default: 256
  output_len:
    description: Output tokens per request.
    type: int
    default: 256
  timeout:
    description: Seconds one request may take.
    type: int
    default: 600
  seed:
    description: Seed of the random input ids.
    type: int
    default: 0
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Bench at concurrency 1 and 128
  ddtree.fleet.sglang_bench:
    url: http://127.0.0.1:30000
    concurrency: [1, 128]
    num_prompts: 256
"""

RETURN = r"""
results:
  description: One entry per concurrency.
  returned: always
  type: list
  elements: dict
  sample:
    - {concurrency: 1, requests: 16, output_tokens: 4096, seconds: 13.5, output_tok_per_s: 303.4,
       ttft_ms_mean: 41.0, ttft_ms_p99: 60.2, decode_tok_per_s_per_request: 310.1, accept_length: 3.4}
"""

import json
import random
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url


def one_request(base, headers, ids, output_len, timeout):
    body = json.dumps({"input_ids": ids, "stream": True,
                       "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0}})
    t0 = time.time()
    ttft, tokens = None, 0
    r = open_url(base + "/generate", data=body, method="POST", headers=dict(headers, **{"Content-Type": "application/json"}),
                 timeout=timeout)
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        meta = json.loads(data).get("meta_info") or {}
        tokens = int(meta.get("completion_tokens", tokens))
        if ttft is None and tokens > 0:
            ttft = time.time() - t0
    return ttft or (time.time() - t0), tokens, time.time() - t0


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else None


def run_level(p, c, rnd):
    headers = {"Authorization": "Bearer %s" % p["api_key"]} if p["api_key"] else {}
    n = max(p["num_prompts"], c)
    prompts = [[rnd.randint(1000, 30000) for _i in range(p["input_len"])] for _j in range(n)]
    out, errors, lock = [], [], threading.Lock()
    queue = list(range(n))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop()
            try:
                res = one_request(p["url"].rstrip("/"), headers, prompts[i], p["output_len"], p["timeout"])
                with lock:
                    out.append(res)
            except Exception as e:  # pylint: disable=broad-except
                with lock:
                    errors.append(str(e))

    start = time.time()
    threads = [threading.Thread(target=worker) for _k in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    tokens = sum(r[1] for r in out)
    ttfts = [r[0] * 1000 for r in out]
    decode = [(r[1] - 1) / (r[2] - r[0]) for r in out if r[1] > 1 and r[2] > r[0]]
    return {"concurrency": c, "requests": len(out), "errors": len(errors), "first_error": errors[0] if errors else None,
            "output_tokens": tokens, "seconds": round(wall, 2), "output_tok_per_s": round(tokens / wall, 1) if wall else 0,
            "ttft_ms_mean": round(sum(ttfts) / len(ttfts), 1) if ttfts else None,
            "ttft_ms_p99": round(percentile(ttfts, 0.99), 1) if ttfts else None,
            "decode_tok_per_s_per_request": round(sum(decode) / len(decode), 1) if decode else None}


def accept_length(p):
    headers = {"Authorization": "Bearer %s" % p["api_key"]} if p["api_key"] else {}
    for path in ("/server_info", "/get_server_info"):
        try:
            info = json.loads(open_url(p["url"].rstrip("/") + path, headers=headers, timeout=30).read())
            states = info.get("internal_states") or [{}]
            return states[0].get("avg_spec_accept_length")
        except Exception:  # pylint: disable=broad-except
            continue
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            concurrency=dict(type="list", elements="int", default=[1]),
            num_prompts=dict(type="int", default=16),
            input_len=dict(type="int", default=256),
            output_len=dict(type="int", default=256),
            timeout=dict(type="int", default=600),
            seed=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rnd = random.Random(p["seed"])
    results = []
    for c in p["concurrency"]:
        level = run_level(p, c, rnd)
        level["accept_length"] = accept_length(p)
        results.append(level)
        if level["errors"] and not level["requests"]:
            module.fail_json(msg="every request at concurrency %d failed: %s" % (c, level["first_error"]), results=results)
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
