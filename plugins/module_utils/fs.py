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


def atomic_write(path, data, mode=0o644):
    """Write text or bytes to path so readers see the old file or the new one, never a partial one."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
