#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: day2_request
short_description: Check a day-two request as data and apply the guard rails over the action log
version_added: "0.1.0"
description:
  - An action plugin, run on the controller by the first play of C(ddtree.fleet.day2) (roles/ddtree_day2).
  - Reads the request variables C(ddtree_day2_action), C(ddtree_day2_host), C(ddtree_day2_instance),
    C(ddtree_day2_reason) and C(ddtree_day2_dry_run) as they were given, never templated (an alert's label is
    untrusted and may hold Jinja), and checks type, form and size; the host must be one of O(gpu_hosts).
  - Then the guard rails, from the action log O(log) (one JSON object per line; unreadable lines are skipped and
    counted) - one action per host per O(min_interval_s) (C(clear) is exempt), at most O(max_out) hosts out of
    the gateway at once (drained hosts, plus the one this action takes out), and a drained host takes only C(clear).
  - Changes nothing.
options:
  log:
    description: The action log on the controller (C(<report dir>/day2/actions.jsonl)); missing means empty.
    type: path
  gpu_hosts:
    description: The inventory hosts an action may name (group C(gpu_hosts)).
    type: list
    elements: str
    required: true
  min_interval_s:
    description: Seconds between two actions on one host.
    type: int
    default: 600
  max_out:
    description: Hosts out of the gateway at once, a number or a percentage of O(gpu_hosts) (as C(ddtree_rollout_batch)).
    type: raw
    default: 1
  defaults:
    description: Values of the request variables that are not set (e.g. C(dry_run)).
    type: dict
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Check the request
  ddtree.fleet.day2_request:
    log: reports/day2/actions.jsonl
    gpu_hosts: "{{ groups['gpu_hosts'] }}"
    min_interval_s: 600
    max_out: 25%
  register: req
"""

RETURN = r"""
request:
  description: The request as plain data (action, host, instance, reason, dry_run); a refused value is quoted (its repr, cut).
  returned: always
  type: dict
problems:
  description: What is wrong with the request, each naming the variable, the value and the fix.
  returned: always
  type: list
  elements: str
outcome:
  description: C(proceed), C(would) (a dry run that passed), or C(refused) (bad input or a guard rail).
  returned: always
  type: str
detail:
  description: Why it was refused, in words; empty otherwise.
  returned: always
  type: str
state:
  description: Each host's day-two state as the log tells it (drain, fallback per instance, with since and reason).
  returned: always
  type: dict
started:
  description: Seconds since the epoch when the check ran (the action's seconds count from it).
  returned: always
  type: float
log_unparsed:
  description: Lines of the log that were not a JSON object.
  returned: always
  type: int
"""
