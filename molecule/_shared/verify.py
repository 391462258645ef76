"""Helpers for the testinfra verify tests: run a scenario's playbook again with ansible-playbook
(what an operator runs) and reach other hosts of the scenario."""
import os
import subprocess
from pathlib import Path

import testinfra

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]


def other(name):
    return testinfra.get_host("ansible://" + name, ansible_inventory=INVENTORY)


def playbook(path, *extra, limit="all"):
    """Run a playbook against the scenario's hosts (limit=None: no --limit, so plays on the implicit
    localhost run too); .text is the output on one line (the yaml
    callback wraps long messages)."""
    argv = ["ansible-playbook", "-i", INVENTORY] + (["--limit", limit] if limit else []) + [str(PROJECT / path), *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    # reports (fleet.md, bench.json) go with the scenario, not into the checkout
    env.setdefault("DDTREE_REPORT_DIR", str(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"))
    p = subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False)
    p.text = " ".join(p.stdout.split())
    return p
