# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Exact, reversible patching of an installed package: a strict unified-diff applier and the planner.

A series is a list of patches, each a unified diff over files relative to site-packages with the
sha256 of every file before and after it. Nothing here writes; the module writes what plan() returns.
No fuzz, no offsets: a hunk applies where it says or the plan fails, and every result is checked
against the series' "after" hash, so a patch either produces exactly the reviewed bytes or nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

# The stamp a patched venv carries, relative to the venv (common_patch_stamp in roles/common says the same).
STAMP = ".ddtree/sglang-patch.json"
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    pass


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def parse_diff(text):
    """Unified diff text -> {path: [hunk, ...]}; a hunk is (old_start, [(op, line_bytes)])."""
    files, path, hunk = {}, None, None
    lines = text.encode("utf-8").splitlines(True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- "):
            nxt = lines[i + 1] if i + 1 < len(lines) else b""
            if not nxt.startswith(b"+++ "):
                raise PatchError("'---' line %d is not followed by '+++'" % (i + 1))
            name = nxt[4:].rstrip(b"\r\n").split(b"\t")[0].decode("utf-8")
            if name == "/dev/null":
                raise PatchError("file creation or deletion is not supported (line %d)" % (i + 2))
            path = name[2:] if name.startswith(("a/", "b/")) else name
            files.setdefault(path, [])
            hunk = None
            i += 2
            continue
        m = HUNK.match(line.decode("utf-8", "replace"))
        if m:
            if path is None:
                raise PatchError("hunk before any file header (line %d)" % (i + 1))
            hunk = (int(m.group(1)), [])
            files[path].append(hunk)
        elif hunk is not None and line[:1] in (b" ", b"-", b"+"):
            hunk[1].append((line[:1].decode(), line[1:]))
        elif hunk is not None and line.startswith(b"\\"):
            # "\ No newline at end of file": the previous line has no newline
            op, prev = hunk[1][-1]
            hunk[1][-1] = (op, prev.rstrip(b"\n"))
        elif hunk is not None and line in (b"\n", b"\r\n"):
            hunk[1].append((" ", line))  # an empty context line some editors strip to nothing
        i += 1
    if not files:
        raise PatchError("no file in the diff")
    return files


def apply_hunks(data, hunks, reverse=False):
    """Apply hunks to bytes exactly; reverse=True undoes them. Raises PatchError with the line."""
    src = data.splitlines(True)
    out, pos = [], 0
    delta = 0
    for start, body in hunks:
        old = [ln for op, ln in body if op in (" ", "+" if reverse else "-")]
        new = [ln for op, ln in body if op in (" ", "-" if reverse else "+")]
        # forward: old_start counts in the original; reverse: in the patched file (shifted by delta)
        at = max(start - 1, 0) + (delta if reverse else 0)
        if src[at:at + len(old)] != old:
            raise PatchError("hunk at line %d does not match" % (at + 1))
        if at < pos:
            raise PatchError("overlapping hunks at line %d" % (at + 1))
        out.extend(src[pos:at])
        out.extend(new)
        pos = at + len(old)
        delta += len([1 for op, _ln in body if op == "+"]) - len([1 for op, _ln in body if op == "-"])
    out.extend(src[pos:])
    return b"".join(out)


def chains(patches):
    """{path: [(patch_name, before, after), ...]} in series order; checks that the hashes chain."""
    out = {}
    for p in patches:
        for f in p["files"]:
            steps = out.setdefault(f["path"], [])
            if steps and steps[-1][2] != f["before"]:
                raise PatchError("patches %s and %s both change %s but %s's 'before' is not %s's 'after': "
                                 "the series is not consistent for the patches selected"
                                 % (steps[-1][0], p["name"], f["path"], p["name"], steps[-1][0]))
            steps.append((p["name"], f["before"], f["after"]))
    return out


def pristine(path, data, steps, diffs):
    """Bytes of path before the series, from its current bytes at any point of its chain."""
    h = sha256(data)
    if h == steps[0][1]:
        return data
    for k in range(len(steps) - 1, -1, -1):
        if h == steps[k][2]:
            for name, before, _after in reversed(steps[:k + 1]):
                data = apply_hunks(data, diffs[name][path], reverse=True)
                if sha256(data) != before:
                    raise PatchError("reverting %s from %s gives %s, not the expected %s" % (name, path, sha256(data), before))
            return data
    return None


def plan(current, stamp, backups, patches, diffs, present):
    """What every file must become.

    current: {path: bytes or None} for every path of the series and of the stamp.
    stamp: the stamp written by the last apply (or None); backups: {path: bytes} saved by it.
    patches: the selected patches in order; diffs: {patch_name: {path: hunks}}.
    Returns {path: (pristine_bytes, desired_bytes)}; raises PatchError naming the file on drift.
    """
    steps_by_path = chains(patches) if present else {}
    stamped = (stamp or {}).get("files", {})
    out = {}
    for path in sorted(set(steps_by_path) | set(stamped)):
        data = current.get(path)
        if data is None:
            raise PatchError("%s: missing from the installed package" % path)
        base = None
        if path in stamped:
            info = stamped[path]
            if sha256(data) != info["after"]:
                raise PatchError("%s: drifted since it was patched: sha256 is %s, the stamp says %s (before: %s); "
                                 "reinstall the venv or restore the file, then run again"
                                 % (path, sha256(data), info["after"], info["before"]))
            base = backups.get(path)
            if base is None or sha256(base) != info["before"]:
                raise PatchError("%s: the saved original is missing or does not hash to %s" % (path, info["before"]))
        if path in steps_by_path:
            steps = steps_by_path[path]
            if base is None:
                base = pristine(path, data, steps, diffs)
            if base is None or sha256(base) != steps[0][1]:
                found = sha256(base if base is not None else data)
                raise PatchError("%s: sha256 %s is neither the series' 'before' (%s) nor its 'after' (%s); the file "
                                 "was changed outside the series or the series is for another build"
                                 % (path, found, steps[0][1], steps[-1][2]))
            want = base
            for name, before, after in steps:
                want = apply_hunks(want, diffs[name][path])
                if sha256(want) != after:
                    raise PatchError("%s: patch %s gives sha256 %s, the series says %s" % (path, name, sha256(want), after))
            out[path] = (base, want)
        else:
            out[path] = (base, base)
    return out
