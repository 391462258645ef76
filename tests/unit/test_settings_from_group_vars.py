"""The fleet-level jobs are roles, so their settings are role defaults: a value in the inventory's group_vars
takes effect (and -e still wins over it). Shown for real with ansible-playbook on local hosts: the rollout's
batch size in the plan it hands the next play (its serial list), and the monitoring stage's target directory
in the files it writes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1].parent
GPU = ["g%d" % i for i in range(1, 9)]


def inventory(tmp_path, gpu_vars=None, all_vars=None):
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    lines = ["[gpu_hosts]"] + GPU + ["[routers]", "r1", "[fleet:children]", "gpu_hosts", "routers",
                                     "[all:vars]", "ansible_connection=local", "ansible_python_interpreter=" + sys.executable]
    (inv / "hosts.ini").write_text("\n".join(lines) + "\n")
    for name, doc in (("gpu_hosts", gpu_vars), ("all", all_vars)):
        if doc:
            (inv / "group_vars" / (name + ".yml")).write_text(json.dumps(doc))
    return inv


def play(tmp_path, inv, playbook, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
               DDTREE_REPORT_DIR=str(tmp_path / "reports"))
    p = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.ini"), str(playbook)] + list(extra), cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    return p


PLAN = [{"hosts": "gpu_hosts", "gather_facts": False, "tasks": [
    {"name": "Plan", "ansible.builtin.include_role": {"name": "ddtree.fleet.ddtree_rollout", "tasks_from": "plan"}},
    {"name": "Keep the plan", "ansible.builtin.copy": {"content": "{{ hostvars['localhost'].ddtree_rollout_plan | to_json }}",
                                                       "dest": "{{ out }}", "mode": "0600"},
     "run_once": True, "delegate_to": "localhost"}]}]


@pytest.mark.parametrize("gpu_vars, extra, serial", [
    (None, [], [1, 2, 2, 2, 1]),                                   # the role default: 25% of 8 units
    ({"ddtree_rollout_batch": 3}, [], [1, 3, 3, 1]),               # group_vars
    ({"ddtree_rollout_batch": 3}, ["-e", "ddtree_rollout_batch=7"], [1, 7]),  # -e over group_vars
])
def test_the_rollout_batch_size_comes_from_group_vars(tmp_path, gpu_vars, extra, serial):
    inv = inventory(tmp_path, gpu_vars)
    pb = tmp_path / "plan.yml"
    pb.write_text(json.dumps(PLAN))
    play(tmp_path, inv, pb, "-e", "out=%s" % (tmp_path / "plan.json"), *extra)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["serial"] == serial and plan["hosts"] == GPU and plan["max_fail_percentage"] == 0


def test_a_bad_batch_size_is_refused_before_anything_changes(tmp_path):
    inv = inventory(tmp_path, {"ddtree_rollout_batch": "lots"})
    pb = tmp_path / "plan.yml"
    pb.write_text(json.dumps(PLAN))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    p = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.ini"), str(pb), "-e", "out=%s" % (tmp_path / "plan.json")],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert p.returncode != 0 and 'ddtree_rollout_batch must be a number of units' in p.stdout and '"lots"' in p.stdout
    assert not (tmp_path / "plan.json").exists()


def test_the_monitoring_directory_comes_from_group_vars(tmp_path):
    where = tmp_path / "file_sd"
    inv = inventory(tmp_path, all_vars={"ddtree_monitoring_dir": str(where), "ddtree_monitoring_exporters": [],
                                        "ddtree_monitoring_queue_alert": 7})
    play(tmp_path, inv, ROOT / "playbooks" / "monitoring.yml")
    sglang = json.loads((where / "ddtree-sglang.json").read_text())
    assert sorted(g["labels"]["host"] for g in sglang) == GPU and sglang[0]["targets"] == ["g1:30000"]
    assert "> 7" in (where / "ddtree-fleet.rules.yml").read_text()  # the alert threshold from group_vars too
    assert not (tmp_path / "reports" / "prometheus").exists()  # not the default place
