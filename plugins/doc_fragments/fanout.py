# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Waiting for a parent in the fan-out tree (plugins/module_utils/fanout.py, docs/scale.md)."""

    DOCUMENTATION = r"""
options:
  wait_grace:
    description: Seconds a C(wait=true) source may have neither a copy nor a transfer under way before it is passed over.
    type: int
    default: 60
  wait_stall:
    description: Seconds a C(wait=true) source's transfer may stand still before it is passed over.
    type: int
    default: 120
"""
