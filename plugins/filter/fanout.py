# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a host pulls an artefact from in the fan-out tree (fanout_sources). Documented beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils import fanout as fo


def fanout_sources(me, holders, needing, records, root_fanout=fo.ROOT_FANOUT, fanout=fo.FANOUT, addresses=None):
    """me's chain in the fan-out tree (module_utils/fanout.py) over `holders` (hosts that hold the artefact now) and
    `needing` (the hosts that fetch it in this run, in play order): its parent, the parent's parent, ... (each a host
    that fetches in this run too: wait true), then the holders, its own branch's first (wait false). Each
    {name, address, wait}; the address from the host's record (ddtree.fleet.host_records: ddtree.fleet.address),
    or from `addresses` ({host: address}) where that names it. [] for a holder."""
    holders = [h for h in holders or [] if h]
    needing = [h for h in needing or [] if h]
    addr = dict((r.get("host"), r.get("address")) for r in records or [] if hasattr(r, "get"))
    addr.update(addresses or {})
    out = []
    for h in fo.chain(me, holders, needing, root_fanout, fanout):
        out.append({"name": h, "address": str(addr.get(h) or h), "wait": h not in holders})
    return out


class FilterModule:
    def filters(self):
        return {"fanout_sources": fanout_sources}
