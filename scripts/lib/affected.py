#!/usr/bin/env python3
"""Which molecule scenarios and unit tests a change touches, found from the code (no hand-kept table).

    python3 scripts/lib/affected.py [--base REV] [--files F...] [--json]

The repository is read as a graph of references:
  scenario  molecule/<s>/ (its playbooks and tests) -> the playbooks, roles, modules and filters
            its files name (ddtree.fleet.<name>, role: ..., playbook paths such as site.yml)
  playbook  -> the playbooks and task files it imports or includes, the roles, modules, filters
  role      roles/<r>/** -> the modules, filters and roles its files name
  module    plugins/modules/<m>.py (and plugins/action/<m>.py) -> the module_utils it imports
  filter    plugins/filter/<f>.py (and the filter names it defines) -> module_utils, other filter files
  module_utils  -> the module_utils it imports
A changed file marks its node (a role's file marks the role, profiles/ the nvidia_facts role that
reads them); a scenario is chosen when a changed node is reachable from it, and the path is the
reason. Shared test machinery (tests/doubles, tests/playbooks, tests/image, tests/podman, tests/sglang_cpu,
molecule/_shared, scripts/, .config/, requirements/, ansible.cfg, galaxy.yml, meta/) and any file
this script cannot place choose every scenario. Unit tests: every test file under tests/unit that
names a changed module, filter, module_utils or role, and changed test files themselves.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVERYTHING = ("tests/doubles/", "tests/playbooks/", "tests/image/", "tests/podman/", "tests/fixtures/",
              "molecule/_shared/", "scripts/", ".config/", "requirements/", "ansible.cfg", "galaxy.yml", "tests/sglang_cpu/",
              "meta/", ".collections/", "tests/venv/", "tests/cuda/", "tests/router/", "tests/ansible-test/")
NOTHING = ("docs/", "README.md", "CHANGELOG.md", "benchmarks/", ".ci/", ".github/", "LICENSE", ".gitignore",
           "tests/device/", "tests/fresh/", ".yamllint", ".ansible-lint", "ee/", "cli/", "inventories/b",
           "inventories/h", "inventories/mixed", "inventories/rtx", "reports/")
FQCN = re.compile(r"ddtree\.fleet\.([a-z_][a-z0-9_]*)")
PATHS = re.compile(r"""([A-Za-z0-9_./-]+\.(?:yml|yaml|j2))""")
MU_IMPORT = re.compile(r"plugins\.module_utils(?:\.([a-z_0-9]+)\s+import|\s+import\s+([a-z_0-9, ]+?)(?:\s+as\s+\w+)?$)", re.M)
FILTER_IMPORT = re.compile(r"plugins\.filter\.([a-z_0-9]+)\s+import")


def read(rel):
    try:
        with open(os.path.join(ROOT, rel), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tracked():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.exists(os.path.join(ROOT, f))]


class Graph:
    def __init__(self, files):
        self.files = files
        self.roles = sorted(set(f.split("/")[1] for f in files if f.startswith("roles/") and f.count("/") >= 2))
        self.modules = sorted(os.path.basename(f)[:-3] for f in files if f.startswith("plugins/modules/") and f.endswith(".py"))
        self.mus = sorted(os.path.basename(f)[:-3] for f in files if f.startswith("plugins/module_utils/") and f.endswith(".py"))
        self.filter_files = sorted(os.path.basename(f)[:-3] for f in files if f.startswith("plugins/filter/") and f.endswith(".py"))
        self.filter_of = {}  # filter name -> filter file
        for ff in self.filter_files:
            text = read("plugins/filter/%s.py" % ff)
            body = text[text.find("class FilterModule"):]
            for name in re.findall(r'"([a-z_0-9]+)"\s*:', body):
                self.filter_of[name] = ff
        self.scenarios = sorted(set(f.split("/")[1] for f in files if f.startswith("molecule/") and f.endswith("/molecule.yml")
                                    and not f.startswith("molecule/_")))
        self.edges = {}
        for s in self.scenarios:
            self.add("scenario:" + s, [f for f in files if f.startswith("molecule/%s/" % s)])
        for r in self.roles:
            self.add("role:" + r, [f for f in files if f.startswith("roles/%s/" % r)])
        for f in files:
            if f.startswith("playbooks/") or f in ("site.yml",) or (f.startswith("tests/playbooks/") and f.endswith(".yml")):
                self.add("playbook:" + f, [f])
        for m in self.modules:
            self.add("module:" + m, ["plugins/modules/%s.py" % m] + [f for f in files if f == "plugins/action/%s.py" % m])
        for u in self.mus:
            self.add("mu:" + u, ["plugins/module_utils/%s.py" % u])
        for ff in self.filter_files:
            self.add("filter:" + ff, ["plugins/filter/%s.py" % ff])

    def refs(self, rel, text):
        """Nodes that one file's text refers to. Plugins refer only through their Python imports (their
        documentation names other plugins and playbooks without using them); roles through FQCNs;
        scenarios and playbooks through FQCNs and playbook paths too."""
        out = set()
        plugin = rel.startswith("plugins/")
        if rel.startswith("roles/"):
            # a role uses what its tasks, defaults, vars and templates name, and its meta/main.yml dependencies;
            # its README, argument_specs and outputs describe other roles without using them, and comments only talk
            parts = rel.split("/")
            if rel.endswith(".md") or (len(parts) > 3 and parts[2] == "meta" and parts[3] != "main.yml"):
                return out
            if rel.endswith((".yml", ".yaml", ".j2")):
                text = re.sub(r"(^|\s)#.*$", "", text, flags=re.M)
        for name in ([] if plugin else FQCN.findall(text)):
            if name in self.roles:
                out.add("role:" + name)
            if name in self.modules:
                out.add("module:" + name)
            if name in self.filter_of:
                out.add("filter:" + self.filter_of[name])
        if not plugin and not rel.startswith("roles/") and rel.endswith((".yml", ".yaml", ".py", ".j2")):
            code = text if rel.endswith(".py") else re.sub(r"(^|\s)#.*$", "", text, flags=re.M)  # not comments
            for p in PATHS.findall(code):
                for cand in (os.path.normpath(os.path.join(os.path.dirname(rel), p)), os.path.normpath(p)):
                    if cand in self.file_set and (cand.startswith("playbooks/") or cand == "site.yml"
                                                  or cand.startswith("tests/playbooks/")):
                        out.add("playbook:" + cand)
            for m in re.findall(r"role:\s*([a-z_0-9]+)\s*$", text, re.M):
                if m in self.roles:
                    out.add("role:" + m)
        if rel.endswith(".py"):
            for a, b in MU_IMPORT.findall(text):
                for name in ([a] if a else [x.strip() for x in b.split(",")]):
                    if name in self.mus:
                        out.add("mu:" + name)
            for name in FILTER_IMPORT.findall(text):
                if name in self.filter_files:
                    out.add("filter:" + name)
        return out

    @property
    def file_set(self):
        if not hasattr(self, "_fs"):
            self._fs = set(self.files)
        return self._fs

    def add(self, node, files):
        deps = self.edges.setdefault(node, set())
        for f in files:
            deps |= self.refs(f, read(f))
        deps.discard(node)

    def node_of(self, f):
        """The node a changed file marks; 'everything', 'nothing', 'unit' or None (unknown)."""
        if f.startswith(EVERYTHING):
            return "everything"
        if f.startswith(NOTHING):
            return "nothing"
        if f.startswith("tests/unit/"):
            return "unit"
        if f.startswith("profiles/"):
            return "role:nvidia_facts"
        if f.startswith("inventories/lab/"):
            return "scenario:fleet"  # the fleet scenario links the lab's group_vars
        parts = f.split("/")
        if f.startswith("molecule/") and len(parts) > 2:
            return "scenario:" + parts[1]
        if f.startswith("roles/") and len(parts) > 2:
            return "role:" + parts[1]
        if f.startswith(("plugins/modules/", "plugins/action/")):  # an action runs as its module's name
            return "module:" + os.path.basename(f)[:-3]
        if f.startswith("plugins/module_utils/"):
            return "mu:" + os.path.basename(f)[:-3]
        if f.startswith("plugins/filter/"):
            return "filter:" + os.path.basename(f).rsplit(".", 1)[0] if f.endswith(".py") else "nothing"
        if f.startswith("plugins/doc_fragments/"):
            return "nothing"
        if f.startswith("playbooks/") or f == "site.yml":
            return "playbook:" + f
        return None

    def path_to(self, start, targets):
        """Shortest reference path from start to a node of targets (BFS), or None."""
        seen, queue = {start: None}, [start]
        while queue:
            n = queue.pop(0)
            if n in targets:
                path = []
                while n is not None:
                    path.append(n)
                    n = seen[n]
                return list(reversed(path))
            for d in sorted(self.edges.get(n, ())):
                if d not in seen:
                    seen[d] = n
                    queue.append(d)
        return None


def affected(files, graph=None):
    """{'scenarios': {name: reason}, 'unit': [test files] | 'all', 'marked': {file: node}}."""
    g = graph or Graph(tracked())
    marked = dict((f, g.node_of(f)) for f in files)
    every = [f for f, n in marked.items() if n in ("everything", None)]
    nodes = set(n for n in marked.values() if n and ":" in n)
    scenarios = {}
    if every:
        why = "; ".join("%s (%s)" % (f, "shared test machinery" if marked[f] else "not placed: everything, to be safe")
                        for f in every[:5])
        for s in g.scenarios:
            scenarios[s] = why
    else:
        for s in g.scenarios:
            start = "scenario:" + s
            path = g.path_to(start, nodes)
            if path:
                changed = [f for f, n in marked.items() if n == path[-1]]
                scenarios[s] = " -> ".join(path) + " (changed: %s)" % ", ".join(sorted(changed)[:3])
    unit = set(f for f in files if f.startswith("tests/unit/") and f.endswith(".py") and os.path.basename(f).startswith("test_"))
    if every:
        unit = "all"
    else:
        names = set()
        for n in nodes:
            kind, name = n.split(":", 1)
            if kind in ("module", "mu", "filter", "role"):
                names.add(name)
        for f in g.files:
            # (test_affected.py names every part of the collection as data; it runs when scripts/ changes)
            if f.startswith("tests/unit/") and os.path.basename(f).startswith("test_") and f.endswith(".py") \
                    and not f.endswith("test_affected.py"):
                text = read(f)
                if any(re.search(r"\b%s\b" % re.escape(n), text) for n in names):
                    unit.add(f)
                    continue
                if any(n.startswith("role:") for n in nodes) and "role_contracts" in f:
                    unit.add(f)
        unit = sorted(unit)
    return {"scenarios": scenarios, "unit": unit, "marked": marked}


def changed_files(base):
    out = subprocess.run(["git", "diff", "--name-only", base], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    extra = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    return sorted(set(out.splitlines()) | set(extra.splitlines()))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="")
    ap.add_argument("--files", nargs="*")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON (the reasons go to stderr)")
    a = ap.parse_args(argv)
    files = a.files if a.files is not None else changed_files(a.base or "HEAD")
    plan = affected(files)
    err = sys.stderr if a.json else sys.stdout
    err.write("changed files: %d\n" % len(files))
    for s, why in sorted(plan["scenarios"].items()):
        err.write("  molecule %s: %s\n" % (s, why))
    if not plan["scenarios"]:
        err.write("  no molecule scenario exercises these files\n")
    err.write("  unit tests: %s\n" % (plan["unit"] if plan["unit"] == "all" else " ".join(plan["unit"]) or "none"))
    if a.json:
        print(json.dumps(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
