# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pictures of the HTML fleet report (reports/fleet.html): Plotly figures built from the report's
data (fleet_rows, bench.json, the last rollout record), rendered as HTML fragments with fixed ids so
the same fleet gives the same file (a second site.yml run changes nothing). Plotly's JavaScript is
inlined once by the page, so the file needs no network when it is viewed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.module_utils import instances as instances_mu
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health
from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import keep_unreached

try:
    import jmespath
except ImportError:  # the report's filter says so when it is used
    jmespath = None

try:
    import plotly
    import plotly.graph_objects as go
except ImportError:  # reported when the filter is used
    plotly = go = None

# the health verdict of a host its GPU health check refused (the rows, the page's count and its cells)
HEALTH_FAILED = "FAILED"

LINK = re.compile(r"^NV(\d+)$")
# PCIe path kinds of nvidia-smi topo -m, nearest first
PCIE = ["PIX", "PXB", "PHB", "NODE", "SYS"]
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), font=dict(size=12))


def _need_plotly():
    if go is None:
        raise AnsibleFilterError("ddtree.fleet.fleet_charts needs the plotly Python package on the controller "
                                 "(pip install plotly; requirements/controller.txt pins it)")


def _div(fig, div_id, height):
    fig.update_layout(height=height, **LAYOUT)
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True, "staticPlot": False})


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", str(text)).strip("-").lower()


def topology(row):
    """GPU-to-GPU matrix of a host as a heatmap, with the link's name in each cell and each GPU's NUMA node on
    the axes. A host with NVLink is coloured by NVLink lanes (NV#; a PCIe pair is 0); a PCIe-only host by the
    PCIe path kind (PIX, PXB, PHB, NODE, SYS: how far the traffic goes), nearest lightest."""
    matrix = row.get("topology_matrix") or {}
    gpus = sorted(matrix, key=lambda g: int(re.sub(r"\D", "", g) or 0))
    if not gpus:
        return None
    numa = dict((("GPU%s" % g.get("index")), g.get("numa_node")) for g in row.get("gpu_list") or [])
    labels = ["%s · NUMA %s" % (g, numa.get(g, "?")) for g in gpus]
    text = [["X" if a == b else (matrix.get(a) or {}).get(b, "?") for b in gpus] for a in gpus]
    nvlink = any(LINK.match(t) for r in text for t in r)
    if nvlink:
        z = [[None if a == b else (int(LINK.match(t).group(1)) if LINK.match(t) else 0) for b, t in zip(gpus, r)]
             for a, r in zip(gpus, text)]
        top = max(v for r in z for v in r if v is not None)
        # both ends fixed (plotly ignores zmin alone): 0 (a PCIe pair) to the most lanes of a pair
        heat = dict(colorscale="Greens", zmin=0, zmax=max(top, 1), colorbar=dict(title="NVLink lanes"))
        title = "%s: GPU-to-GPU links (NV# = NVLink lanes; %s = PCIe paths)" % (row["host"], "/".join(PCIE))
    else:
        z = [[None if a == b else (PCIE.index(t) if t in PCIE else None) for b, t in zip(gpus, r)] for a, r in zip(gpus, text)]
        heat = dict(colorscale="Oranges", zmin=0, zmax=len(PCIE) - 1,
                    colorbar=dict(title="PCIe path", tickvals=list(range(len(PCIE))), ticktext=PCIE))
        title = "%s: GPU-to-GPU PCIe paths (no NVLink; PIX nearest ... SYS across the CPUs)" % row["host"]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, text=text, texttemplate="%{text}",
                               hovertemplate="%{y} → %{x}: %{text}<extra></extra>", **heat))
    fig.update_layout(title=title)
    fig.update_yaxes(autorange="reversed")
    return _div(fig, "topology-%s" % _slug(row["host"]), 140 + 42 * len(gpus))


def bench(bench_hosts, rows):
    """Per family: output tok/s of the autoregressive baseline and of speculative decoding at each
    concurrency, per host, beside the figures the family's profile records (bench_recorded; a family
    with recorded figures gets its chart before any host of it was measured)."""
    by_family = dict((r["family"], []) for r in rows if r.get("family") and r.get("bench_recorded"))
    profiles = dict((r["host"], r) for r in rows)
    for host, b in sorted((bench_hosts or {}).items()):
        fam = (profiles.get(host) or {}).get("family") or b.get("profile") or "unknown"
        by_family.setdefault(fam, []).append((host, b))
    out = {}
    for fam, hosts in sorted(by_family.items()):
        tok, ttft, acc = go.Figure(), go.Figure(), go.Figure()
        for host, b in hosts:
            levels = b.get("levels") or []
            x = ["c=%s" % l["concurrency"] for l in levels]
            for name, key, fig in (("baseline", "baseline_tok_s", tok), ("speculative", "speculative_tok_s", tok),
                                   ("baseline", "baseline_ttft_ms", ttft), ("speculative", "ttft_ms", ttft)):
                y = [l.get(key) for l in levels]
                fig.add_trace(go.Bar(name="%s %s" % (host, name), x=x, y=y, text=y, textposition="outside"))
            y = [l.get("accept_length") for l in levels]
            acc.add_trace(go.Bar(name=host, x=x, y=y, text=y, textposition="outside"))
        recorded = [rec for r in rows if r.get("family") == fam for rec in (r.get("bench_recorded") or [])][:8]
        if recorded:
            seen = dict(("c=%s" % rec["concurrency"], rec) for rec in recorded)
            x = sorted(seen, key=lambda k: int(k[2:]))
            y = [seen[k].get("speculative_tok_s") for k in x]
            tok.add_trace(go.Bar(name="recorded (%s)" % seen[x[0]].get("source", "profile"), x=x, y=y, text=y,
                                 textposition="outside", marker_pattern_shape="/"))
        floors = [r.get("accept_length_floor") for r in rows if r.get("family") == fam and r.get("accept_length_floor")]
        if floors:
            acc.add_hline(y=float(floors[0]), line_dash="dash", annotation_text="floor %s" % floors[0])
        tok.update_layout(title="%s: output tok/s, baseline vs speculative" % fam, barmode="group", yaxis_title="tok/s")
        ttft.update_layout(title="%s: mean TTFT (ms)" % fam, barmode="group", yaxis_title="ms")
        acc.update_layout(title="%s: accept length (tokens per verify pass)" % fam, barmode="group")
        out[fam] = {"tok_s": _div(tok, "bench-tok-%s" % _slug(fam), 380), "ttft": _div(ttft, "bench-ttft-%s" % _slug(fam), 320),
                    "accept": _div(acc, "bench-accept-%s" % _slug(fam), 300)}
    return out


def timeline(rollout):
    """The last rollout: the router's worker count after each step over time, each step a marker
    named by host and event."""
    events = sorted(((e["at"], host, e) for host, evs in ((rollout or {}).get("hosts") or {}).items() for e in evs),
                    key=lambda t: t[0])
    if not events:
        return None
    cap = [(at, e["router_workers"]) for at, _h, e in events if e.get("router_workers") is not None]
    fig = go.Figure()
    if cap:
        fig.add_trace(go.Scatter(name="workers behind the router", x=[a for a, _c in cap], y=[c for _a, c in cap],
                                 mode="lines+markers", line_shape="hv"))
    fig.add_trace(go.Scatter(name="steps", x=[at for at, _h, _e in events], y=[0.2] * len(events), mode="markers+text",
                             text=["%s %s" % (h, e["event"]) for _at, h, e in events], textposition="top center",
                             marker=dict(symbol=["x" if e["event"] == "refused" else "circle" for _a, _h, e in events],
                                         size=10)))
    fig.update_layout(title="Rollout %s (%s): capacity over time" % (rollout.get("id"), rollout.get("outcome")),
                      yaxis=dict(title="workers", rangemode="tozero", dtick=1))
    return _div(fig, "rollout-timeline", 380)


PROFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiles")
TAG = re.compile(r"\[([a-z]+)[^\]]*\]")


def profile_evidence(name, profile_dir=None):
    """What a family profile sets and the evidence each value names: one entry per line of
    profiles/<name>.yml that sets a value, {key (dotted), value, tags ([doc], [report], ...), note}."""
    path = os.path.join(profile_dir or PROFILES, "%s.yml" % name)
    if not name or not os.path.isfile(path):
        return []
    out, stack = [], []
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            body, _sep, comment = line.partition(" #")
            if not body.strip() or body.lstrip().startswith(("#", "-", "---")) or ":" not in body:
                continue
            indent = len(body) - len(body.lstrip())
            key, _c, value = body.strip().partition(":")
            stack = [(i, k) for i, k in stack if i < indent]
            if not value.strip():
                stack.append((indent, key))
                continue
            out.append({"key": ".".join([k for _i, k in stack] + [key]), "value": value.strip().strip('"'),
                        "tags": TAG.findall(line), "note": comment.strip().lstrip("#").strip()})
    return out


def alerts(rows):
    """What the page shows first: errors (hosts refused by GPU health, unhealthy instances) and warnings."""
    errors, warnings, refused, unhealthy = [], [], [], []
    for r in rows:
        health = r.get("health") or {}
        if health.get("verdict") == HEALTH_FAILED:
            refused.append(r["host"])
            errors += ["%s" % p for p in health.get("problems") or []]
        for i in r.get("service") or []:
            if i.get("healthy") is False:
                unhealthy.append("%s %s" % (r["host"], i.get("name")))
                errors.append("%s: instance %s (release %s) is not healthy" % (r["host"], i.get("name"), i.get("release")))
        warnings += ["%s: %s" % (r["host"], w) for w in r.get("warnings") or []]
    return {"errors": errors, "warnings": warnings, "refused": refused, "unhealthy": unhealthy}


def fleet_charts(rows, bench_hosts=None, rollout=None):
    """{plotlyjs, alerts, topology: {host: html}, bench: {family: {tok_s, ttft, accept}}, timeline: html or None}."""
    _need_plotly()
    return {
        "alerts": alerts(rows or []),
        "plotly_version": plotly.__version__,
        "plotlyjs": plotly.offline.get_plotlyjs(),
        "topology": dict((h, t) for h, t in ((r["host"], topology(r)) for r in rows or []) if t),
        "bench": bench(bench_hosts, rows or []),
        "timeline": timeline(rollout),
    }


# One report row as a query over a host's record (module_utils/fleet.py): null-safe paths into the facts, the
# profile and the service status.
ROW_QUERY = """{
  gpu_count: nvidia.gpu_count || `0`,
  gpu_names: nvidia.gpus[].name || `[]`,
  present: nvidia.present || `false`,
  compute_capability: nvidia.compute_capability,
  family: nvidia.family,
  driver: nvidia.driver_version,
  cuda: nvidia.cuda_version,
  cuda_source: nvidia.cuda_version_source,
  interconnect: nvidia.topology.interconnect,
  nvlink_lanes: nvidia.topology.nvlink_min_links,
  numa_nodes: nvidia.topology.numa_nodes || `[]`,
  profile: profile.name,
  profile_settings: profile || `{}`,
  group_names: group_names || `[]`,
  warnings: nvidia.warnings || `[]`,
  nvidia: nvidia,
  profile_health: profile.health,
  service: status || `[]`,
  topology_matrix: nvidia.topology.matrix || `{}`,
  gpu_list: nvidia.gpus[].{index: index, numa_node: numa_node, memory_total_mib: memory_total_mib} || `[]`,
  bench_recorded: profile.bench_recorded || `[]`,
  accept_length_floor: profile.speculative.accept_length_floor,
  profile_overrides: profile_overrides || `{}`,
  serving_group: serving_group || `{}`
}"""


def fleet_rows(records, previous=None, current=None, instances=None):
    """One row per host for the fleet report, from the hosts' records (sorted by host). A host's parallelism is
    each of its instances' (its ddtree_service_instances, else `instances`: common_instances). With current (the
    hosts this run reached, e.g. under --limit), a host outside it, or one whose GPU facts this run did not read,
    keeps its row from previous (the last report's rows), marked as such."""
    if jmespath is None:
        raise AnsibleFilterError("ddtree.fleet.fleet_rows needs the jmespath Python package on the controller "
                                 "(pip install jmespath; requirements/controller.txt pins it)")
    query = jmespath.compile(ROW_QUERY)
    fresh = dict((rec["host"], _row(rec, query.search(rec), instances)) for rec in records)
    hosts = sorted(fresh)
    if current is None:
        return [fresh[h] for h in hosts]
    read = set(r["host"] for r in records if r["facts_read"])
    reached = set(h for h in current if h in read)
    # the old row over an empty one: a report written by an older release may lack newer fields
    last = dict((r.get("host"), dict(fresh[r["host"]], **dict(r, from_previous_report=True)))
                for r in previous or [] if isinstance(r, dict) and r.get("host") in fresh)
    kept = keep_unreached(hosts, fresh, last, reached)
    return [kept[h] for h in hosts]


def _row(rec, q, instances):
    models = sorted(set(q["gpu_names"]))
    planned = instances_mu.plan(q["profile_settings"], rec.get("instances") or instances or [{"name": "main"}],
                                [g.get("index") for g in q["gpu_list"]]) if q["profile_settings"] else []
    return {
        "host": rec["host"],
        "gpus": ("%s x %d" % (models[0], len(q["gpu_names"]))) if len(models) == 1 else (", ".join(models) or "none"),
        "gpu_count": q["gpu_count"],
        "compute_capability": q["compute_capability"],
        "family": q["family"] if q["present"] else None,
        "driver": q["driver"],
        "cuda": q["cuda"] or ("unknown branch" if q["cuda_source"] == "unknown branch" else None),
        "interconnect": q["interconnect"] if q["present"] else None,
        "nvlink_lanes": q["nvlink_lanes"],
        "numa_nodes": q["numa_nodes"],
        "profile": q["profile"],
        "profile_settings": q["profile_settings"],
        "parallelism": instances_mu.parallelism_text(planned),
        "instances": [{"name": p["name"], "gpus": p["gpus"], "parallelism": p["parallelism"]} for p in planned],
        "groups": sorted(g for g in q["group_names"] if g.startswith("gpu_")),
        "warnings": q["warnings"] + (nvidia_health.facts_warnings(rec["host"], q["nvidia"], q["profile_health"])
                                     if q["present"] else []),
        "health": _health_verdict(rec["host"], q),
        "xids": nvidia_health.facts_xids(rec["host"], q["nvidia"], q["profile_health"]) if q["present"] else [],
        "service": q["service"],
        "topology_matrix": q["topology_matrix"],
        "gpu_list": q["gpu_list"],
        "bench_recorded": q["bench_recorded"],
        "accept_length_floor": q["accept_length_floor"],
        "profile_overrides": q["profile_overrides"],
        "serving_group": _group_row(q["serving_group"]),
        "from_previous_report": False,
    }


def _group_row(group):
    """The serving group columns of a report row ({} for a host serving alone)."""
    if not group:
        return {}
    return dict((k, group.get(k)) for k in ("name", "rank", "nodes", "members", "rank0", "reason"))


def _health_verdict(host, q):
    """ok, not read, or the problems against the host's profile thresholds (the -q counters and the XIDs)."""
    health = (q["nvidia"] or {}).get("health") or {}
    if not q["present"]:
        return {"verdict": None, "problems": []}
    # the XIDs of the kernel log refuse a host whose -q counters were not read, too
    problems = nvidia_health.facts_problems(host, q["nvidia"], q["profile_health"])
    if problems:
        return {"verdict": HEALTH_FAILED, "problems": problems}
    if not health.get("read"):
        return {"verdict": "not read", "problems": [], "why": health.get("error")}
    return {"verdict": "ok", "problems": []}


class FilterModule:
    def filters(self):
        return {"fleet_charts": fleet_charts, "profile_evidence": profile_evidence, "fleet_rows": fleet_rows}
