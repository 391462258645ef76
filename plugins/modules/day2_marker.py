#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: day2_marker
short_description: Read, set or clear a host's day-two markers (fallback, drain)
version_added: "0.1.0"
description:
  - The markers a day-two action (roles/ddtree_day2) leaves on a GPU host so that later deploys honour it until
    C(clear) - a drain (ddtree_service's preflight refuses the host) and a fallback per instance (ddtree_service
    serves that instance without speculation). One file, C(<path>/markers.json), root's, written atomically.
  - Read back before every use and checked - a regular file (not a link) of root's, in a directory only root can
    change, at most 64 KiB, a version 1 object whose times, reasons and instance names have their form. Anything
    else fails, naming the file, what is wrong and the fix.
options:
  path:
    description: The directory of the markers (C(common_prefix)/day2).
    type: path
    required: true
  state:
    description: C(read) returns them; C(present) adds O(kind) (an existing marker keeps its time and reason);
      C(absent) removes them all (the C(clear) action).
    type: str
    choices: [read, present, absent]
    default: read
  kind:
    description: The marker C(present) adds.
    type: str
    choices: [drain, fallback]
  instances:
    description: The instances a fallback marks.
    type: list
    elements: str
    default: []
  since:
    description: When the action was taken (UTC, C(YYYY-MM-DDTHH:MM:SSZ)).
    type: str
  reason:
    description: Why (the alert's name and summary), stored as data, at most 300 characters.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Says what it would change and changes nothing.
  diff_mode:
    support: full
    description: The marker file before and after.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Mark the instance main as fallen back
  ddtree.fleet.day2_marker:
    path: /opt/ddtree/day2
    state: present
    kind: fallback
    instances: [main]
    since: "2026-12-08T10:00:00Z"
    reason: "SGLangAcceptLengthUnderFloor: accept length 1.02 under 1.5"
"""

RETURN = r"""
markers:
  description: The markers after the task (C(drain) null or since and reason; C(fallback) instance to since and reason).
  returned: always
  type: dict
  sample: {"drain": null, "fallback": {"main": {"since": "2026-12-08T10:00:00Z", "reason": "accept length collapsed"}}}
clear_command:
  description: The command that clears a host's markers (C(HOST) stands for its inventory name), for messages.
  returned: always
  type: str
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import day2
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, root_only

EMPTY = {"drain": None, "fallback": {}}


def read(path):
    """The markers in path (EMPTY when there is none); BadMarker or UnsafePath naming what is wrong."""
    root_only(path, "the day-two marker directory")
    name = os.path.join(path, day2.MARKER_NAME)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return dict(EMPTY)
    except OSError as e:
        raise day2.BadMarker("it cannot be opened (%s; a symbolic link is refused)" % e)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise day2.BadMarker("it is not a regular file of root's that only root can write (uid %d, mode %04o)"
                                 % (st.st_uid, stat.S_IMODE(st.st_mode)))
        return day2.parse_markers(f.read(day2.MARKER_MAX_BYTES + 1))


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True),
                           state=dict(type="str", choices=["read", "present", "absent"], default="read"),
                           kind=dict(type="str", choices=["drain", "fallback"]),
                           instances=dict(type="list", elements="str", default=[]),
                           since=dict(type="str"), reason=dict(type="str", default="")),
        required_if=[("state", "present", ("kind", "since"))],
        supports_check_mode=True)
    p = module.params
    name = os.path.join(p["path"], day2.MARKER_NAME)
    try:
        before = read(p["path"])
        after = before
        if p["state"] == "present":
            for inst in p["instances"]:
                if not day2.INSTANCE_RE.match(inst):
                    module.fail_json(msg="instance %s is not an instance name" % day2.shown(inst))
            if day2.parse_time(p["since"]) is None or len(p["reason"]) > day2.REASON_MAX:
                module.fail_json(msg="since must be a UTC time (got %s) and reason at most %d characters"
                                 % (day2.shown(p["since"]), day2.REASON_MAX))
            after = day2.apply_marker(before, p["kind"], p["instances"], p["since"], p["reason"])
        elif p["state"] == "absent":
            after = dict(EMPTY)
    except (day2.BadMarker, UnsafePath) as e:
        module.fail_json(msg="the day-two markers %s are not usable: %s. Look at the file; remove it (rm %s) or run the "
                         "clear action (%s) to start again without them" % (name, e, name, day2.CLEAR_COMMAND))
    changed = after != before
    if changed and not module.check_mode:
        if p["state"] == "absent":
            os.unlink(name)
        else:
            if not os.path.isdir(p["path"]):
                os.makedirs(p["path"], 0o755)
            atomic_write(name, day2.render_markers(after), mode=0o644)
    diff = {"before": day2.render_markers(before) if before != EMPTY else "",
            "after": day2.render_markers(after) if after != EMPTY else "", "before_header": name, "after_header": name}
    module.exit_json(changed=changed, markers=after, diff=diff, clear_command=day2.CLEAR_COMMAND)


if __name__ == "__main__":
    main()
