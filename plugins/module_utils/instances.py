# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang instances of a GPU host as the fleet sees them: each instance's GPUs and its profile (the
host's merged profile with the instance's own overrides over it). The service renders them
(filter sglang_instances), the preflight checks each one's parallelism against the links between its
own GPUs, and the report shows each one's parallelism: one definition for the three."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def merge(a, b):
    """b over a, recursively for dicts (the profile overrides' rule)."""
    out = dict(a or {})
    for k, v in (b or {}).items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def plan(profile, instances, all_gpus):
    """[{name, port, gpus, profile, parallelism}] per instance: gpus its own (empty: all of the host's),
    profile the host's with the instance's overrides merged over it."""
    out = []
    for inst in instances or []:
        prof = merge(profile, inst.get("profile") or {})
        out.append({"name": inst.get("name"), "port": inst.get("port"), "gpus": list(inst.get("gpus") or all_gpus),
                    "profile": prof, "parallelism": dict(prof.get("parallelism") or {})})
    return out


def parallelism_text(planned):
    """The report's parallelism column: 'tp8 ep1 dp1' for one instance on every GPU, else one entry per
    instance with its GPUs ('main tp4 ep1 dp1 (GPUs 0-3); b tp4 ep1 dp1 (GPUs 4-7)')."""
    def one(p):
        par = p["parallelism"]
        return "tp%s ep%s dp%s" % (par.get("tp"), par.get("ep"), par.get("dp")) if par else None
    if not planned:
        return None
    if len(planned) == 1:
        return one(planned[0])
    return "; ".join("%s %s (GPUs %s)" % (p["name"], one(p) or "-", _span(p["gpus"])) for p in planned)


def _span(gpus):
    g = sorted(int(x) for x in gpus)
    if g and g == list(range(g[0], g[-1] + 1)) and len(g) > 1:
        return "%d-%d" % (g[0], g[-1])
    return ",".join(str(x) for x in g) or "-"
