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
    """run_module(name, check=False, diff=False, **params) -> the registered result (failed: true on failure).
    workdir: where its play and result go (default tmp_path; give each of several concurrent runs its own)."""
    def run(name, check=False, diff=False, workdir=None, **params):
        here = Path(workdir or tmp_path)
        here.mkdir(parents=True, exist_ok=True)
        out = here / "result.json"
        # a failure is caught by rescue, so the result keeps failed: true and the message
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"block": [{"ddtree.fleet." + name: params, "register": "r"}],
             "rescue": [{"ansible.builtin.set_fact": {"r": "{{ ansible_failed_result }}"}}]},
            {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out), "mode": "0600"},
             "check_mode": False},
        ]}]
        (here / "play.yml").write_text(json.dumps(play))
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        argv = ["ansible-playbook", str(here / "play.yml")] + (["--check"] if check else []) + (["--diff"] if diff else [])
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        # the play is the test's and the module this collection's: any deprecation is ours to fix
        assert "[DEPRECATION WARNING]" not in p.stdout + p.stderr, p.stdout + p.stderr
        return json.loads(out.read_text())
    return run


def sglang_wheel():
    """The pinned sglang wheel from the controller's wheelhouse (scripts/test downloads it)."""
    house = os.environ.get("DDTREE_WHEELHOUSE", "")
    wheels = sorted(Path(house).glob("sglang-0.5.23-*.whl")) if house else []
    assert wheels, "DDTREE_WHEELHOUSE (%r) has no sglang 0.5.23 wheel: run through scripts/test" % house
    return wheels[0]


@pytest.fixture(scope="session")
def sglang_site(tmp_path_factory):
    """A pristine copy of the wheel's files, unpacked like site-packages (read it, don't change it)."""
    import zipfile
    dest = tmp_path_factory.mktemp("sglang-site")
    with zipfile.ZipFile(sglang_wheel()) as z:
        z.extractall(dest)
    return dest


@pytest.fixture
def sglang_venv(tmp_path, sglang_site):
    """A fake venv (lib/pythonX.Y/site-packages) holding a writable copy of the wheel's sglang."""
    import shutil
    site = tmp_path / "venv" / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    site.mkdir(parents=True)
    shutil.copytree(sglang_site / "sglang", site / "sglang")
    shutil.copytree(next(sglang_site.glob("sglang-*.dist-info")), site / "sglang-0.5.23.dist-info")
    (tmp_path / "venv" / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "venv" / "bin" / "python")
    return tmp_path / "venv", site
