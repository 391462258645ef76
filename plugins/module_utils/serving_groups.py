# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node serving groups: one model over several hosts (SGLang --nnodes/--node-rank/--dist-init-addr),
formed from the hosts' records (module_utils/fleet.py), and the rollout's units. The serving_group role
forms them; filters/groups.py exposes these functions; docs/groups.md."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import natural, parse_nodes, url_host


def _shape(rec):
    profile = rec.get("profile") or {}
    nv = rec.get("nvidia") or {}
    raw = profile.get("nodes", 1)
    return {"host": rec["host"], "family": profile.get("name") or "?", "gpu_count": int(nv.get("gpu_count") or 0),
            "nodes": parse_nodes(raw), "pin": str(rec.get("pin") or ""), "rank": rec.get("pin_rank"),
            "address": rec["address"], "nodes_raw": raw}


def _group(name, members, nodes, reason, port):
    rank0 = members[0]
    return {"name": name, "nodes": nodes, "members": [m["host"] for m in members], "rank0": rank0["host"],
            "family": rank0["family"], "gpu_count": rank0["gpu_count"], "reason": reason,
            "init_addr": "%s:%d" % (url_host(rank0["address"]), int(port))}


def serving_groups(records, port=20000, unknown=()):
    """{'groups': [...], 'problems': {host: message}} for the GPU hosts whose records are given (those of
    this run, with their GPU facts and profile). A host whose profile asks for nodes > 1, or that the
    inventory pins (common_serving_group), is a member of a group; the others serve alone."""
    shapes = [_shape(r) for r in records]
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
        members = sorted(members, key=lambda m: natural(m["host"]))
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
    return {"groups": sorted(groups, key=lambda g: natural(g["name"])), "problems": problems}


def _pin_key(s):
    return (s["rank"] is None, s["rank"] if s["rank"] is not None else 0, natural(s["host"]))


def group_role(rec, records):
    """(group name, rank) of a host for the router: from this run's output (serving_group_member), else
    from its pin in the inventory (a host this run did not reach); (None, 0) when it serves alone."""
    fact = rec.get("serving_group")
    if isinstance(fact, dict):
        return (fact.get("name"), int(fact.get("rank") or 0)) if fact else (None, 0)
    pin = str(rec.get("pin") or "")
    if not pin:
        return None, 0
    peers = sorted([_shape(r) for r in records if str(r.get("pin") or "") == pin], key=_pin_key)
    names = [p["host"] for p in peers]
    return pin, names.index(rec["host"]) if rec["host"] in names else 0


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


def rollout_units(records, batch="25%"):
    """The rollout's plan: the GPU hosts (in inventory order) as units - a serving group is one unit (its
    members in rank order), a host alone another - then the canary (the first unit) and batches of `batch`
    units. Returns {units, hosts (the play's host order), serial (hosts per batch, Ansible's serial list)}."""
    units, seen = [], {}
    for rec in records:
        name = rec["host"]
        group = rec.get("serving_group") or {}
        key = ("group", group["name"]) if group.get("name") else ("host", name)
        if key not in seen:
            seen[key] = len(units)
            units.append({"name": key[1], "hosts": list(group.get("members") or [name]) if group else [name]})
    names = set(r["host"] for r in records)
    for u in units:
        u["hosts"] = [h for h in u["hosts"] if h in names]
    size = _batch_size(batch, len(units))
    batches = [units[:1]] + [units[i:i + size] for i in range(1, len(units), size)]
    serial = [sum(len(u["hosts"]) for u in b) for b in batches if b]
    return {"units": units, "hosts": [h for u in units for h in u["hosts"]], "serial": serial or [1],
            "batches": [[u["name"] for u in b] for b in batches if b]}


def problem(host, group, play_hosts, outside=()):
    """Why a member cannot serve in its group in this play: members missing from it (failed earlier, or left out by
    --limit), with the GPU hosts outside the run named when there are any; '' when none is missing. The one
    statement of that rule: the serving_group role (as the groups form) and ddtree_service's preflight (in its
    own play) both ask it."""
    missing = [m for m in (group or {}).get("members") or [] if m not in set(play_hosts or [])]
    if not missing:
        return ""
    msg = ("%s: serving group %s is deployed and served as one, but %s %s not in this run (failed earlier, or left out "
           "by --limit): fix %s and run again, with whole groups" % (
               host, group.get("name"), ", ".join(missing), "is" if len(missing) == 1 else "are",
               "it" if len(missing) == 1 else "them"))
    outside = sorted(set(outside or []))
    if outside:
        msg += " (GPU hosts outside this run: %s; a --limit must take whole groups)" % ", ".join(outside)
    return msg
