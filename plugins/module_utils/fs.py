# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filesystem helpers shared by the modules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def nearest_existing(path):
    """The path itself, or its nearest existing parent (statvfs needs an existing path)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
