"""scripts/test changed: the scenarios and unit tests a change touches, found from the code, checked on
real changes of this repository's history (the file lists are recorded here; where the clone has
the commit, they are checked against it)."""
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("affected", ROOT / "scripts" / "lib" / "affected.py")
affected = importlib.util.module_from_spec(spec)
spec.loader.exec_module(affected)

GRAPH = affected.Graph(affected.tracked())
ALL = set(GRAPH.scenarios)

# (commit, subject, files): real commits of this repository
HISTORY = {
    "one role": ("82944b3", "sglang_router: pip only when the installed version differs",
                 ["roles/sglang_router/tasks/main.yml"]),
    "one module_utils file": ("7632002", "sglang_flags: write the contract cache with module_utils.fs.atomic_write",
                              ["plugins/module_utils/sglang_flags.py"]),
    "scripts/": ("fd2215c", "scripts: one ensure_wheels for the three wheelhouses",
                 ["scripts/lib/common.sh", "tests/playbooks/source_venv.yml"]),
    "a module and its role": ("8380cda", "cuda_toolkit: the tool venv only when the prefix is built",
                              ["plugins/modules/cuda_pip_prefix.py", "roles/cuda_toolkit/tasks/install_pip.yml",
                               "roles/cuda_toolkit/tasks/publish.yml", "tests/unit/plugins/modules/test_cuda_modules.py"]),
    "a test double": ("2f8099f", "tests/doubles: pace the stand-in's token stream against its start",
                      ["tests/doubles/sglang_server.py"]),
}


def plan(files):
    return affected.affected(files, GRAPH)


@pytest.mark.parametrize("case", sorted(HISTORY))
def test_recorded_file_lists_are_the_commits(case):
    sha, _subject, files = HISTORY[case]
    p = subprocess.run(["git", "show", "--name-only", "--format=", sha], cwd=ROOT, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        pytest.skip("%s is not in this clone (shallow)" % sha)
    assert sorted(p.stdout.split()) == sorted(files)


def test_one_role_runs_its_scenario_and_the_fleet():
    p = plan(HISTORY["one role"][2])
    assert set(p["scenarios"]) == {"sglang_router", "fleet"}
    assert "playbook:playbooks/router.yml -> role:sglang_router" in p["scenarios"]["sglang_router"]
    assert p["unit"] == ["tests/unit/test_role_contracts.py"]


def test_module_utils_file_runs_the_scenarios_of_the_roles_whose_modules_import_it():
    p = plan(HISTORY["one module_utils file"][2])
    # sglang_flags is imported by the sglang_flags and sglang_patch modules and the sglang filter,
    # which the sglang_patch and ddtree_service roles use (sglang_router too: its real servers run under ddtree_service)
    assert {"sglang_patch", "ddtree_service", "fleet", "sglang_router"} <= set(p["scenarios"])
    assert not {"base", "model_fetch", "venv_stream", "cuda_toolkit"} & set(p["scenarios"])
    assert "role:ddtree_service" in p["scenarios"]["sglang_router"]
    assert "mu:sglang_flags" in p["scenarios"]["sglang_patch"]
    assert "tests/unit/plugins/module_utils/test_sglang_flags.py" in p["unit"]


def test_a_module_and_its_role():
    p = plan(HISTORY["a module and its role"][2])
    assert {"cuda_toolkit", "fleet"} <= set(p["scenarios"]) and "model_fetch" not in p["scenarios"]
    assert "tests/unit/plugins/modules/test_cuda_modules.py" in p["unit"]


@pytest.mark.parametrize("case", ["scripts/", "a test double"])
def test_shared_test_machinery_runs_everything(case):
    p = plan(HISTORY[case][2])
    assert set(p["scenarios"]) == ALL and p["unit"] == "all"


def test_docs_run_no_scenario_and_an_unknown_file_runs_everything():
    assert plan(["docs/rollout.md", "README.md"])["scenarios"] == {}
    assert set(plan(["something/new.txt"])["scenarios"]) == ALL


def test_every_role_has_a_scenario_of_its_own_or_through_its_playbook():
    for role in set(GRAPH.roles) & ALL:
        assert role in plan(["roles/%s/tasks/main.yml" % role])["scenarios"], role
    # each role has a scenario named after it, or its README names the scenario that tests it (one that
    # runs its stack already, e.g. the rollout behind real servers), and that scenario reaches the role
    for role in set(GRAPH.roles) - ALL:
        readme = (ROOT / "roles" / role / "README.md").read_text()
        m = re.search(r"^Molecule: `molecule/([a-z_]+)`", readme, re.M)
        assert m, "%s: no molecule/%s, and its README names no scenario (a line 'Molecule: `molecule/NAME`')" % (role, role)
        assert m.group(1) in plan(["roles/%s/tasks/main.yml" % role])["scenarios"], (role, m.group(1))
