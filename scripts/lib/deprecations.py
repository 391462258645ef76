#!/usr/bin/env python3
"""The [DEPRECATION WARNING]s of an Ansible run's output that point into this collection.

    python3 scripts/lib/deprecations.py [--root DIR] LOG...   exit 1 (and print them) when there is one

ansible-core (2.19+) prints a deprecation as a block: the message line, then `Origin: PATH:LINE:COL`
where it knows the place (a task, a template, a variable), the source lines and a hint. A block points
into this collection when its Origin, or its text, names a file of this checkout (--root, default the
repository), an installed copy of the collection (`ansible_collections/ddtree/fleet/`) or the
collection by name (`ddtree.fleet`, e.g. a module or plugin of it that called a deprecated API).
Deprecations of other code (ansible-core's own, another collection's) are left to their owners.
scripts/test runs this over every molecule scenario's log; tests/unit uses find() on the output of
ansible-playbook and ansible-doc runs.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "[DEPRECATION WARNING]"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# what ends a block: another message, or the callback's next line
END = re.compile(r"^(\[[A-Z ]+\]|TASK \[|PLAY |RUNNING HANDLER|ok: |changed: |skipping: |fatal: |failed: |included: |"
                 r"\S+\s+: ok=|INFO |WARNING |ERROR )")
ORIGIN = re.compile(r"^Origin: (.+?)(?::\d+(?::\d+)?)?\s*$")


def blocks(text):
    """Each deprecation of an output: {"message", "origin" (a path or None), "text" (the whole block)}."""
    lines = ANSI.sub("", text).splitlines()
    out = []
    i = 0
    while i < len(lines):
        at = lines[i].find(MARK)
        if at < 0:
            i += 1
            continue
        block = [lines[i][at:]]
        i += 1
        while i < len(lines) and len(block) < 60 and not END.match(lines[i]) and MARK not in lines[i]:
            block.append(lines[i])
            i += 1
        origin = next((m.group(1) for m in map(ORIGIN.match, block) if m), None)
        out.append({"message": block[0][len(MARK):].lstrip(": ").strip(), "origin": origin,
                    "text": "\n".join(block).rstrip()})
    return out


def ours(block, root=ROOT):
    """Whether a deprecation block points into this collection."""
    root = os.path.realpath(root).rstrip("/") + "/"
    origin = block["origin"] or ""
    if origin and (os.path.realpath(origin).startswith(root) or origin.startswith(root)):
        return True
    hay = origin + "\n" + block["text"]
    return root in hay or "ansible_collections/ddtree/fleet/" in hay or "ddtree.fleet" in hay


def find(text, root=ROOT):
    """The deprecation blocks of an output that point into this collection, each once."""
    seen, found = set(), []
    for b in blocks(text):
        key = (b["message"], b["origin"])
        if ours(b, root) and key not in seen:
            seen.add(key)
            found.append(b)
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args(argv)
    found = []
    for path in a.logs:
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue  # a scenario whose tests ran no playbook leaves none
        found += [(path, b) for b in find(text, a.root)]
    for path, b in found:
        print("%s:\n%s\n" % (path, b["text"]))
    if found:
        print("%d deprecation warning(s) from this collection (fix the code at each Origin)" % len(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
