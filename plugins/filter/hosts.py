# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fleet hosts reach each other (address, url_host), their records (host_records), and the fleet-wide ssh
trust the base role writes (fleet_trust, trust_block, peer_allow). Documented beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils import fanout
from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import address, is_ip, keep_unreached, records, url_host

# The comment that names the host on each authorized_keys line the base role manages.
KEY_TAG = "ddtree.fleet:"


def host_records(hostvars, hosts, keys=None):
    """The records of the given hosts (module_utils/fleet.py): the one place the fleet-level filters' inputs are
    read from a host's variables. keys: only those keys (and host, address)."""
    return records(hostvars, hosts, keys)


def fleet_trust(fleet, play_hosts=None):
    """The ssh trust every fleet host should carry: {'known_hosts': {host: line}, 'authorized_keys':
    {host: line}, 'missing': [hosts whose keys are nowhere], 'outside': [fleet hosts outside the play,
    set up by the base role (their base fact was gathered), whose blocks differ: written by delegation]}.

    fleet: the records of the fleet's hosts (host_records). For each, the freshest source wins: the keys this
    run read on it (a play host: user_pubkey / host_pubkey, base's outputs), else its base fact as gathered
    now (a host outside the play, gathered by delegation), else the lines another fleet host recorded for
    it (unreachable now). So a --limit run, or a host that failed, leaves the others' lines as they
    were, and hosts no longer in the fleet drop out."""
    play = set(play_hosts or [])
    by = dict((r["host"], r) for r in fleet or [])
    names = sorted(by)
    fresh = {"authorized_keys": {}, "known_hosts": {}}
    for h in names:
        r = by[h]
        base = r.get("base") or {}
        user = host = ""
        if h in play:
            user = r.get("user_pubkey") or ""
            host = r.get("host_pubkey") or ""
        if not (user and host):
            gathered = r.get("ssh_host_key")
            user = user or base.get("user_pubkey", "")
            host = host or ("ssh-ed25519 %s" % gathered if gathered else "")
        addr = r.get("address") or h
        if user:
            fresh["authorized_keys"][h] = "%s %s%s" % (" ".join(user.split()[:2]), KEY_TAG, h)
        if host:
            fresh["known_hosts"][h] = "%s %s" % (",".join([h] + ([addr] if addr != h else [])), " ".join(host.split()[:2]))
    out = {}
    for kind in ("authorized_keys", "known_hosts"):
        # a host whose keys were read nowhere in this run keeps the line another fleet host recorded for it
        recorded = {}
        for other in names:
            for h, line in (((by[other].get("base") or {}).get("trust") or {}).get(kind) or {}).items():
                recorded.setdefault(h, line)
        out[kind] = keep_unreached(names, fresh[kind], recorded, set(fresh[kind]))
    known, authorized = out["known_hosts"], out["authorized_keys"]
    missing = [h for h in names if h not in authorized or h not in known]
    outside = []
    for h in names:
        base = by[h].get("base") or {}
        if h not in play and base and (base.get("trust") or {}) != {"authorized_keys": authorized, "known_hosts": known}:
            outside.append(h)
    return {"known_hosts": known, "authorized_keys": authorized, "missing": missing, "outside": outside}


def trust_block(entries):
    """The managed block's text from {host: line}: one line per host, sorted by host."""
    return "\n".join(entries[h] for h in sorted(entries))


def peer_allow(clients, extra=None):
    """Who may connect to a seed's peer server: every address of the client hosts (clients: their records; from
    their gathered facts: the address they connect from is one of their interfaces), each one's address where
    that is an IP, and `extra` (CIDRs for NAT or hosts without facts). Sorted, unique."""
    out = set(extra or [])
    for r in clients or []:
        out.update(r.get("addresses") or [])
        a = r.get("address")
        if is_ip(a):
            out.add(str(a).strip("[]"))
    return sorted(out)


def warm_sources(me, hosts, play_hosts, groups, key_id, extra=None, outside=True, limit=4):
    """Where a host looks for a warm-start artefact of key_id (ddtree.fleet.warm_cache), in order: its chain in
    the fan-out tree (module_utils/fanout.py) over the play's hosts of the same key - its parent (a host that
    restores in this run too, marked wait: true: the module waits while that one fetches), the parent's
    parent, ..., then the hosts that hold one (their record's warm: ddtree_service_warm_key, the key step) -
    then the extra hosts, then (outside) the other hosts of me's inventory groups that are not in the play, by
    name: a --limit run of a replaced host still finds its old peers. hosts: the records (at least warm and
    address) of the play's hosts and of the others it may name. Each {name, address, wait}; at most limit of
    them that hold an artefact already (the parents come on top)."""
    by = dict((r["host"], r) for r in hosts or [])
    play = [h for h in play_hosts or [] if h in by]
    warm = dict((h, by[h].get("warm") or {}) for h in play)
    same = [h for h in play if warm[h].get("key_id") == key_id]
    holders = [h for h in same if warm[h].get("held")]
    parents = [h for h in fanout.chain(me, holders, [h for h in same if h not in holders]) if h not in holders]
    order = [h for h in holders if h != me] + [h for h in extra or [] if h != me]
    if outside:
        mine = [g for g, members in (groups or {}).items() if g not in ("all", "ungrouped") and me in (members or [])]
        near = set(h for g in mine for h in groups[g] or [])
        order += sorted(h for h in near if h != me and h not in play_hosts)
    if me in holders:
        parents = []
    else:  # the holders in the order of me's chain: its own branch's first
        chain = fanout.chain(me, holders, [h for h in same if h not in holders])
        order = [h for h in chain if h in holders] + [h for h in order if h not in chain]
    out, seen = [], set([me])
    for h in order:
        if h in seen or h not in by:
            continue
        seen.add(h)
        out.append({"name": h, "address": by[h]["address"], "wait": False})
    return [{"name": h, "address": by[h]["address"], "wait": True} for h in parents] + out[:int(limit)]


class FilterModule:
    def filters(self):
        return {"address": address, "fleet_trust": fleet_trust, "trust_block": trust_block, "url_host": url_host,
                "peer_allow": peer_allow, "host_records": host_records,
                "warm_sources": warm_sources}
