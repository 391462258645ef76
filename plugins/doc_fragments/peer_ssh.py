# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The host-to-host ssh options (plugins/module_utils/peer_ssh.py)."""

    DOCUMENTATION = r"""
options:
  ssh_user:
    description: User on the other host (the base role's host-to-host trust).
    type: str
    default: ddtree
  ssh_identity:
    description: Private key of the local user that connects.
    type: path
    default: /var/lib/ddtree/.ssh/id_ed25519
  ssh_options:
    description: Extra ssh options (C(-o Key=Value) pairs as separate list items).
    type: list
    elements: str
    default: []
"""
