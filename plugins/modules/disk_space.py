#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: disk_space
short_description: Free and total space of the filesystem that holds (or will hold) a path
version_added: "0.1.0"
description:
  - Runs statvfs on the path, or on its nearest existing parent when the path does not exist
    yet (a model or venv directory about to be created). Reads only.
options:
  path:
    description: The path to check.
    type: path
    required: true
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Space for the model
  ddtree.fleet.disk_space:
    path: /opt/ddtree/models
  register: space
"""

RETURN = r"""
checked:
  description: The existing path that statvfs ran on.
  returned: always
  type: str
  sample: /opt
bytes_free:
  description: Bytes available to unprivileged users.
  returned: always
  type: int
bytes_total:
  description: Size of the filesystem in bytes.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import nearest_existing


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", required=True)), supports_check_mode=True)
    checked = nearest_existing(module.params["path"])
    st = os.statvfs(checked)
    module.exit_json(changed=False, checked=checked, bytes_free=st.f_bavail * st.f_frsize,
                     bytes_total=st.f_blocks * st.f_frsize)


if __name__ == "__main__":
    main()
