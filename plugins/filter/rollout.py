# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ddtree_rollout role's filter: which instances a deploy changed (rollout_changed). The rollout's units
are the serving groups' (rollout_units, filters/groups.py). Documented beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def rollout_changed(planned, status):
    """The instances whose current release a deploy changed: `planned` is ddtree_service_planned (the plan's rows:
    name, port, current release before the deploy), `status` is ddtree_service_status after it."""
    now = dict((s.get("name"), s.get("release")) for s in status or [])
    return [p for p in planned or [] if now.get(p.get("name")) and now[p["name"]] != p.get("current")]


class FilterModule:
    def filters(self):
        return {"rollout_changed": rollout_changed}
