"""One slice of an AWX/AAP sliced job is refused before anything changes (roles/common): the gateway's workers,
the rollout's batches, serving groups and the report are the whole fleet's, and a slice sees only its own hosts.
Run for real with ansible-playbook on local hosts, AWX's extra variables given as AWX gives them (-e)."""
import json
import os
import subprocess

from test_settings_from_group_vars import ROOT, inventory


def run(tmp_path, workflow_name, *extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    where = tmp_path / "file_sd"
    inv = inventory(tmp_path, all_vars={"ddtree_monitoring_dir": str(where), "ddtree_monitoring_exporters": []})
    awx = {"awx_job_id": 42, "awx_job_launch_type": "workflow", "awx_workflow_job_id": 41,
           "awx_workflow_job_name": workflow_name, "awx_job_template_name": "ddtree site"}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
               DDTREE_REPORT_DIR=str(tmp_path / "reports"))
    p = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.ini"), str(ROOT / "playbooks" / "monitoring.yml"),
                        "-e", json.dumps(awx)] + list(extra), cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return where, p


def test_a_slice_of_a_sliced_job_is_refused_before_anything_changes(tmp_path):
    where, p = run(tmp_path, "ddtree site")
    assert p.returncode != 0, p.stdout[-3000:]
    assert "one slice of the sliced job" in p.stdout and "ddtree site" in p.stdout and "job_slice_count to 1" in p.stdout
    assert not where.exists()


def test_a_workflow_of_its_own_and_the_switch_pass(tmp_path):
    where, p = run(tmp_path / "a", "nightly fleet workflow")
    assert p.returncode == 0 and (where / "ddtree-sglang.json").is_file(), p.stdout[-3000:]
    where, p = run(tmp_path / "b", "ddtree site", "-e", "common_refuse_job_slices=false")
    assert p.returncode == 0 and (where / "ddtree-sglang.json").is_file(), p.stdout[-3000:]
