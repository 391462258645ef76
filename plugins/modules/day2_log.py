#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: day2_log
short_description: Append one day-two action to the action log
version_added: "0.1.0"
description:
  - Appends one JSON object (one line) to the action log (C(<report dir>/day2/actions.jsonl)), with one write to a
    file opened for appending (no link followed), creating the directory. The fields - C(time), C(action),
    C(host), C(instance), C(reason), C(dry_run), C(outcome), C(detail), C(seconds) (and C(members) of a serving
    group) - are data, written JSON-escaped.
  - Run on the controller (C(delegate_to) localhost).
options:
  path:
    description: The log file.
    type: path
    required: true
  request:
    description: The request (action, host, instance, reason, dry_run), as M(ddtree.fleet.day2_request) returns it.
    type: dict
    required: true
  outcome:
    description: How it ended.
    type: str
    choices: [done, would, refused, failed]
    required: true
  detail:
    description: What was done, or why not.
    type: str
    default: ""
  seconds:
    description: Seconds the action took.
    type: float
    default: 0
  members:
    description: The hosts it acted on when more than the named host (a serving group).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Writes nothing in check mode.
  diff_mode:
    support: none
    description: An append has no diff to show.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Record the action
  ddtree.fleet.day2_log:
    path: reports/day2/actions.jsonl
    request: "{{ req.request }}"
    outcome: done
  delegate_to: localhost
"""

RETURN = r"""
line:
  description: The line appended (without its newline).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import day2


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True), request=dict(type="dict", required=True),
                           outcome=dict(type="str", choices=list(day2.OUTCOMES), required=True),
                           detail=dict(type="str", default=""), seconds=dict(type="float", default=0),
                           members=dict(type="list", elements="str", default=[])),
        supports_check_mode=True)
    p = module.params
    line = day2.log_entry(p["request"], p["outcome"], p["detail"], p["seconds"], members=p["members"])
    if not module.check_mode:
        d = os.path.dirname(p["path"])
        if d and not os.path.isdir(d):
            os.makedirs(d, 0o755)
        fd = os.open(p["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    module.exit_json(changed=not module.check_mode, line=line)


if __name__ == "__main__":
    main()
