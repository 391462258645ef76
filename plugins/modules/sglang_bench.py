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
  - With O(venv) holding an importable C(sglang.bench_serving) (a real serving venv), that benchmark
    runs instead (C(--backend sglang --dataset-name random-ids), the API key in its environment, never
    in argv) and its figures are mapped to the same fields; RV(engine) says which one measured.
  - Reads only (the server's state aside).
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
  venv:
    description: The serving venv; its C(sglang.bench_serving) measures when it imports there.
    type: path
  tokenizer:
    description: The model directory (its tokenizer), for C(sglang.bench_serving).
    type: path
  engine:
    description:
      - C(auto) uses C(sglang.bench_serving) from O(venv) where it imports, else the built-in generator;
        C(sglang) requires the former, C(builtin) the latter.
    type: str
    choices: [auto, sglang, builtin]
    default: auto
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
engine:
  description: What measured, C(sglang.bench_serving) (with the venv) or C(builtin).
  returned: always
  type: str
"""

import json
import os
import random
import tempfile
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


def sglang_bench_serving(module, p):
    """The venv's python when sglang.bench_serving imports there, else None."""
    py = os.path.join(p["venv"] or "/nonexistent", "bin", "python")
    if not os.path.exists(py):
        return None
    rc, _out, _err = module.run_command([py, "-c", "import sglang.bench_serving"])
    return py if rc == 0 else None


def run_level_sglang(module, p, py, c):
    """One concurrency with sglang.bench_serving; its result mapped to run_level's fields."""
    n = max(p["num_prompts"], c)
    fd, out = tempfile.mkstemp(prefix="ddtree-bench-", suffix=".jsonl")
    os.close(fd)
    argv = [py, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", p["url"].rstrip("/"),
            "--dataset-name", "random-ids", "--random-input-len", str(p["input_len"]),
            "--random-output-len", str(p["output_len"]), "--random-range-ratio", "1", "--num-prompts", str(n),
            "--max-concurrency", str(c), "--seed", str(p["seed"]), "--output-file", out, "--disable-tqdm"]
    if p["tokenizer"]:
        argv += ["--tokenizer", p["tokenizer"]]
    env = {"OPENAI_API_KEY": p["api_key"]} if p["api_key"] else {}  # the key in the environment, never argv
    try:
        rc, stdout, stderr = module.run_command(argv, environ_update=env)
        with open(out) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
    finally:
        os.unlink(out)
    if rc != 0 or not lines:
        tail = (stderr or stdout or "").strip().splitlines()[-5:]
        return {"concurrency": c, "requests": 0, "errors": n, "first_error": " | ".join(tail) or "rc %d" % rc,
                "output_tokens": 0, "seconds": 0, "output_tok_per_s": 0, "ttft_ms_mean": None, "ttft_ms_p99": None,
                "decode_tok_per_s_per_request": None}
    r = json.loads(lines[-1])
    tpot = r.get("mean_tpot_ms") or 0
    return {"concurrency": c, "requests": r.get("completed", 0), "errors": n - r.get("completed", 0), "first_error": None,
            "output_tokens": r.get("total_output_tokens", 0), "seconds": round(r.get("duration") or 0, 2),
            "output_tok_per_s": round(r.get("output_throughput") or 0, 1),
            "ttft_ms_mean": round(r["mean_ttft_ms"], 1) if r.get("mean_ttft_ms") is not None else None,
            "ttft_ms_p99": round(r["p99_ttft_ms"], 1) if r.get("p99_ttft_ms") is not None else None,
            "decode_tok_per_s_per_request": round(1000.0 / tpot, 1) if tpot else None}


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
            venv=dict(type="path"),
            tokenizer=dict(type="path"),
            engine=dict(type="str", choices=["auto", "sglang", "builtin"], default="auto"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rnd = random.Random(p["seed"])
    py = sglang_bench_serving(module, p) if p["engine"] != "builtin" else None
    if p["engine"] == "sglang" and py is None:
        module.fail_json(msg="engine=sglang, but sglang.bench_serving does not import with %s/bin/python: use a full "
                             "serving venv, or engine auto/builtin" % p["venv"])
    engine = "sglang.bench_serving" if py else "builtin"
    results = []
    for c in p["concurrency"]:
        level = run_level_sglang(module, p, py, c) if py else run_level(p, c, rnd)
        level["accept_length"] = accept_length(p)
        results.append(level)
        if level["errors"] and not level["requests"]:
            module.fail_json(msg="every request at concurrency %d failed (%s): %s" % (c, engine, level["first_error"]),
                             results=results, engine=engine)
    module.exit_json(changed=False, results=results, engine=engine)


if __name__ == "__main__":
    main()
