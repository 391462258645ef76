# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for fleet decisions that are easier to get right (and test) in Python than Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_preflight
short_description: Check a GPU host against its serving profile
version_added: "0.1.0"
description:
  - Returns the list of preflight failures of one host, each naming the host, the value found,
    what the profile needs and the fix. An empty list means the host passes.
  - This file also holds C(fleet_rows), C(cuda_toolkit_problems), C(bench_levels), C(bench_gate),
    C(rollout_changed), C(dcgm_failures) and C(worker_urls); each is documented in its own file beside
    this one (C(ansible-doc -t filter ddtree.fleet.NAME)).
positional: nvidia, profile
options:
  _input:
    description: The inventory hostname (used in messages).
    type: str
    required: true
  nvidia:
    description: C(ansible_facts.nvidia) of the host.
    type: dict
    required: true
  profile:
    description: The host's merged serving profile.
    type: dict
    required: true
  checks:
    description: >-
      Which checks run; keys gpu_count, gpu_memory, homogeneous, driver, nvlink, disk, ram, health. The
      health check reads C(nvidia.health) (the nvidia_facts module's counters) against the profile's
      C(health) thresholds; a host whose counters could not be read passes it (nvidia_facts warned).
    type: dict
    default: {}
  model_dir:
    description: Where the model will be stored.
    type: str
  model_size_gib:
    description: Size of the model and drafter in GiB.
    type: float
  disk_free_bytes:
    description: Free bytes on the filesystem of O(model_dir) (ddtree.fleet.disk_space).
    type: int
  memtotal_mb:
    description: C(ansible_facts.memtotal_mb).
    type: int
"""

EXAMPLES = r"""
- name: Check the host
  ansible.builtin.assert:
    that: __failures | length == 0
    fail_msg: "{{ __failures | join('; ') }}"
  vars:
    __failures: "{{ inventory_hostname | ddtree.fleet.gpu_preflight(ansible_facts.nvidia, nvidia_facts_profile) }}"
"""

RETURN = r"""
_value:
  description: Failure messages; empty when every enabled check passes.
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia as nvidia_mu
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health
from ansible_collections.ddtree.fleet.plugins.module_utils.versions import version_tuple
from ansible_collections.ddtree.fleet.plugins.filter.groups import group_role
from ansible_collections.ddtree.fleet.plugins.filter.hosts import address, url_host

try:
    import jmespath
except ImportError:  # the report's filter says so when it is used
    jmespath = None

CHECKS = ("gpu_count", "gpu_memory", "homogeneous", "driver", "nvlink", "disk", "ram", "health")
GIB = 1024 ** 3


def gpu_preflight(host, nvidia, profile, checks=None, model_dir=None, model_size_gib=None, disk_free_bytes=None, memtotal_mb=None):
    enabled = dict((c, True) for c in CHECKS)
    enabled.update(checks or {})
    fails = []
    nv = nvidia or {}
    name = profile.get("name", "?")
    count = nv.get("gpu_count", 0)
    need = int(profile.get("gpus_required", 0))
    if enabled["gpu_count"] and count < need:
        fails.append("%s: %d GPU(s) found, profile %s needs %d: use a host with %d GPUs or a profile for fewer "
                     "(nvidia_facts_profile_overrides: {gpus_required: N, parallelism: {tp: N}})" % (host, count, name, need, need))
    if enabled["homogeneous"] and count and not nv.get("homogeneous", False):
        models = sorted(set(g.get("name") for g in nv.get("gpus", [])))
        fails.append("%s: mixed GPU models %s: serve from identical GPUs (set CUDA_VISIBLE_DEVICES per instance) "
                     "or disable the check (nvidia_facts_preflight_checks: {homogeneous: false})" % (host, ", ".join(models)))
    driver = nv.get("driver_version")
    floor = profile.get("min_driver")
    if enabled["driver"] and floor and (not driver or version_tuple(driver) < version_tuple(floor)):
        fails.append("%s: NVIDIA driver %s is older than %s, the minimum of profile %s: upgrade the driver to %s or newer"
                     % (host, driver or "(none)", floor, name, floor))
    # a serving group (profile nodes > 1) spreads the profile's parallelism and the model over its hosts
    nodes = int(profile.get("nodes") or 1) if str(profile.get("nodes") or 1).isdigit() else 1
    tp = int(profile.get("parallelism", {}).get("tp", 1)) // max(nodes, 1)
    interconnect = nv.get("topology", {}).get("interconnect")
    if enabled["nvlink"] and profile.get("requires_nvlink") and tp > 1 and tp >= count and interconnect != "nvlink":
        fails.append("%s: profile %s runs TP%d across all GPUs and needs NVLink between every pair, found interconnect "
                     "%s (smallest NVLink bond %s): check the NVLink/NVSwitch fabric (nvidia-smi nvlink -s) or use a "
                     "PCIe profile" % (host, name, tp, interconnect, nv.get("topology", {}).get("nvlink_min_links")))
    if enabled["gpu_memory"] and model_size_gib and count:
        total_gib = nodes * sum(g.get("memory_total_mib") or 0 for g in nv.get("gpus", [])[:max(need, 1)]) / 1024.0
        want = float(model_size_gib) * float(profile.get("gpu_memory_headroom", 1.0))
        if total_gib < want:
            fails.append("%s: %.0f GiB of GPU memory on %d GPU(s)%s cannot hold a %.0f GiB model with headroom x%s "
                         "(%.0f GiB): use larger GPUs, a smaller/quantized model or a serving group over more hosts "
                         "(profile nodes: N; docs/groups.md)"
                         % (host, total_gib, min(count, max(need, 1)) * nodes, " on %d hosts" % nodes if nodes > 1 else "",
                            float(model_size_gib), profile.get("gpu_memory_headroom"), want))
    if enabled["disk"] and disk_free_bytes is not None and model_size_gib is not None:
        if disk_free_bytes < float(model_size_gib) * GIB:
            fails.append("%s: %.1f GiB free for the model directory %s, the model needs %.1f GiB: free space or "
                         "point nvidia_facts_model_dir at a larger disk"
                         % (host, disk_free_bytes / float(GIB), model_dir, float(model_size_gib)))
    if enabled["ram"] and memtotal_mb is not None and profile.get("min_ram_gib"):
        if memtotal_mb < float(profile["min_ram_gib"]) * 1024:
            fails.append("%s: %.0f GiB of RAM, profile %s needs %s GiB: add memory or lower min_ram_gib in "
                         "nvidia_facts_profile_overrides" % (host, memtotal_mb / 1024.0, name, profile["min_ram_gib"]))
    if enabled["health"]:
        fails.extend(nvidia_health.facts_problems(host, nv, profile.get("health")))
    return fails


# One report row as a query over a host's variables: null-safe paths into the facts, the profile and
# the service status (jmespath: what used to be chains of .get() or {}).
ROW_QUERY = """{
  gpu_count: ansible_facts.nvidia.gpu_count || `0`,
  gpu_names: ansible_facts.nvidia.gpus[].name || `[]`,
  present: ansible_facts.nvidia.present || `false`,
  compute_capability: ansible_facts.nvidia.compute_capability,
  family: ansible_facts.nvidia.family,
  driver: ansible_facts.nvidia.driver_version,
  cuda: ansible_facts.nvidia.cuda_version,
  interconnect: ansible_facts.nvidia.topology.interconnect,
  nvlink_lanes: ansible_facts.nvidia.topology.nvlink_min_links,
  numa_nodes: ansible_facts.nvidia.topology.numa_nodes || `[]`,
  profile: nvidia_facts_profile.name,
  profile_settings: nvidia_facts_profile || `{}`,
  parallelism: nvidia_facts_profile.parallelism,
  group_names: group_names || `[]`,
  warnings: ansible_facts.nvidia.warnings || `[]`,
  nvidia: ansible_facts.nvidia,
  profile_health: nvidia_facts_profile.health,
  service: ddtree_service_status || `[]`,
  topology_matrix: ansible_facts.nvidia.topology.matrix || `{}`,
  gpu_list: ansible_facts.nvidia.gpus[].{index: index, numa_node: numa_node, memory_total_mib: memory_total_mib} || `[]`,
  bench_recorded: nvidia_facts_profile.bench_recorded || `[]`,
  accept_length_floor: nvidia_facts_profile.speculative.accept_length_floor,
  profile_overrides: nvidia_facts_profile_overrides || `{}`,
  serving_group: nvidia_facts_serving_group || `{}`
}"""


def _has_facts(hv):
    try:
        return bool((hv.get("ansible_facts") or {}).get("nvidia"))
    except Exception:  # pylint: disable=broad-except
        return False


def fleet_rows(hostvars, hosts, previous=None, current=None):
    """One row per host for the fleet report. With current (the hosts this run reached, e.g. under --limit),
    a host outside it, or one whose GPU facts this run did not read, keeps its row from previous (the last
    report's rows), marked as such."""
    kept = dict((r.get("host"), r) for r in previous or [] if isinstance(r, dict))
    if current is not None:
        # reached: in this run and with GPU facts read in it (report.yml run alone reads none)
        reached = set(h for h in current if h in hostvars and _has_facts(hostvars[h]))
        # the old row over an empty one: a report written by an older release may lack newer fields
        return [dict(row, **dict(kept[h], from_previous_report=True)) if h not in reached and h in kept else row
                for h, row in zip(sorted(hosts), fleet_rows(hostvars, hosts))]
    if jmespath is None:
        raise AnsibleFilterError("ddtree.fleet.fleet_rows needs the jmespath Python package on the controller "
                                 "(pip install jmespath; requirements/controller.txt pins it)")
    query = jmespath.compile(ROW_QUERY)
    rows = []
    for h in sorted(hosts):
        q = query.search(hostvars[h])
        models = sorted(set(q["gpu_names"]))
        par = q["parallelism"] or {}
        rows.append({
            "host": h,
            "gpus": ("%s x %d" % (models[0], len(q["gpu_names"]))) if len(models) == 1 else (", ".join(models) or "none"),
            "gpu_count": q["gpu_count"],
            "compute_capability": q["compute_capability"],
            "family": q["family"] if q["present"] else None,
            "driver": q["driver"],
            "cuda": q["cuda"],
            "interconnect": q["interconnect"] if q["present"] else None,
            "nvlink_lanes": q["nvlink_lanes"],
            "numa_nodes": q["numa_nodes"],
            "profile": q["profile"],
            "profile_settings": q["profile_settings"],
            "parallelism": ("tp%s ep%s dp%s" % (par.get("tp"), par.get("ep"), par.get("dp"))) if par else None,
            "groups": sorted(g for g in q["group_names"] if g.startswith("gpu_")),
            "warnings": q["warnings"],
            "health": _health_verdict(h, q),
            "service": q["service"],
            "topology_matrix": q["topology_matrix"],
            "gpu_list": q["gpu_list"],
            "bench_recorded": q["bench_recorded"],
            "accept_length_floor": q["accept_length_floor"],
            "profile_overrides": q["profile_overrides"],
            "serving_group": _group_row(q["serving_group"]),
            "from_previous_report": False,
        })
    return rows


def _group_row(group):
    """The serving group columns of a report row ({} for a host serving alone)."""
    if not group:
        return {}
    return dict((k, group.get(k)) for k in ("name", "rank", "nodes", "members", "rank0", "reason"))


def _health_verdict(host, q):
    """ok, not read, or the problems against the host's profile thresholds."""
    health = (q["nvidia"] or {}).get("health") or {}
    if not q["present"]:
        return {"verdict": None, "problems": []}
    if not health.get("read"):
        return {"verdict": "not read", "problems": [], "why": health.get("error")}
    problems = nvidia_health.facts_problems(host, q["nvidia"], q["profile_health"])
    return {"verdict": "FAILED" if problems else "ok", "problems": problems}


def dcgm_failures(output):
    """Failed tests of `dcgmi diag -j` output (text or parsed JSON)."""
    import json
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError as e:
            raise AnsibleFilterError("dcgm_failures: dcgmi diag -j did not print JSON (%s): %s" % (e, output[:300]))
    return nvidia_health.dcgm_failures(output)


def cuda_toolkit_problems(version, compute_caps, driver_cuda="", floor=""):
    """Why a CUDA toolkit version cannot serve a host (module_utils/nvidia.py holds the table)."""
    return nvidia_mu.toolkit_problems(version, compute_caps, driver_cuda or None, floor or None)


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


def rollout_changed(instances, before, status):
    """The instances whose current release a deploy changed: `before` is the results of a stat loop over
    instance names (item) on <root>/<instance>/current, `status` is ddtree_service_status after it."""
    was = {r.get("item"): os.path.basename((r.get("stat") or {}).get("lnk_source") or "") for r in before or []}
    now = dict((s.get("name"), s.get("release")) for s in status or [])
    return [i for i in instances or [] if i.get("name") in was and now.get(i.get("name")) and now[i["name"]] != was[i["name"]]]


def worker_urls(hostvars_list, instances):
    """http://<address>:<port> of every instance of the given hosts: their ddtree_service_instances, else
    `instances` (common_instances: hostvars of another host do not hold role defaults). A host this run
    refused (preflight: nvidia_facts_refused; admission gate: ddtree_service_refused) is left out. Of a
    serving group only rank 0 is a worker, and only while no member is refused."""
    out = []
    hostvars_list = list(hostvars_list)

    def refused(hv):
        return any(str(hv.get(flag)).lower() in ("true", "yes", "1") for flag in ("nvidia_facts_refused", "ddtree_service_refused"))
    roles = [group_role(hv, hostvars_list) for hv in hostvars_list]
    # a serving group is out when any member is (rank 0 alone cannot serve)
    out_groups = set(g for (g, _r), hv in zip(roles, hostvars_list) if g and refused(hv))
    for hv, (group, rank) in zip(hostvars_list, roles):
        if refused(hv) or (group and (rank > 0 or group in out_groups)):
            continue
        addr = url_host(address(hv))
        for inst in hv.get("ddtree_service_instances") or instances:
            out.append("http://%s:%s" % (addr, inst["port"]))
    return out


def _label(value):
    return "" if value is None else str(value)


def _prometheus_reached(hostvars, routers, current):
    """The hosts whose entries this run refreshes, per job: an instance's labels come from the GPU facts of this
    run; a router's from its inventory; an exporter's from this run's look (or the inventory's list)."""
    current = set(h for h in current if h in hostvars)
    reached = {"sglang": set(h for h in current if _has_facts(hostvars[h])), "sglang-router": current & set(routers)}
    looked = set(h for h in current if "ddtree_monitoring_exporters" in hostvars[h] or "ddtree_monitoring_found" in hostvars[h])
    return reached, looked


def prometheus_stale(hostvars, gpu_hosts, routers=(), current=()):
    """The fleet hosts some of whose targets this run cannot refresh (outside --limit, no GPU facts read, no exporter
    look): their entries are kept from the files written last time, which then have to be read."""
    reached, looked = _prometheus_reached(hostvars, routers, current)
    return sorted(h for h in set(gpu_hosts) | set(routers)
                  if h not in looked or (h in gpu_hosts and h not in reached["sglang"]) or (h in routers and h not in reached["sglang-router"]))


def prometheus_targets(hostvars, gpu_hosts, routers=(), instances=(), router_port=30080, router_metrics_port=29000,
                       exporters=None, previous=None, current=None):
    """Prometheus file_sd target groups per job: every SGLang instance of gpu_hosts (its /metrics, on the
    instance's port), every router's metrics port, and on each host the exporters it runs (exporters:
    {job: port}; a host lists what it runs in ddtree_monitoring_exporters, else the facts of this run
    say: ddtree_monitoring_found). Labels: host, family, profile, sglang_instance (the instance's name; Prometheus
    keeps `instance` for the address it scrapes), release, serving_group; a host's
    address is the one the fleet uses (ddtree_address, ansible_host, the name). With current (the hosts this run
    reached, e.g. under --limit), a host's entries of a job come from previous (the files written last time) where
    this run did not read what they need (GPU facts for sglang, the exporter look for an exporter), so labels
    (release, family) do not go blank; a router reached is always fresh."""
    if current is not None:
        jobs = prometheus_targets(hostvars, gpu_hosts, routers, instances, router_port, router_metrics_port, exporters)
        reached, looked = _prometheus_reached(hostvars, routers, current)
        for job, groups in (previous or {}).items():
            kept = [g for g in groups or [] if isinstance(g, dict) and (g.get("labels") or {}).get("host") not in reached.get(job, looked)
                    and (g.get("labels") or {}).get("host") in set(gpu_hosts) | set(routers)]
            if not kept:
                continue
            stale = set(g["labels"]["host"] for g in kept)
            jobs[job] = sorted([g for g in jobs.get(job, []) if g["labels"]["host"] not in stale] + kept,
                               key=lambda g: (g["labels"]["host"], g["targets"]))
        return jobs
    exporters = exporters or {}
    jobs = dict([("sglang", []), ("sglang-router", [])] + [(job, []) for job in exporters])
    gpu_hvs = [hostvars.get(h) or {"inventory_hostname": h} for h in sorted(gpu_hosts)]
    for h, hv in zip(sorted(gpu_hosts), gpu_hvs):
        addr = url_host(address(hv))
        group, rank = group_role(hv, gpu_hvs)
        facts = (hv.get("ansible_facts") or {}).get("nvidia") or {}
        profile = hv.get("nvidia_facts_profile") or hv.get("ddtree_service_profile") or {}
        status = dict((s.get("name"), s) for s in hv.get("ddtree_service_status") or [] if isinstance(s, dict))
        base = {"host": h, "family": _label(facts.get("family") if facts.get("present") else profile.get("name")),
                "profile": _label(profile.get("name")), "serving_group": _label(group), "node_rank": _label(rank if group else None)}
        for inst in hv.get("ddtree_service_instances") or instances:
            labels = dict(base, sglang_instance=str(inst["name"]),
                          release=_label((status.get(inst["name"]) or {}).get("release")))
            jobs["sglang"].append({"targets": ["%s:%s" % (addr, inst["port"])], "labels": labels})
    for h in sorted(routers):
        hv = hostvars.get(h) or {}
        addr = url_host(address(hv))
        port = hv.get("sglang_router_prometheus_port", router_metrics_port)
        if port and int(port) > 0:
            jobs["sglang-router"].append({"targets": ["%s:%s" % (addr, port)],
                                          "labels": {"host": h, "router_port": str(hv.get("sglang_router_port", router_port))}})
    for h in sorted(set(gpu_hosts) | set(routers)):
        hv = hostvars.get(h) or {}
        addr = url_host(address(hv))
        runs = hv.get("ddtree_monitoring_exporters")
        if runs is None:
            runs = hv.get("ddtree_monitoring_found") or []
        for job in sorted(runs):
            if job not in exporters:
                raise AnsibleFilterError("%s: exporter %r is not one ddtree_monitoring_exporter_ports knows (%s); add its port "
                                         "there or fix ddtree_monitoring_exporters" % (h, job, ", ".join(sorted(exporters))))
            jobs.setdefault(job, []).append({"targets": ["%s:%s" % (addr, exporters[job])], "labels": {"host": h}})
    return jobs


class FilterModule:
    def filters(self):
        return {"prometheus_targets": prometheus_targets, "prometheus_stale": prometheus_stale, "gpu_preflight": gpu_preflight, "fleet_rows": fleet_rows,
                "cuda_toolkit_problems": cuda_toolkit_problems,
                "bench_levels": bench_levels, "worker_urls": worker_urls, "bench_gate": bench_gate,
                "rollout_changed": rollout_changed, "dcgm_failures": dcgm_failures}
