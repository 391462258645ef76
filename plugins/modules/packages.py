#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: packages
short_description: Make sure Debian packages are installed, asking apt only for the missing ones
version_added: "0.2.0"
description:
  - The one way the collection's roles install packages. Reads dpkg's status of O(names) (one
    C(dpkg-query)); a package whose tool is on C(PATH) (O(tools)) counts as present too (ninja from pip,
    a compiler from a module system), so a host without a package mirror is not sent to apt for it.
  - Only when something is missing does the action run M(ansible.builtin.apt) for those packages (with
    O(update_cache) then), so a run with everything in place makes one quick module call and touches no
    network.
  - An action plugin over this module (the module reads dpkg; the action calls apt).
options:
  names:
    description: Debian package names.
    type: list
    elements: str
    required: true
  tools:
    description: Package name to a command; the package counts as present when the command is on C(PATH).
    type: dict
    default: {}
  update_cache:
    description: Update apt's index before installing (only when something is missing).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reports the packages it would install.
  diff_mode:
    support: none
    description: No diff; RV(missing) lists what is (or would be) installed.
  action:
    support: full
    description: The action runs this module on the host, then M(ansible.builtin.apt) when a package is missing.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: JIT build dependencies
  ddtree.fleet.packages:
    names: [python3-dev, gcc, g++, make, ninja-build]
    tools: {gcc: gcc, g++: g++, make: make, ninja-build: ninja}
    update_cache: true
"""

RETURN = r"""
missing:
  description: The packages that were missing (and were installed, or would be in check mode).
  returned: always
  type: list
  elements: str
present:
  description: The packages found installed (or whose tool is on PATH).
  returned: always
  type: list
  elements: str
"""

import shutil

from ansible.module_utils.basic import AnsibleModule


def installed(status_lines):
    """Package names dpkg reports as installed ('ii ' status) in `dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'` output."""
    out = set()
    for line in status_lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "ii":
            out.add(parts[-1].split(":")[0])
    return out


def main():
    module = AnsibleModule(argument_spec=dict(names=dict(type="list", elements="str", required=True),
                                              tools=dict(type="dict", default={}),
                                              update_cache=dict(type="bool", default=False)),
                           supports_check_mode=True)
    names, tools = module.params["names"], module.params["tools"] or {}
    have = set()
    if names:
        if module.get_bin_path("dpkg-query") is None:
            module.fail_json(msg="dpkg-query is not on PATH: this host is not Debian-based (the collection installs "
                                 "its packages with apt); install %s yourself" % ", ".join(names))
        # dpkg-query exits 1 when a name is unknown to dpkg: its lines for the others still count
        _rc, out, _err = module.run_command(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n"] + names)
        have = installed(out.splitlines())
    have |= set(p for p in names if p in tools and shutil.which(str(tools[p])))
    module.exit_json(changed=False, missing=[p for p in names if p not in have], present=[p for p in names if p in have])


if __name__ == "__main__":
    main()
