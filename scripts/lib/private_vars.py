#!/usr/bin/env python3
"""Private variables of a role (``__<role>_*``) that cross files, and how deep its includes nest.

    python3 scripts/lib/private_vars.py [ROLE...]      one line per role, then each crossing variable

A private variable is *set* in a file where it is a set_fact key, a register, a loop_var, a task's or
include's ``vars`` key, or a top-level key of the role's vars/defaults; it *crosses* when it is also named
in another file of the role (a read there). Comments are ignored.

The include depth is the longest chain of task files that include_tasks/import_tasks nest, counted in files, from
tasks/main.yml and every entry point of the role (meta/argument_specs.yml): main -> instance -> instance_files is 3.
An include_role of an entry point starts a chain of its own (it is a call, validated by that entry point's
argument_specs, with no include vars), so it is not counted as nesting.
"""
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")


def walk(tasks):
    for t in tasks or []:
        if isinstance(t, dict):
            yield t
            for k in ("block", "rescue", "always"):
                yield from walk(t.get(k))


def role_files(role):
    base = os.path.join(ROOT, "roles", role)
    for sub in ("tasks", "vars", "defaults", "templates"):
        d = os.path.join(base, sub)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            yield sub, os.path.join(sub, name), os.path.join(d, name)


def strip_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def analyse(role):
    pat = re.compile(r"(?<![\w.])(__%s_[a-z0-9_]+)" % re.escape(role))
    sets, names = {}, {}
    includes = {}
    for sub, rel, path in role_files(role):
        with open(path) as f:
            text = f.read()
        names[rel] = set(pat.findall(strip_comments(text)))
        if not path.endswith(".yml"):
            continue
        doc = yaml.safe_load(text)
        here = set()
        if sub in ("vars", "defaults") and isinstance(doc, dict):
            here |= set(doc)
        if sub == "tasks" and isinstance(doc, list):
            for t in walk(doc):
                sf = t.get("ansible.builtin.set_fact")
                here |= set(sf) if isinstance(sf, dict) else set()
                here |= {t["register"]} if t.get("register") else set()
                here |= set((t.get("vars") or {}))
                lv = (t.get("loop_control") or {}).get("loop_var")
                here |= {lv} if lv else set()
                for k in INCLUDES:
                    if k in t:
                        target = t[k]["file"] if isinstance(t[k], dict) else t[k]
                        includes.setdefault(rel, []).append(os.path.join(os.path.dirname(rel), target))
        for n in here:
            if pat.fullmatch(n):
                sets.setdefault(n, set()).add(rel)
    private = set().union(*names.values())
    crossing = {}
    for n in sorted(private):
        where = {rel for rel, found in names.items() if n in found}
        if where - sets.get(n, set()) and sets.get(n):
            crossing[n] = (sorted(sets.get(n, set())), sorted(where - sets.get(n, set())))

    def depth(rel, seen=()):
        if rel in seen:
            return 0
        return 1 + max([depth(c, seen + (rel,)) for c in includes.get(rel, [])], default=0)

    entries = ["tasks/main.yml"]
    spec = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    if os.path.exists(spec):
        with open(spec) as f:
            entries += ["tasks/%s.yml" % e for e in (yaml.safe_load(f) or {}).get("argument_specs", {}) if e != "main"]
    deepest = max(depth(e) for e in entries if os.path.exists(os.path.join(ROOT, "roles", role, e)))
    return private, crossing, deepest


def main(argv):
    roles = argv or sorted(r for r in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", r, "tasks")))
    for role in roles:
        private, crossing, deepest = analyse(role)
        print("%s: %d private variables, %d cross files, includes nest %d deep" % (role, len(private), len(crossing), deepest))
        if argv:
            for n, (set_in, read_in) in crossing.items():
                print("  %s: set in %s, read in %s" % (n, ", ".join(set_in), ", ".join(read_in)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
