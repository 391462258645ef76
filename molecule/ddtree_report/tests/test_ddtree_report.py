"""Verify ddtree_report: the files it wrote on the controller, each instance's parallelism (two TP4
instances are reported as such, not as the profile's TP8), and the last report's row kept under --limit."""
import json
import os
import subprocess
from pathlib import Path

testinfra_hosts = ["ansible://rep-rtx"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
REPORT = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"


def rows(where=REPORT):
    return {r["host"]: r for r in json.loads((where / "fleet.json").read_text())["hosts"]}


def test_the_report_files_are_written():
    md = (REPORT / "fleet.md").read_text()
    assert "| rep-b300 |" in md and "| rep-rtx |" in md
    html = (REPORT / "fleet.html").read_text()
    assert "<html" in html and "topology-rep-b300" in html  # self-contained, with pictures


def test_each_instance_is_reported_with_its_own_parallelism():
    r = rows()
    assert r["rep-b300"]["parallelism"] == "a tp4 ep1 dp1 (GPUs 0-3); b tp4 ep1 dp1 (GPUs 4-7)"
    assert [(i["name"], i["gpus"], i["parallelism"]["tp"]) for i in r["rep-b300"]["instances"]] == [
        ("a", [0, 1, 2, 3], 4), ("b", [4, 5, 6, 7], 4)]
    assert r["rep-rtx"]["parallelism"] == "tp8 ep8 dp1" and r["rep-rtx"]["instances"][0]["gpus"] == list(range(8))
    assert "a tp4 ep1 dp1 (GPUs 0-3)" in (REPORT / "fleet.md").read_text()


def test_a_limited_run_keeps_the_other_hosts_row():
    where = REPORT.parent / "reports-limit"
    where.mkdir(exist_ok=True)
    (where / "fleet.json").write_text((REPORT / "fleet.json").read_text())
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), DDTREE_REPORT_DIR=str(where))
    p = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", "rep-rtx",
                        str(PROJECT / "playbooks" / "facts.yml")],
                       cwd=PROJECT, env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout[-3000:]
    r = rows(where)
    assert r["rep-b300"]["from_previous_report"] and r["rep-b300"]["parallelism"].startswith("a tp4")
    assert not r["rep-rtx"]["from_previous_report"]
