# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ddtree_bench role's filters: baseline and speculative figures side by side (bench_levels), and the
rollout's bench gate against a host's recorded figures (bench_gate). Documented beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def bench_levels(modes):
    """Baseline and speculative figures side by side per concurrency (playbooks/bench.yml)."""
    out = []
    for b, s in zip(modes.get("none") or [], modes.get("speculative") or []):
        out.append({"concurrency": b["concurrency"], "baseline_tok_s": b["output_tok_per_s"],
                    "speculative_tok_s": s["output_tok_per_s"],
                    "speedup": round(s["output_tok_per_s"] / b["output_tok_per_s"], 2) if b["output_tok_per_s"] else None,
                    "accept_length": s.get("accept_length"), "ttft_ms": s.get("ttft_ms_mean"),
                    "baseline_ttft_ms": b.get("ttft_ms_mean")})
    return out


def bench_gate(results, recorded, tolerance=0.1):
    """Why measured figures (sglang_bench results) fail against a host's recorded bench row
    (playbooks/bench.yml): the speculative output tok/s at each concurrency may be at most
    `tolerance` (a fraction) below the recorded one. An empty list: the gate passes."""
    levels = {int(l["concurrency"]): l for l in (recorded or {}).get("levels") or []}
    problems = []
    for r in results or []:
        c = int(r["concurrency"])
        rec = levels.get(c)
        if rec is None:
            problems.append("no recorded figure at concurrency %d (recorded: %s); run playbooks/bench.yml with that "
                            "concurrency in ddtree_bench_concurrency" % (c, sorted(levels) or "none"))
            continue
        floor = float(rec["speculative_tok_s"]) * (1.0 - float(tolerance))
        if float(r["output_tok_per_s"]) < floor:
            problems.append("concurrency %d: %.1f tok/s, recorded %.1f tok/s for release %s (at most %d%% below, so >= %.1f)"
                            % (c, float(r["output_tok_per_s"]), float(rec["speculative_tok_s"]),
                               (recorded or {}).get("release", "?"), round(float(tolerance) * 100), floor))
    return problems


class FilterModule:
    def filters(self):
        return {"bench_levels": bench_levels, "bench_gate": bench_gate}
