# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filesystem helpers shared by the modules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat


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
    if os.path.lexists(tmp):
        os.unlink(tmp)  # a killed run's, or a link someone planted: never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def switch_link(link, target):
    """Point the symlink `link` at `target` with one rename: readers see the old target or the new one, never none."""
    tmp = "%s.tmp-%d" % (link, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def write_progress(path, done, total, secs, rate=None, finished=False):
    """The progress document a background job rewrites for ddtree.fleet.job_wait (bytes, total, seconds,
    rate_bps, eta_s, finished); rate defaults to done / secs. No path: nothing is written."""
    if not path:
        return
    rate = (done / secs if secs > 0 else 0) if rate is None else rate
    atomic_write(path, json.dumps({"bytes": done, "total": total, "seconds": round(secs, 1), "rate_bps": int(rate),
                                   "eta_s": int((total - done) / rate) if rate > 0 and total > done else 0,
                                   "finished": finished}))


# Where each external tool a module runs comes from, for the message when it is missing.
TOOL_SOURCES = {
    "aria2c": "Debian/Ubuntu package aria2 (the model_fetch role installs it on hosts that fetch)",
    "zstd": "package zstd (in the base role's base_packages)",
    "tar": "package tar (part of every Debian/Ubuntu base system)",
    "ssh": "package openssh-client (in the base role's base_packages)",
    "nginx": "package nginx or nginx-light (the model_fetch role installs it on a seed that serves peers)",
    "nvcc": "a CUDA toolkit (the cuda_toolkit role; cuda_toolkit_home for one installed elsewhere)",
}


def require_tools(module, *names):
    """{name: path} of the tools, or fail naming the missing one and what provides it (instead of
    a bare '[Errno 2] No such file or directory' from the first run of it)."""
    found = {}
    for name in names:
        path = module.get_bin_path(name)
        if not path:
            module.fail_json(msg="%s is not installed on this host (not on PATH %s); it comes from %s. Install it, "
                                 "or run the role that provides it first." % (
                                     name, os.environ.get("PATH", ""), TOOL_SOURCES.get(name, "its package")))
        found[name] = path
    return found


class UnsafePath(ValueError):
    pass


def safe_relpath(name, what="a file name"):
    """`name` when it is a safe relative path (POSIX, normalised, no '..', not absolute, no drive,
    no backslash, NUL or control characters, not empty); else UnsafePath naming it. Every name that
    comes from outside (hub listings, manifests, patch series, archive members) passes here before
    it is used as a path."""
    if not isinstance(name, str) or not name:
        raise UnsafePath("%s is empty or not a string: %r" % (what, name))
    bad = [c for c in name if ord(c) < 32 or ord(c) == 127]
    if bad or "\\" in name:
        raise UnsafePath("%s %r holds a control character or a backslash" % (what, name))
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafePath("%s %r is absolute" % (what, name))
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePath("%s %r is not a normalised relative path (empty, '.' or '..' parts)" % (what, name))
    return name


def inside(root, name, what="a file name"):
    """root/name after safe_relpath, checked again after symlinks: the real path of the nearest
    existing part must stay under the real root. Returns the joined path."""
    safe_relpath(name, what)
    path = os.path.join(root, name)
    if not os.path.isdir(root):
        return path  # nothing on disk yet that a link could redirect
    real_root = os.path.realpath(root)
    probe = path
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    real = os.path.realpath(probe)  # a dangling link counts too: it would be written through
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise UnsafePath("%s %r leads out of %s (to %s, through a symbolic link)" % (what, name, root, real))
    return path


def _ancestors(path):
    """path and every directory above it, deepest first."""
    out = [path]
    while os.path.dirname(out[-1]) != out[-1]:
        out.append(os.path.dirname(out[-1]))
    return out


def root_only(path, what="the directory"):
    """The real path of the directory `path` when nobody but root can change it or any directory above it: each
    is owned by root and writable by no one else (a group-writable one only for group root; a sticky directory
    such as /tmp only above the last one), and a symbolic link on the way is root's, in such a directory. Else
    UnsafePath naming the directory, its owner and mode, and the fix. A directory that does not exist yet is
    judged by its nearest existing parent (root creates the rest). Root follows no link and takes no path in a
    tree this holds for: no other user can plant or swap one."""
    lexical = nearest_existing(path)
    for chain in (_ancestors(lexical), _ancestors(os.path.realpath(lexical))):
        for n, d in enumerate(chain):
            st = os.lstat(d)
            if stat.S_ISLNK(st.st_mode) and st.st_uid == 0:
                continue  # root's link in a directory checked below; its target is the real chain's
            sticky_ok = n > 0 and st.st_mode & stat.S_ISVTX
            writable = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or (writable and not sticky_ok):
                raise UnsafePath("%s %s: %s is owned by uid %d (gid %d, mode %04o), so a user other than root can "
                                 "change what is there while root works in it; make it a directory of root's that "
                                 "only root can write (chown root:root %s && chmod go-w %s; the base role does so "
                                 "for the prefix)" % (what, path, d, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), d, d))
    return os.path.realpath(path)
