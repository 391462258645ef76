#!/usr/bin/env python3
"""Repeated task calls in the roles' and playbooks' YAML task files (duplicates reads no YAML).

    python3 scripts/lib/task_repeats.py [--min-args N] [--window N]

Two scans, each line a place to look:
  call    two tasks that call the same module with N (default 5) or more identical arguments (name: value, as
          written; what a YAML merge key brings in is written once, where its anchor is), or include the same role or
          tasks file with N or more identical vars - one call written twice (a task file, module_defaults)
  window  N (default 6) consecutive lines that stand again, the same to the letter once indentation is folded
          (comments and blank lines passed over), in another place of the task files; a window with the line of
          an include (the entry point's name) is left out, its vars are not
Exit status 1 when either finds anything.
"""
import argparse
import glob
import json
import os
import sys
from itertools import combinations

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYWORDS = {"name", "when", "tags", "loop", "loop_control", "register", "become", "become_user", "vars", "notify",
            "changed_when", "failed_when", "check_mode", "no_log", "delegate_to", "run_once", "environment", "until",
            "retries", "delay", "async", "poll", "block", "rescue", "always", "listen", "diff", "throttle", "args",
            "any_errors_fatal", "ignore_errors", "delegate_facts", "ignore_unreachable", "module_defaults", "apply"}


INCLUDE_LINES = ("ansible.builtin.include_role:", "ansible.builtin.include_tasks:", "ansible.builtin.import_tasks:",
                 "ansible.builtin.import_role:", "ansible.builtin.import_playbook:")


HEADER_KEYS = ("name:", "tasks_from:", "file:", "apply:", "delegate_to:", "tags:")


def task_files():
    return sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
                  + glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml"))
                  + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + [os.path.join(ROOT, "site.yml")])


def walk(tasks):
    for t in tasks or []:
        if isinstance(t, dict):
            yield t
            for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from walk(t.get(k))


def written(node):
    """A mapping node's pairs as written: a merge key (<<: *anchor) is left out (it is written where its anchor is)."""
    return [(k.value, v) for k, v in node.value if k.value != "<<"]


def plain(node):
    return json.dumps(yaml.safe_load(yaml.serialize(node)), sort_keys=True)


def calls():
    out = []
    for path in task_files():
        with open(path) as f:
            root = yaml.compose(f)
        for t in walk_nodes(root):
            pairs = dict(written(t))
            mods = [k for k in pairs if k not in KEYWORDS and "." in k]
            if len(mods) != 1:
                continue
            mod, body = mods[0], pairs[mods[0]]
            name = plain(pairs["name"]).strip('"') if "name" in pairs else "?"
            if mod.startswith(("ansible.builtin.include", "ansible.builtin.import")):
                # an include: what it includes and its vars are its arguments
                args = set(("vars." + k, plain(v)) for k, v in written(pairs["vars"])) if "vars" in pairs else set()
                args.add(("include", plain(body)))
            elif isinstance(body, yaml.MappingNode):
                args = set((k, plain(v)) for k, v in written(body))
            else:
                continue
            out.append((os.path.relpath(path, ROOT), name, mod, args))
    return out


def walk_nodes(node):
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            if isinstance(item, yaml.MappingNode):
                yield item
                for k, v in written(item):
                    if k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                        yield from walk_nodes(v)


def repeated_calls(min_args):
    found = []
    for a, b in combinations(calls(), 2):
        if a[2] == b[2]:
            same = a[3] & b[3]
            include = a[2].startswith(("ansible.builtin.include", "ansible.builtin.import"))
            same_target = any(k == "include" for k, _v in same)
            if len(same) - include >= min_args and (not include or same_target):
                found.append("call %s: %s (%s) ~ %s (%s): %d identical arguments (%s)" % (
                    a[2], a[0], a[1], b[0], b[1], len(same), ", ".join(sorted(k for k, _v in same))))
    return found


def repeated_windows(size):
    lines = []
    for path in task_files():
        header = False
        with open(path) as f:
            for n, line in enumerate(f, 1):
                text = " ".join(line.split())
                # an include's own lines (what it includes) are its name, not a repeated call: its vars are compared
                header = text.startswith(INCLUDE_LINES) or (header and text.startswith(HEADER_KEYS))
                if text and not header and not text.startswith("#") and text not in ("---", "-"):
                    lines.append((os.path.relpath(path, ROOT), n, text))
    seen, found = {}, []
    for i in range(len(lines) - size + 1):
        window = lines[i:i + size]
        if len(set(p for p, _n, _t in window)) > 1:
            continue
        key = tuple(t for _p, _n, t in window)
        if key in seen:
            p0, n0 = seen[key]
            found.append("window %s:%d ~ %s:%d (%d lines: %s ...)" % (p0, n0, window[0][0], window[0][1], size, key[0][:60]))
        else:
            seen[key] = (window[0][0], window[0][1])
    return found


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-args", type=int, default=5)
    ap.add_argument("--window", type=int, default=6)
    args = ap.parse_args(argv)
    found = repeated_calls(args.min_args) + repeated_windows(args.window)
    print("\n".join(found) if found else "no repeated task call (%d task files)" % len(task_files()))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
