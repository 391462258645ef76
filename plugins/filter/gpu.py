# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU checks of the nvidia_facts and cuda_toolkit roles: a host against its serving profile
(gpu_preflight), a toolkit against the GPUs (cuda_toolkit_problems), a DCGM diagnostic's failures
(dcgm_failures). Each is documented in its own file beside this one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.module_utils import instances as instances_mu
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia as nvidia_mu
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health
from ansible_collections.ddtree.fleet.plugins.module_utils import xid
from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import parse_nodes
from ansible_collections.ddtree.fleet.plugins.module_utils.versions import version_tuple

CHECKS = ("gpu_count", "gpu_memory", "homogeneous", "driver", "nvlink", "disk", "ram", "health")
GIB = 1024 ** 3


def _nvlink_problems(host, nv, profile, planned, nodes):
    """Per instance: a tensor-parallel instance that spans all of its GPUs needs NVLink between every pair of
    them (profile requires_nvlink), its own parallelism and GPUs counted, not the host's."""
    fails = []
    matrix = (nv.get("topology") or {}).get("matrix") or {}
    for p in planned:
        if not p["profile"].get("requires_nvlink"):
            continue
        tp = int((p["parallelism"] or {}).get("tp", 1)) // max(nodes, 1)
        names = ["GPU%s" % g for g in p["gpus"]]
        if tp <= 1 or tp < len(names):
            continue
        interconnect, lanes = nvidia_mu.links_between(matrix, names) if matrix else (
            (nv.get("topology") or {}).get("interconnect"), (nv.get("topology") or {}).get("nvlink_min_links"))
        if interconnect != "nvlink":
            what = "instance %s (GPUs %s)" % (p["name"], ",".join(str(g) for g in p["gpus"])) if len(planned) > 1 else "all GPUs"
            fails.append("%s: profile %s runs TP%d across %s and needs NVLink between every pair, found interconnect "
                         "%s (smallest NVLink bond %s): check the NVLink/NVSwitch fabric (nvidia-smi nvlink -s) or use a "
                         "PCIe profile" % (host, profile.get("name", "?"), tp, what, interconnect, lanes))
    return fails


def gpu_preflight(host, nvidia, profile, checks=None, model_dir=None, model_size_gib=None, disk_free_bytes=None, memtotal_mb=None,
                  instances=None):
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
    # a serving group (profile nodes > 1) spreads the profile's parallelism and the model over its hosts; an
    # invalid nodes value is the serving_group role's to refuse (here it counts as 1)
    nodes = parse_nodes(profile.get("nodes")) or 1
    if enabled["nvlink"]:
        all_gpus = [g.get("index") for g in nv.get("gpus") or []]
        planned = instances_mu.plan(profile, instances or [{"name": "main"}], all_gpus)
        fails.extend(_nvlink_problems(host, nv, profile, planned, nodes))
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


def gpu_preflight_warnings(host, nvidia, profile, checks=None):
    """What the preflight's health check lets pass with a warning (XIDs the profile's health.xid_policy warns
    about); nothing when the health check is off."""
    enabled = dict((c, True) for c in CHECKS)
    enabled.update(checks or {})
    if not enabled["health"] or not (nvidia or {}).get("present"):
        return []
    return nvidia_health.facts_warnings(host, nvidia, (profile or {}).get("health"))


def xid_alert_sets(hosts):
    """[{action, xids, hosts}] from [{host, health}]: for each action (refuse, warn) the XIDs a host's profile gives
    it, the hosts that share one set grouped (one alert rule each)."""
    groups = {}
    for item in hosts or []:
        if not isinstance(item, dict) or not item.get("host"):
            raise AnsibleFilterError("xid_alert_sets: each item needs host and health, got %r" % (item,))
        health = item.get("health") or {}
        actions = xid.actions_by_xid(health.get("xid_policy"), health.get("xid_overrides"))
        for action in ("refuse", "warn"):
            xids = tuple(x for x, a in actions.items() if a == action)
            if xids:
                groups.setdefault((action, xids), []).append(str(item["host"]))
    return [{"action": a, "xids": list(x), "hosts": sorted(h), "host_match": _promql_string("|".join(re.escape(n) for n in sorted(h)))}
            for (a, x), h in sorted(groups.items())]


def _promql_string(text):
    """text inside a PromQL double-quoted string (a label matcher's value)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def dcgm_failures(output):
    """Failed tests of `dcgmi diag -j` output (text or parsed JSON)."""
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError as e:
            raise AnsibleFilterError("dcgm_failures: dcgmi diag -j did not print JSON (%s): %s" % (e, output[:300]))
    return nvidia_health.dcgm_failures(output)


def cuda_toolkit_problems(version, compute_caps, driver_cuda="", floor=""):
    """Why a CUDA toolkit version cannot serve a host (module_utils/nvidia.py holds the table)."""
    return nvidia_mu.toolkit_problems(version, compute_caps, driver_cuda or None, floor or None)


class FilterModule:
    def filters(self):
        return {"gpu_preflight": gpu_preflight, "gpu_preflight_warnings": gpu_preflight_warnings, "xid_alert_sets": xid_alert_sets,
                "cuda_toolkit_problems": cuda_toolkit_problems, "dcgm_failures": dcgm_failures}
