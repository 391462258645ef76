"""Unit tests import the collection from the working tree through the committed link, and
can run a module for real through ansible-playbook on localhost (run_module fixture)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))


@pytest.fixture
def run_module(tmp_path):
    """run_module(name, check=False, diff=False, **params) -> the registered result."""
    def run(name, check=False, diff=False, **params):
        out = tmp_path / "result.json"
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"ddtree.fleet." + name: params, "register": "r", "failed_when": False},
            {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out), "mode": "0600"},
             "check_mode": False},
        ]}]
        (tmp_path / "play.yml").write_text(json.dumps(play))
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        argv = ["ansible-playbook", str(tmp_path / "play.yml")] + (["--check"] if check else []) + (["--diff"] if diff else [])
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(out.read_text())
    return run
