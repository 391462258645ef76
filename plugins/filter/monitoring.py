# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ddtree_monitoring role's filters: Prometheus file_sd target groups of the fleet from the hosts'
records (prometheus_targets), and which hosts keep the last files' entries (prometheus_stale).
Documented in prometheus_targets.yml and prometheus_stale.yml beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import keep_unreached, url_host
from ansible_collections.ddtree.fleet.plugins.module_utils.serving_groups import group_role


def _label(value):
    return "" if value is None else str(value)


def _by_host(records):
    return dict((r["host"], r) for r in records or [])


def _reached(recs, routers, current):
    """The hosts whose entries this run refreshes, per job ('exporter' for every exporter job): an instance's labels
    come from the GPU facts of this run; a router's from its inventory; an exporter's from this run's look (or the
    inventory's list)."""
    current = set(h for h in current if h in recs)
    return {"sglang": set(h for h in current if recs[h]["facts_read"]), "sglang-router": current & set(routers),
            "exporter": set(h for h in current
                            if recs[h].get("exporters") is not None or recs[h].get("exporters_found") is not None)}


def prometheus_stale(records, gpu_hosts, routers=(), current=()):
    """The fleet hosts some of whose targets this run cannot refresh (outside --limit, no GPU facts read, no exporter
    look): their entries are kept from the files written last time, which then have to be read."""
    reached = _reached(_by_host(records), routers, current)
    return sorted(h for h in set(gpu_hosts) | set(routers)
                  if h not in reached["exporter"] or (h in gpu_hosts and h not in reached["sglang"])
                  or (h in routers and h not in reached["sglang-router"]))


def _fresh(recs, gpu_hosts, routers, instances, router_port, router_metrics_port, exporters):
    """{job: {host: [target groups]}} from this run's records."""
    jobs = dict([("sglang", {}), ("sglang-router", {})] + [(job, {}) for job in exporters])
    gpu_recs = [recs.get(h) or {"host": h, "address": h, "nvidia": {}} for h in sorted(gpu_hosts)]
    for rec in gpu_recs:
        h, addr = rec["host"], url_host(rec["address"])
        group, rank = group_role(rec, gpu_recs)
        facts = rec.get("nvidia") or {}
        profile = rec.get("profile") or rec.get("service_profile") or {}
        status = dict((s.get("name"), s) for s in rec.get("status") or [] if isinstance(s, dict))
        base = {"host": h, "family": _label(facts.get("family") if facts.get("present") else profile.get("name")),
                "profile": _label(profile.get("name")), "serving_group": _label(group), "node_rank": _label(rank if group else None)}
        jobs["sglang"][h] = [{"targets": ["%s:%s" % (addr, inst["port"])],
                              "labels": dict(base, sglang_instance=str(inst["name"]),
                                             release=_label((status.get(inst["name"]) or {}).get("release")))}
                             for inst in rec.get("instances") or instances]
    for h in sorted(routers):
        rec = recs.get(h) or {"host": h, "address": h}
        port = rec.get("router_metrics_port")
        port = router_metrics_port if port is None else port
        if port and int(port) > 0:
            rport = rec.get("router_port")
            jobs["sglang-router"][h] = [{"targets": ["%s:%s" % (url_host(rec["address"]), port)],
                                         "labels": {"host": h, "router_port": str(router_port if rport is None else rport)}}]
    for h in sorted(set(gpu_hosts) | set(routers)):
        rec = recs.get(h) or {"host": h, "address": h}
        runs = rec.get("exporters")
        if runs is None:
            runs = rec.get("exporters_found") or []
        for job in sorted(runs):
            if job not in exporters:
                raise AnsibleFilterError("%s: exporter %r is not one ddtree_monitoring_exporter_ports knows (%s); add its port "
                                         "there or fix ddtree_monitoring_exporters" % (h, job, ", ".join(sorted(exporters))))
            jobs.setdefault(job, {}).setdefault(h, []).append(
                {"targets": ["%s:%s" % (url_host(rec["address"]), exporters[job])], "labels": {"host": h}})
    return jobs


def prometheus_targets(records, gpu_hosts, routers=(), instances=(), router_port=30080, router_metrics_port=29000,
                       exporters=None, previous=None, current=None):
    """Prometheus file_sd target groups per job: every SGLang instance of gpu_hosts (its /metrics, on the
    instance's port), every router's metrics port, and on each host the exporters it runs. With current (the hosts
    this run reached, e.g. under --limit), a host's entries of a job come from previous (the files written last time)
    where this run did not read what they need (module_utils/fleet.keep_unreached); a router reached is always fresh."""
    exporters = exporters or {}
    recs = _by_host(records)
    fresh = _fresh(recs, gpu_hosts, routers, instances, router_port, router_metrics_port, exporters)
    fleet = sorted(set(gpu_hosts) | set(routers))
    if current is None:
        reached = dict((job, set(fleet)) for job in list(fresh) + ["exporter"])
    else:
        reached = _reached(recs, routers, current)
    out = {}
    for job in sorted(set(fresh) | set(previous or {})):
        last = {}
        for g in (previous or {}).get(job) or []:
            if isinstance(g, dict) and (g.get("labels") or {}).get("host") in fleet:
                last.setdefault(g["labels"]["host"], []).append(g)
        kept = keep_unreached(fleet, fresh.get(job, {}), last, reached.get(job, reached.get("exporter", set())))
        out[job] = sorted([g for h in kept for g in kept[h]], key=lambda g: (g["labels"]["host"], g["targets"]))
    return out


class FilterModule:
    def filters(self):
        return {"prometheus_targets": prometheus_targets, "prometheus_stale": prometheus_stale}
