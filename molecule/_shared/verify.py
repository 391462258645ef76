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


def playbook(path, *extra, limit="all", inventory=None):
    """Run a playbook against the scenario's hosts (limit=None: no --limit, so plays on the implicit
    localhost run too; inventory: another inventory of the same hosts); .text is the output on one line (the yaml
    callback wraps long messages)."""
    argv = ["ansible-playbook", "-i", str(inventory or INVENTORY)] + (["--limit", limit] if limit else []) + [str(PROJECT / path), *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    # reports (fleet.md, bench.json) go with the scenario, not into the checkout
    env.setdefault("DDTREE_REPORT_DIR", str(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"))
    p = subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False)
    p.text = " ".join(p.stdout.split())
    log = os.environ.get("DDTREE_PLAYBOOK_LOG")
    if log:  # scripts/test reads it for deprecation warnings from this collection, with the scenario's log
        with open(log, "a") as f:
            f.write("### %s\n%s\n%s\n" % (" ".join(argv), p.stdout, p.stderr))
    return p


def names_only_inventory(tmp_path, groups):
    """The scenario's hosts as operators often write them: names only (no ansible_host), reached
    through an ssh_config that maps each name to its address. groups: {group: [host, ...]}.
    Returns the inventory path. The hosts themselves resolve the names (podman network aliases)."""
    import yaml  # molecule's dependency
    hosts = yaml.safe_load(Path(INVENTORY).read_text())["all"]["hosts"]
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(
        "Host %s\n  HostName %s\n  User %s\n  Port %s\n  IdentityFile %s\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n" % (
            name, h["ansible_host"], h.get("ansible_user", "root"), h.get("ansible_port", 22),
            h.get("ansible_private_key_file", PROJECT / ".work" / "ssh" / "id_ed25519"))
        for name, h in sorted(hosts.items())))
    inv = tmp_path / "names-only.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_ssh_common_args": "-F %s" % cfg},
        "children": dict((g, {"hosts": dict((h, None) for h in members)}) for g, members in groups.items())}}))
    return inv
