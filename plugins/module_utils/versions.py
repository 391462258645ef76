# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version strings as comparable tuples: the one parser of the collection (drivers, CUDA, glibc, Python)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


def version_tuple(v):
    """'12.9' -> (12, 9); '580.65.06' -> (580, 65, 6); '2.36-9' -> (2, 36, 9); '' -> ()."""
    return tuple(int(x) for x in re.findall(r"\d+", str(v)))
