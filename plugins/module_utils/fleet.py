# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fleet-level filters share: a host's record (the one place that reads a host's variables:
its declared role outputs and the inventory's conventions), its address, and the rule that keeps the
last run's entries of the hosts this run did not reach (--limit, failed hosts).

Filters take records, never hostvars: ``hostvars | ddtree.fleet.host_records(hosts)`` builds them
(docs/data_flow.md lists each key and the role output or inventory variable it comes from)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# The one definition of a host's address for the other hosts (and the router, the peers, the
# report): ddtree_address when the inventory sets it, else ansible_host, else the inventory name.
ADDRESS_VARS = ("ddtree_address", "ansible_host")

# A host's record: key -> (variable, what sets it). Each variable is a declared output of a role
# (roles/<role>/meta/outputs.yml) or an inventory input of one (meta/argument_specs.yml); the contract
# test (tests/unit/test_role_contracts.py) checks that, and docs/data_flow.md lists them.
RECORD = {
    "profile": ("nvidia_facts_profile", "nvidia_facts"),
    "profile_overrides": ("nvidia_facts_profile_overrides", "nvidia_facts (inventory)"),
    "nvidia_refused": ("nvidia_facts_refused", "nvidia_facts"),
    "serving_group": ("serving_group_member", "serving_group"),
    "serving_refused": ("serving_group_refused", "serving_group"),
    "pin": ("common_serving_group", "common (inventory)"),
    "pin_rank": ("common_serving_rank", "common (inventory)"),
    "instances": ("ddtree_service_instances", "ddtree_service (inventory)"),
    "status": ("ddtree_service_status", "ddtree_service"),
    "service_refused": ("ddtree_service_refused", "ddtree_service"),
    "api_key": ("ddtree_service_api_key", "ddtree_service (inventory)"),
    "service_profile": ("ddtree_service_profile", "ddtree_service (inventory)"),
    "exporters": ("ddtree_monitoring_exporters", "ddtree_monitoring (inventory)"),
    "exporters_found": ("ddtree_monitoring_found", "ddtree_monitoring"),
    "router_port": ("sglang_router_port", "sglang_router (inventory)"),
    "router_metrics_port": ("sglang_router_prometheus_port", "sglang_router (inventory)"),
    "user_pubkey": ("base_user_pubkey", "base"),
    "host_pubkey": ("base_host_pubkey", "base"),
    "warm": ("ddtree_service_warm_key", "ddtree_service"),
}

# What a record takes from the host's gathered facts (besides nvidia): key -> what it is. The facts may have been
# gathered by delegation (a host outside the play), so the base role's local fact is read from ansible_facts.local
# first, then from ansible_local.
FACT_KEYS = {
    "base": "the base role's local fact (ansible_local.ddtree_base)",
    "ssh_host_key": "ansible_facts.ssh_host_key_ed25519_public",
    "addresses": "ansible_facts.all_ipv4_addresses and all_ipv6_addresses, link-local ones left out",
}


def hv_get(hv, key, default=None):
    """A variable of a host, or default (also where the value is an undefined template)."""
    try:
        v = hv.get(key, default)
    except Exception:  # pylint: disable=broad-except
        return default
    return default if v is None else v


def address(hv):
    """The address other hosts use to reach the host whose variables are given."""
    for k in ADDRESS_VARS:
        v = hv_get(hv, k)
        if v not in (None, ""):
            return str(v)
    return str(hv_get(hv, "inventory_hostname", ""))


def url_host(addr):
    """The address as the host part of a URL (an IPv6 literal in brackets)."""
    a = str(addr)
    return "[%s]" % a if ":" in a and not a.startswith("[") else a


def is_ip(value):
    try:
        ipaddress.ip_address(str(value).strip("[]"))
        return True
    except ValueError:
        return False


def natural(name):
    """b300-2 before b300-10: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def parse_nodes(raw):
    """The hosts a profile's serving group spans (profile key nodes): a whole number >= 1, else 0 (invalid)."""
    if raw is None or raw == "":
        return 1
    text = str(raw).strip()
    return int(text) if text.isdigit() and int(text) >= 1 else 0


def _truthy(value):
    return str(value).lower() in ("true", "yes", "1")


def _facts(hv):
    facts = hv_get(hv, "ansible_facts", {}) or {}
    return facts if hasattr(facts, "get") else {}


def _fact(hv, key):
    """A key of FACT_KEYS, read from the host's gathered facts."""
    facts = _facts(hv)
    if key == "base":
        local = facts.get("local") or hv_get(hv, "ansible_local", {}) or {}
        return dict((local.get("ddtree_base") if hasattr(local, "get") else None) or {})
    if key == "ssh_host_key":
        return facts.get("ssh_host_key_ed25519_public") or ""
    return [a.split("%")[0] for k in ("all_ipv4_addresses", "all_ipv6_addresses") for a in (facts.get(k) or [])
            if not a.lower().startswith("fe80")]


def record(hv, keys=None):
    """A host's record: its name and address, its GPU facts and group names, every key of RECORD and FACT_KEYS.
    keys: only these keys of RECORD and FACT_KEYS (besides host and address), for a filter that reads a few of
    many hosts' records."""
    out = {"host": str(hv_get(hv, "inventory_hostname", "")), "address": address(hv)}
    if keys is not None:
        for key in keys:
            if key != "api_key":  # the key itself never travels in a record
                out[key] = _fact(hv, key) if key in FACT_KEYS else hv_get(hv, RECORD[key][0], None)
        return out
    nvidia = _facts(hv).get("nvidia") or {}
    out.update({"nvidia": dict(nvidia), "facts_read": bool(nvidia), "group_names": list(hv_get(hv, "group_names", []) or [])})
    for key, (var, _src) in RECORD.items():
        out[key] = hv_get(hv, var, None)
    for key in FACT_KEYS:
        out[key] = _fact(hv, key)
    out["refused"] = any(_truthy(out[k]) for k in ("nvidia_refused", "serving_refused", "service_refused"))
    out["api_key_set"] = out.pop("api_key") not in (None, "")
    return out


def records(hostvars, hosts, keys=None):
    """The records of the given inventory hosts (a host not in hostvars gets a record from its name alone)."""
    return [record(hostvars[h] if h in hostvars else {"inventory_hostname": h}, keys) for h in hosts]


def keep_unreached(hosts, fresh, previous, reached):
    """The rule for state that is the fleet's, not the run's: per host of `hosts`, its fresh entry when this
    run reached it, else its previous entry (as the last run wrote it) where there is one, else the fresh one.
    So --limit, and hosts that failed earlier, leave every other host's entry as it was."""
    out = {}
    for h in hosts:
        if h not in reached and h in (previous or {}):
            out[h] = previous[h]
        elif h in fresh:
            out[h] = fresh[h]
    return out
