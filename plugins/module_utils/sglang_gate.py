# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The output-correctness and draft-acceptance verdicts of the admission gate (sglang_health).

Correctness: speculative decoding must not change greedy output. The reference is the greedy
(temperature 0) output of the same prompts from an autoregressive server (algorithm none): the same
host's when recorded, else another host's serving the same model. Outputs are compared as token ids.
GPU arithmetic is not bit-stable across batch shapes (the verify pass runs the target on a tree of
draft tokens, the autoregressive pass one token at a time), so two correct servers may part at a
near-tie late in a long output; the tolerance is the first divergence position: every prompt must
agree with the reference on at least its first `min_prefix` tokens (all of them when the output
is shorter). A kernel or CUDA-graph bug that garbles output diverges within the first tokens.

Batching: a speculative-decoding bug can corrupt tokens only when requests run together (TensorRT-LLM
#17110: on GB300 with CUDA graphs, GSM8K fell from 96.17 to 88.21 while the accept length stayed the same), and
a server captures one CUDA graph per batch-size bucket. So the gate sends its prompts in waves (`waves`): each
prompt alone, then `batch` requests at once (the prompts in turn; 8 or more crosses the first buckets), then
one long output of the first prompt (`long_output_len` tokens, past the pages and graph sizes a 32-token output
never reaches). Every answer is held to the same rule against the reference, which records the same waves.

Acceptance: the mean accept length SGLang reports per request (`meta_info.spec_accept_length`:
completion tokens / verify passes; 1.0 means no draft token was ever accepted) must reach the
profile's floor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def first_divergence(output, reference):
    """Index of the first token where the two id lists differ; None when one is a prefix of the other."""
    for i, (a, b) in enumerate(zip(output, reference)):
        if a != b:
            return i
    return None


def waves(prompts, output_len, batch=0, long_output_len=0):
    """The gate's requests, [[(label, prompt, max_new_tokens), ...] per wave]: the requests of a wave are sent at
    once, the waves one after another - each prompt alone, then `batch` at once (the prompts in turn), then one
    long output of the first prompt. Outputs are kept in this order (the reference's too)."""
    out = [[("prompt %d" % i, p, int(output_len))] for i, p in enumerate(prompts)]
    if prompts and int(batch) > 0:
        out.append([("batch request %d of %d (prompt %d)" % (j, int(batch), j % len(prompts)), prompts[j % len(prompts)],
                     int(output_len)) for j in range(int(batch))])
    if prompts and int(long_output_len) > 0:
        out.append([("long output (prompt 0, %d tokens)" % int(long_output_len), prompts[0], int(long_output_len))])
    return out


def correctness_problems(outputs, reference, min_prefix, labels=None):
    """Why `outputs` (one token-id list per gate request, labelled by `labels`: default "prompt N") fail against
    `reference` ({"outputs": [...], "host": .., "release": ..}); an empty list when they pass."""
    ref_outputs = (reference or {}).get("outputs") or []
    ref_labels = (reference or {}).get("requests")
    labels = labels or ["prompt %d" % i for i in range(len(outputs))]
    if isinstance(ref_labels, list) and len(ref_labels) == len(ref_outputs) and set(labels) <= set(ref_labels):
        # a reference that names its requests answers any subset of them (a re-check of a running release sends
        # the prompts alone only: its batched and long waves were compared when it started)
        by_label = dict(zip(ref_labels, ref_outputs))
        ref_outputs = [by_label[label] for label in labels]
    if len(ref_outputs) != len(outputs):
        return ["the reference has %d outputs for %d gate requests: record it again (a deploy with algorithm none)"
                % (len(ref_outputs), len(outputs))]
    problems = []
    for label, out, ref in zip(labels, outputs, ref_outputs):
        pos = first_divergence(out, ref)
        need = min(int(min_prefix), len(ref), len(out)) if out else min(int(min_prefix), len(ref))
        if not out and ref:
            problems.append("%s: no output tokens, the reference has %d" % (label, len(ref)))
        elif pos is not None and pos < need:
            problems.append("%s: output departs from the reference at token %d (id %s, reference %s); "
                            "the tolerance is %d matching tokens" % (label, pos, out[pos], ref[pos], need))
    return problems


def acceptance_problems(lengths, floor):
    """Why the measured accept lengths fail the floor; empty when they pass or there is no floor."""
    if floor is None:
        return []
    measured = [float(x) for x in lengths if x is not None]
    if not measured:
        return ["the server reported no accept length (meta_info.spec_accept_length) for %d gate requests: is "
                "speculative decoding on?" % len(lengths)]
    mean = sum(measured) / len(measured)
    if mean < float(floor):
        return ["mean accept length %.2f over %d requests is under the floor %.2f: the draft model is not accepted "
                "(wrong or mismatched drafter, or a broken patch)" % (mean, len(measured), float(floor))]
    return []


def mean(values):
    values = [float(v) for v in values if v is not None]
    return round(sum(values) / len(values), 3) if values else None
