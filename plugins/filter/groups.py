# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node serving groups: one model over several hosts (SGLang --nnodes/--node-rank/--dist-init-addr).
Documented in serving_groups.yml, serving_group_of.yml, serving_group_env.yml and rollout_units.yml beside this file; docs/groups.md."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.ddtree.fleet.plugins.filter.hosts import _get, address, url_host


def _natural(name):
    """b300-2 before b300-10: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def _shape(hv):
    profile = _get(hv, "nvidia_facts_profile", {}) or {}
    facts = _get(hv, "ansible_facts", {}) or {}
    nv = (facts.get("nvidia") if hasattr(facts, "get") else None) or {}
    raw = profile.get("nodes", 1)
    try:
        nodes = int(raw) if str(raw).strip().isdigit() else 0
    except (TypeError, ValueError):
        nodes = 0
    return {"host": str(_get(hv, "inventory_hostname", "")), "family": profile.get("name") or "?",
            "gpu_count": int(nv.get("gpu_count") or 0), "nodes": nodes,
            "pin": str(_get(hv, "common_serving_group", "") or ""), "rank": _get(hv, "common_serving_rank", None),
            "address": address(hv), "nodes_raw": raw}


def _group(name, members, nodes, reason, port):
    rank0 = members[0]
    return {"name": name, "nodes": nodes, "members": [m["host"] for m in members], "rank0": rank0["host"],
            "family": rank0["family"], "gpu_count": rank0["gpu_count"], "reason": reason,
            "init_addr": "%s:%d" % (url_host(rank0["address"]), int(port))}


def serving_groups(hostvars_list, port=20000, unknown=()):
    """{'groups': [...], 'problems': {host: message}} for the GPU hosts whose hostvars are given (those of
    this run, with their GPU facts and profile). A host whose profile asks for nodes > 1, or that the
    inventory pins (common_serving_group), is a member of a group; the others serve alone."""
    shapes = [_shape(hv) for hv in hostvars_list]
    groups, problems = [], {}
    for s in shapes:
        if s["nodes"] < 1:
            problems[s["host"]] = ("%s: profile %s has nodes: %r; it must be a whole number >= 1 (the hosts one "
                                   "serving group spans): fix nodes in the profile or its overrides"
                                   % (s["host"], s["family"], s["nodes_raw"]))
    # pinned groups: the inventory names them; rank by common_serving_rank, else by name
    pinned = {}
    for s in shapes:
        if s["pin"] and s["host"] not in problems:
            pinned.setdefault(s["pin"], []).append(s)
    for name in sorted(pinned):
        members = sorted(pinned[name], key=_pin_key)
        names = ", ".join(m["host"] for m in members)
        kinds = sorted(set((m["family"], m["gpu_count"], m["nodes"]) for m in members))
        ranks = [m["rank"] for m in members if m["rank"] is not None]
        if len(kinds) > 1:
            detail = "; ".join("%s: family %s, %d GPUs, nodes %d" % (m["host"], m["family"], m["gpu_count"], m["nodes"])
                               for m in members)
            msg = ("serving group %s (pinned: common_serving_group) mixes hosts of different shape (%s): a group's "
                   "members must have the same GPU family, GPU count and profile; pin identical hosts together" % (name, detail))
        elif len(members) != kinds[0][2]:
            msg = ("serving group %s (pinned: common_serving_group) has %d member(s) (%s) but profile %s asks for "
                   "nodes: %d: pin %d hosts to it, or set nodes: %d in the profile overrides"
                   % (name, len(members), names, kinds[0][0], kinds[0][2], kinds[0][2], len(members)))
        elif ranks and sorted(str(r) for r in ranks) != sorted(str(r) for r in range(len(members))):
            msg = ("serving group %s: common_serving_rank values %s must be 0..%d, one per member (%s); or set none "
                   "and the members are ranked by name" % (name, ranks, len(members) - 1, names))
        else:
            msg = None
        if msg:
            for m in members:
                problems[m["host"]] = "%s: %s" % (m["host"], msg)
            continue
        if len(members) == 1:
            continue  # a group of one serves alone
        groups.append(_group(name, members, len(members),
                             "pinned in the inventory (common_serving_group: %s), ranked by %s"
                             % (name, "common_serving_rank" if ranks else "host name"), port))
    # formed groups: hosts of the same family, GPU count and nodes, in name order, taken nodes at a time
    buckets = {}
    for s in shapes:
        if not s["pin"] and s["nodes"] > 1 and s["host"] not in problems:
            buckets.setdefault((s["family"], s["gpu_count"], s["nodes"]), []).append(s)
    for (family, gpus, nodes), members in sorted(buckets.items()):
        members = sorted(members, key=lambda m: _natural(m["host"]))
        whole = len(members) - len(members) % nodes
        if unknown:
            # a GPU host whose facts were not read could belong in this bucket: pairing the others without it
            # would silently form other groups than the inventory's
            for m in members:
                problems[m["host"]] = (
                    "%s: serving groups of family %s are formed from the hosts' facts, and %s had none in this run "
                    "(unreachable or failed before its facts were read): fix %s, or pin the groups "
                    "(common_serving_group) so they do not depend on which hosts answered"
                    % (m["host"], family, ", ".join(sorted(unknown)), "it" if len(unknown) == 1 else "them"))
            continue
        for i in range(0, whole, nodes):
            chunk = members[i:i + nodes]
            groups.append(_group("%s-%dx%d-%d" % (family, nodes, gpus, i // nodes + 1), chunk, nodes,
                                 "formed: profile %s asks for nodes: %d; the hosts of family %s with %d GPUs, in name "
                                 "order, taken %d at a time" % (family, nodes, family, gpus, nodes), port))
        for m in members[whole:]:
            problems[m["host"]] = (
                "%s: profile %s asks for nodes: %d, but the hosts of family %s with %d GPUs in this run (%s) leave "
                "%s without a group: add hosts of that shape, pin the groups (common_serving_group), or set nodes: 1 "
                "for it (nvidia_facts_profile_host_overrides)"
                % (m["host"], family, nodes, family, gpus, ", ".join(x["host"] for x in members),
                   ", ".join(x["host"] for x in members[whole:])))
    return {"groups": sorted(groups, key=lambda g: _natural(g["name"])), "problems": problems}


def _pin_key(s):
    return (s["rank"] is None, s["rank"] if s["rank"] is not None else 0, _natural(s["host"]))


def group_role(hv, hostvars_list):
    """(group name, rank) of a host for the router: from this run's fact (nvidia_facts_serving_group),
    else from its pin in the inventory (a host this run did not reach); (None, 0) when it serves alone."""
    fact = _get(hv, "nvidia_facts_serving_group", None)
    if isinstance(fact, dict):
        return (fact.get("name"), int(fact.get("rank") or 0)) if fact else (None, 0)
    pin = str(_get(hv, "common_serving_group", "") or "")
    if not pin:
        return None, 0
    peers = sorted([_shape(h) for h in hostvars_list if str(_get(h, "common_serving_group", "") or "") == pin], key=_pin_key)
    names = [p["host"] for p in peers]
    me = str(_get(hv, "inventory_hostname", ""))
    return pin, names.index(me) if me in names else 0


def serving_group_of(host, groups):
    """The group a host belongs to, with its rank ({} when it serves alone)."""
    for g in groups or []:
        if host in g["members"]:
            return dict(g, rank=g["members"].index(host))
    return {}


def serving_group_env(facts, addr):
    """NCCL's and Gloo's settings for a serving group member, from its facts: the network interface that holds
    the address the fleet reaches it at (else the default route's), and the GPUDirect RDMA NICs of its topology
    (those on a PCIe switch with a GPU)."""
    facts = facts or {}
    ifname = None
    for name in facts.get("interfaces") or []:
        iface = facts.get(str(name).replace("-", "_")) or {}
        v4 = [iface.get("ipv4") or {}] + list(iface.get("ipv4_secondaries") or [])
        v6 = list(iface.get("ipv6") or [])
        if str(addr).strip("[]") in [a.get("address") for a in v4 + v6 if isinstance(a, dict)]:
            ifname = name
            break
    if ifname is None:
        ifname = (facts.get("default_ipv4") or {}).get("interface") or (facts.get("default_ipv6") or {}).get("interface")
    env = {}
    if ifname:
        # = : this interface exactly (a prefix would also match eth10 for eth1)
        env.update(NCCL_SOCKET_IFNAME="=" + ifname, GLOO_SOCKET_IFNAME=ifname)
    nics = [n.get("device") for n in ((facts.get("nvidia") or {}).get("topology") or {}).get("nics") or []
            if n.get("near_gpus") and n.get("device")]
    if nics:
        env["NCCL_IB_HCA"] = "=" + ",".join(nics)  # exactly these HCAs (mlx5_1 would also match mlx5_10..)
    return env


def _batch_size(batch, units):
    """Ansible's serial arithmetic: a percentage of the units (at least 1), or a number."""
    text = str(batch).strip()
    if text.endswith("%"):
        return max(1, int(float(text[:-1]) * units / 100.0))
    return max(1, int(text))


def rollout_units(hostvars_list, batch="25%"):
    """The rollout's plan: the GPU hosts (in inventory order) as units - a serving group is one unit (its
    members in rank order), a host alone another - then the canary (the first unit) and batches of `batch`
    units. Returns {units, hosts (the play's host order), serial (hosts per batch, Ansible's serial list)}."""
    units, seen = [], {}
    for hv in hostvars_list:
        name = str(_get(hv, "inventory_hostname", ""))
        group = _get(hv, "nvidia_facts_serving_group", {}) or {}
        key = ("group", group["name"]) if group.get("name") else ("host", name)
        if key not in seen:
            seen[key] = len(units)
            units.append({"name": key[1], "hosts": list(group.get("members") or [name]) if group else [name]})
    names = set(str(_get(hv, "inventory_hostname", "")) for hv in hostvars_list)
    for u in units:
        u["hosts"] = [h for h in u["hosts"] if h in names]
    size = _batch_size(batch, len(units))
    batches = [units[:1]] + [units[i:i + size] for i in range(1, len(units), size)]
    serial = [sum(len(u["hosts"]) for u in b) for b in batches if b]
    return {"units": units, "hosts": [h for u in units for h in u["hosts"]], "serial": serial or [1],
            "batches": [[u["name"] for u in b] for b in batches if b]}


class FilterModule:
    def filters(self):
        return {"serving_groups": serving_groups, "serving_group_of": serving_group_of, "serving_group_env": serving_group_env,
                "rollout_units": rollout_units}
