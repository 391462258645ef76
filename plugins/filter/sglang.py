# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the SGLang server command line from a serving profile (one place, tested per family)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: sglang_argv
short_description: The sglang.launch_server arguments for a serving profile
version_added: "0.1.0"
description:
  - Turns a merged serving profile (see C(docs/profiles.md)) and the instance's paths and ports into
    the argument list after C(python -m sglang.launch_server), using SGLang 0.5.23 flag names
    (C(--cuda-graph-max-bs-decode), C(--attn-dp-size), never the removed ones).
  - C(DDTREE) switches the attention backend and page size to the profile's C(ddtree_*) values,
    adds C(--speculative-ddtree-budget) and C(--disable-overlap-schedule) (DDTree has no overlap path).
  - The API key is never part of it; the service passes it in a credential file.
  - This file also holds C(sglang_algorithm), C(sglang_instances), C(sglang_status), C(sglang_references)
    and C(sglang_argv_problems); each is documented in its own file beside this one
    (C(ansible-doc -t filter ddtree.fleet.NAME)).
positional: model_path
options:
  _input:
    description: The merged serving profile.
    type: dict
    required: true
  model_path:
    description: Target model directory.
    type: str
    required: true
  drafter_path:
    description: Drafter directory (needed when the algorithm is not C(none)).
    type: str
  algorithm:
    description: Override of the profile's C(speculative.algorithm) (C(DFLASH), C(DDTREE), C(none), ...).
    type: str
  host:
    description: Address to bind.
    type: str
    default: 0.0.0.0
  port:
    description: Port.
    type: int
    default: 30000
  served_model_name:
    description: Name the server lists in /v1/models.
    type: str
  reasoning_parser:
    description: C(--reasoning-parser) value; empty leaves it out.
    type: str
  tool_call_parser:
    description: C(--tool-call-parser) value; empty leaves it out.
    type: str
  skip_all_warmup:
    description: Add C(--skip-server-warmup) (used when the vision warmup must be skipped and the patch is absent).
    type: bool
    default: false
  extra_args:
    description: Arguments appended as they are.
    type: list
    elements: str
  group:
    description:
      - The host's multi-node serving group (C(nodes), C(rank), C(init_addr); see M(ddtree.fleet.serving_groups)) adds
        C(--nnodes), C(--node-rank) and C(--dist-init-addr). Empty for a host that serves alone.
    type: dict
"""

EXAMPLES = r"""
- name: Render the command line
  ansible.builtin.set_fact:
    argv: "{{ nvidia_facts_profile | ddtree.fleet.sglang_argv('/opt/ddtree/models/kimi', drafter_path='/opt/ddtree/models/dflash') }}"
"""

RETURN = r"""
_value:
  description: The arguments, each a string.
  type: list
  elements: str
"""

import base64
import json

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.module_utils.instances import merge, plan
from ansible_collections.ddtree.fleet.plugins.module_utils.sglang_flags import check_argv
from ansible_collections.ddtree.fleet.plugins.module_utils.sglang_gate import first_divergence


def _algorithm(profile, algorithm):
    algo = algorithm if algorithm not in (None, "") else (profile.get("speculative") or {}).get("algorithm")
    return "none" if algo in (None, "", "none", "NONE") else str(algo).upper()


def sglang_argv(profile, model_path, drafter_path=None, algorithm=None, host="0.0.0.0", port=30000,
                served_model_name=None, reasoning_parser=None, tool_call_parser=None, skip_all_warmup=False,
                extra_args=None, group=None):
    spec = profile.get("speculative") or {}
    par = profile.get("parallelism") or {}
    graph = profile.get("cuda_graph") or {}
    algo = _algorithm(profile, algorithm)
    if algo != "none" and not drafter_path:
        raise AnsibleFilterError("speculative algorithm %s needs a drafter path" % algo)
    attention, page = profile.get("attention_backend"), profile.get("page_size")
    if algo == "DDTREE":
        attention = spec.get("ddtree_attention_backend") or attention
        page = spec.get("ddtree_page_size") or page
    a = ["--model-path", model_path, "--trust-remote-code"]
    if served_model_name:
        a += ["--served-model-name", served_model_name]
    a += ["--tp-size", str(par.get("tp", 1))]
    for key, flag in (("ep", "--ep-size"), ("dp", "--dp-size"), ("attn_dp", "--attn-dp-size")):
        if int(par.get(key) or 1) > 1:
            a += [flag, str(par[key])]
    if attention:
        a += ["--attention-backend", str(attention)]
    if page:
        a += ["--page-size", str(page)]
    for key, flag in (("moe_a2a_backend", "--moe-a2a-backend"), ("moe_runner_backend", "--moe-runner-backend")):
        if profile.get(key):
            a += [flag, str(profile[key])]
    if graph.get("decode_backend"):
        a += ["--cuda-graph-backend-decode", str(graph["decode_backend"])]
    if graph.get("disable_prefill"):
        a += ["--disable-prefill-cuda-graph"]
    elif graph.get("prefill_backend"):
        a += ["--cuda-graph-backend-prefill", str(graph["prefill_backend"])]
    if graph.get("max_bs_decode"):
        a += ["--cuda-graph-max-bs-decode", str(graph["max_bs_decode"])]
    if algo != "none":
        a += ["--speculative-algorithm", algo, "--speculative-draft-model-path", drafter_path]
        if spec.get("num_draft_tokens"):
            a += ["--speculative-num-draft-tokens", str(spec["num_draft_tokens"])]
        if spec.get("draft_attention_backend"):
            a += ["--speculative-draft-attention-backend", str(spec["draft_attention_backend"])]
        if algo == "DDTREE":
            a += ["--speculative-ddtree-budget", str(spec.get("ddtree_budget") or 8), "--disable-overlap-schedule"]
        if int(par.get("attn_dp") or 1) > 1:
            a += ["--enable-dp-lm-head"]  # DFLASH with attention DP requires it [wheel]
    if profile.get("max_running_requests"):
        a += ["--max-running-requests", str(profile["max_running_requests"])]
    if profile.get("mem_fraction_static") not in (None, ""):
        a += ["--mem-fraction-static", str(profile["mem_fraction_static"])]
    if group:
        # a multi-node serving group: the same command line on every member but its rank (docs/groups.md)
        a += ["--nnodes", str(group["nodes"]), "--node-rank", str(group["rank"]), "--dist-init-addr", str(group["init_addr"])]
    a += ["--host", str(host), "--port", str(port), "--enable-metrics"]
    if reasoning_parser:
        a += ["--reasoning-parser", reasoning_parser]
    if tool_call_parser:
        a += ["--tool-call-parser", tool_call_parser]
    if skip_all_warmup:
        a += ["--skip-server-warmup"]
    return a + [str(x) for x in (extra_args or [])]


def sglang_server_expect(argv):
    """The server_info keys (and values) a server started with argv must report: each
    `--flag value` as flag_name: value, numbers as numbers (what the health gate compares)."""
    wanted = ("tp_size", "ep_size", "dp_size", "attn_dp_size", "attention_backend", "page_size",
              "speculative_algorithm", "speculative_num_draft_tokens", "max_running_requests",
              "cuda_graph_max_bs_decode", "served_model_name", "model_path", "port", "nnodes", "node_rank")
    out, i = {}, 0
    while i < len(argv):
        key = argv[i][2:].replace("-", "_") if argv[i].startswith("--") else None
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        if key in wanted and value is not None:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
        i += 2 if value is not None else 1
    return out


def sglang_argv_autoregressive(argv):
    """The same command line without speculative decoding: every --speculative-* flag and its value
    dropped (the correctness gate's fresh reference runs the release being deployed this way)."""
    argv = [str(a) for a in argv]
    out, i = [], 0
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if argv[i].startswith("--speculative-"):
            i += 2 if has_value else 1
        else:
            out.append(argv[i])
            i += 1
    return out


def sglang_algorithm(instance_profile, profile, algorithm=""):
    """The speculative algorithm an instance runs (upper case, or none)."""
    return _algorithm(merge(profile, instance_profile or {}), algorithm)


def _cpu_set(text):
    """'0-3,8' -> {0, 1, 2, 3, 8} (nvidia-smi's affinity notation)."""
    out = set()
    for part in text.replace(" ", ",").split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        elif part.strip().isdigit():
            out.add(int(part))
    return out


def _ranges(cpus):
    """{0, 1, 2, 3, 8} -> '0-3 8' (systemd's CPUAffinity notation)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
    return " ".join(out)


def sglang_instances(instances, settings):
    """Everything the service needs per instance: GPUs, CPUs, argv, environment, gate values."""
    s = settings
    all_gpus = [g["index"] for g in s.get("gpus") or []]
    out = []
    for inst, planned in zip(instances, plan(s["profile"], instances, all_gpus)):
        profile, gpus = planned["profile"], planned["gpus"]
        cpus = ""
        if s.get("cpu_pinning"):
            aff = [g.get("cpu_affinity") for g in s.get("gpus") or [] if g["index"] in gpus and g.get("cpu_affinity")]
            cpus = _ranges(_cpu_set(",".join(aff)) & set(range(int(s.get("online_cpus") or 0) or 1 << 16)))
            if aff and not cpus:
                raise AnsibleFilterError(
                    "instance %s: the CPUs next to GPUs %s (%s) are not online on this host (%s CPUs); set "
                    "ddtree_service_cpu_pinning: false or check the GPU facts" % (inst["name"], gpus, " ".join(aff), s.get("online_cpus")))
        # a workaround the profile asks for is switched on by the environment a patch of the venv's
        # series provides for it (the stamp's "provides"), else by SGLang's own coarser flag
        skip_vision = bool(profile.get("skip_vision_warmup"))
        provided = (s.get("provides") or {}).get("skip_vision_warmup")
        patched = provided is not None
        # day two: an instance a fallback marked runs without speculation (roles/ddtree_day2)
        algorithm = "none" if inst["name"] in (s.get("fallback") or []) else s.get("algorithm")
        argv = sglang_argv(profile, s["model_path"], drafter_path=s.get("drafter_path"), algorithm=algorithm,
                           host=s.get("host", "0.0.0.0"), port=inst["port"], served_model_name=s.get("served_model_name"),
                           reasoning_parser=s.get("reasoning_parser"), tool_call_parser=s.get("tool_call_parser"),
                           skip_all_warmup=skip_vision and not patched, extra_args=s.get("extra_args"),
                           group=s.get("group") or None)
        state, cache = "/var/lib/%s/%s" % (s["unit"], inst["name"]), "/var/cache/%s/%s" % (s["unit"], inst["name"])
        env = {"HOME": state, "XDG_CACHE_HOME": cache, "TRITON_CACHE_DIR": cache + "/triton",
               "TORCHINDUCTOR_CACHE_DIR": cache + "/inductor", "FLASHINFER_WORKSPACE_BASE": cache}
        warm = s.get("warm_dir")
        if warm:
            # warm start (docs/warm_start.md): every JIT cache in the key's directory. SGLang's own
            # redirect_third_party_caches() places these under SGLANG_CACHE_DIR (DeepGEMM, CuTe AOT and
            # torch.compile graphs included); the rest are set here too, for what is imported before sglang
            env.update({"SGLANG_CACHE_DIR": warm, "TRITON_CACHE_DIR": warm + "/triton", "TORCHINDUCTOR_CACHE_DIR": warm + "/inductor",
                        "FLASHINFER_WORKSPACE_BASE": warm, "CUDA_CACHE_PATH": warm + "/nv", "TILELANG_CACHE_DIR": warm + "/tilelang"})
        env.update(profile.get("env") or {})
        env.update(s.get("env") or {})
        if skip_vision and patched:
            env.update(provided)
        if s.get("group"):
            env.update(s.get("group_env") or {})  # NCCL/Gloo interfaces of a serving group
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        out.append({"name": inst["name"], "port": int(inst["port"]), "gpus": gpus, "cpus": cpus, "argv": argv,
                    "env": dict((k, str(v)) for k, v in env.items()), "expect": sglang_server_expect(argv),
                    "algorithm": _algorithm(profile, algorithm), "unit": "%s@%s.service" % (s["unit"], inst["name"]),
                    "parallelism": planned["parallelism"]})
    return out


def sglang_status(results):
    """ddtree_service_status rows from the status state's sglang_health loop, whose items are the slurped
    release.json of each instance (whose items are the stat of it, whose items are the instances)."""
    rows = []
    for r in results or []:
        slurped = r["item"]
        inst = slurped["item"]["item"]
        rel = json.loads(base64.b64decode(slurped["content"]).decode())
        argv = rel.get("argv") or []
        algo = argv[argv.index("--speculative-algorithm") + 1] if "--speculative-algorithm" in argv[:-1] else "none"
        rows.append({"name": inst["name"], "port": inst["port"], "gpus": inst.get("gpus") or [], "release": rel.get("id"),
                     "algorithm": algo, "healthy": bool(r.get("healthy")), "version": r.get("version"),
                     "device": r.get("device")})
    return rows


def sglang_argv_problems(argv, contract):
    """The problems ddtree.fleet.sglang_flags would report for argv, from a contract it returned
    (sglang_version, speculative_algorithms, options): the same check, without a module run."""
    if not isinstance(contract, dict) or "options" not in contract:
        raise AnsibleFilterError("sglang_argv_problems needs a contract read with return_options: true")
    return check_argv({"version": contract.get("sglang_version") or contract.get("version"),
                       "speculative_algorithms": contract.get("speculative_algorithms") or [],
                       "options": contract["options"]}, [str(a) for a in argv])


def _agreed(out, ref):
    """Tokens two outputs share from the start (where one is a prefix of the other, the shorter one's length)."""
    pos = first_divergence(out, ref)
    return min(len(out), len(ref)) if pos is None else pos


def _agreement(outputs, reference):
    """'equal on N gate requests', or how far the outputs agree with the reference's (the gate passed them)."""
    ref = (reference or {}).get("outputs") or []
    differ = [(out, r) for out, r in zip(outputs, ref) if out != r]
    if not differ:
        return "equal on %d gate request%s" % (len(outputs), "" if len(outputs) == 1 else "s")
    agree = min(_agreed(out, r) for out, r in differ)
    return "equal on %d of %d gate requests, the rest on their first %d tokens" % (len(outputs) - len(differ), len(outputs), agree)


def sglang_correctness(gate, algorithm, reference, release, member=False, skipped=""):
    """The correctness column of an instance's status: what its admission gate compared (gate: the gate's result,
    reference: the reference it was compared with, {} when none; release: the release's id; skipped: why the
    correctness gate did not run, in words, when it did not)."""
    gate, reference = gate or {}, reference or {}
    compared = "outputs" in gate
    if member:
        return "answered by rank 0"
    if skipped:
        return "not checked: %s" % skipped
    if algorithm == "none":
        return "reference" if compared else "no reference"
    if not compared:
        return "not checked: the gate sent no prompts"
    if reference.get("speculative_release") == release:
        return "%s vs this release without speculation" % _agreement(gate["outputs"], reference)
    if reference.get("host"):
        return "%s vs %s (%s)" % (_agreement(gate["outputs"], reference), reference["host"], reference.get("family"))
    return "not checked: no reference for this release on record"


def sglang_references(texts, requests, host=None):
    """The correctness references that count, parsed from the texts of their files (query('ansible.builtin.file',
    ...)), in the order given: made from the same gate requests (`requests`: prompts, max_new_tokens, batch,
    long_tokens; a reference from before the batch and the long output has neither and does not count), and with
    `host`, that host's alone. A text that is no JSON object is not a reference."""
    out = []
    for text in texts or []:
        try:
            ref = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            continue
        if not isinstance(ref, dict) or (host is not None and ref.get("host") != host):
            continue
        if "batch" not in ref or "long_tokens" not in ref:
            continue
        if (ref.get("prompts") == list(requests.get("prompts") or []) and ref.get("max_new_tokens") == int(requests["max_new_tokens"])
                and ref.get("batch") == int(requests["batch"]) and ref.get("long_tokens") == int(requests["long_tokens"])):
            out.append(ref)
    return out


class FilterModule:
    def filters(self):
        return {"sglang_argv": sglang_argv, "sglang_algorithm": sglang_algorithm, "sglang_instances": sglang_instances,
                "sglang_status": sglang_status, "sglang_correctness": sglang_correctness,
                "sglang_argv_problems": sglang_argv_problems, "sglang_argv_autoregressive": sglang_argv_autoregressive,
                "sglang_references": sglang_references}
