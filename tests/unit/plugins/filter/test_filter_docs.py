"""Every filter the collection defines has documentation that ansible-doc shows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import importlib

ROOT = Path(__file__).resolve().parents[4]


def test_every_filter_is_documented():
    names = set()
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        mod = importlib.import_module("ansible_collections.ddtree.fleet.plugins.filter." + path.stem)
        names |= set(mod.FilterModule().filters())
    names = sorted(names)
    # every sidecar documents a filter that exists
    assert sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")) == sorted(
        n for n in names if (ROOT / "plugins" / "filter" / (n + ".yml")).exists())
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", "filter", "--json"]
                       + ["ddtree.fleet." + n for n in names], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    docs = json.loads(p.stdout)
    for n in names:
        doc = docs["ddtree.fleet." + n]["doc"]
        assert doc["short_description"] and doc["description"], n
        assert docs["ddtree.fleet." + n]["examples"], n
