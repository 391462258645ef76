# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node serving groups (SGLang --nnodes/--node-rank/--dist-init-addr): the filters over
module_utils/serving_groups.py. Documented in serving_groups.yml, serving_group_of.yml,
serving_group_env.yml, serving_group_problem.yml and rollout_units.yml beside this file; docs/groups.md."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.ddtree.fleet.plugins.module_utils import serving_groups as sg


class FilterModule:
    def filters(self):
        return {"serving_groups": sg.serving_groups, "serving_group_of": sg.serving_group_of,
                "serving_group_env": sg.serving_group_env, "serving_group_problem": sg.problem,
                "rollout_units": sg.rollout_units}
