"""Verify serving_group on three replayed B300 hosts: the group formed from the facts (name order, rank 0's
init address), the host that serves alone, and a --limit to one member refused with the fix."""
import json
import os
import subprocess
from pathlib import Path

import pytest

testinfra_hosts = ["ansible://sg-b300-1", "ansible://sg-b300-2", "ansible://sg-b300-3"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def member(host):
    return json.loads(host.file("/etc/ddtree-serving-group.json").content_string)


def test_the_first_two_form_one_group_and_the_third_serves_alone(host):
    name = host.backend.get_hostname()
    got = member(host)
    if name == "sg-b300-3":
        assert got == {}
        return
    assert got["name"] == "b300-2x8-1" and got["members"] == ["sg-b300-1", "sg-b300-2"] and got["nodes"] == 2
    assert got["rank"] == ["sg-b300-1", "sg-b300-2"].index(name) and got["rank0"] == "sg-b300-1"
    assert got["init_addr"].endswith(":20000") and "formed" in got["reason"]


@pytest.mark.parametrize("limit", ["sg-b300-2"])
def test_a_limit_to_one_member_is_refused_with_the_fix(host, limit):
    if host.backend.get_hostname() != "sg-b300-1":
        pytest.skip("one run is enough")
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    p = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", limit,
                        str(PROJECT / "playbooks" / "gpu_facts.yml")], cwd=PROJECT, env=env, capture_output=True,
                       text=True, check=False)
    assert p.returncode != 0, p.stdout[-2000:]
    out = " ".join(p.stdout.split())  # the yaml result format folds a long message over lines
    assert "sg-b300-2: profile b300 asks for nodes: 2" in out
    assert "(GPU hosts outside this run: sg-b300-1, sg-b300-3; a --limit must take whole groups)" in out, out[-3000:]
