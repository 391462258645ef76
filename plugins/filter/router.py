# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang_router role's filter: the worker URLs of GPU hosts from their records (worker_urls;
documented in worker_urls.yml beside this file)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils.fleet import url_host
from ansible_collections.ddtree.fleet.plugins.module_utils.serving_groups import group_role


def worker_urls(records, instances):
    """http://<address>:<port> of every instance of the hosts whose records are given (module_utils/fleet.py): their
    ddtree_service_instances, else `instances` (common_instances). A host this run refused (preflight, serving group
    or admission gate) is left out. Of a serving group only rank 0 is a worker, and only while no member is refused."""
    records = list(records)
    roles = [group_role(r, records) for r in records]
    # a serving group is out when any member is (rank 0 alone cannot serve)
    out_groups = set(g for (g, _r), rec in zip(roles, records) if g and rec["refused"])
    out = []
    for rec, (group, rank) in zip(records, roles):
        if rec["refused"] or (group and (rank > 0 or group in out_groups)):
            continue
        addr = url_host(rec["address"])
        for inst in rec.get("instances") or instances:
            out.append("http://%s:%s" % (addr, inst["port"]))
    return out


class FilterModule:
    def filters(self):
        return {"worker_urls": worker_urls}
