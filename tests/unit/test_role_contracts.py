"""Every role: argument_specs and defaults list the same variables with the same defaults,
every variable carries the role's prefix, and tasks use FQCN module names."""
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())


def load(path):
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role):
    specs = load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(ROOT / "roles" / role / "defaults" / "main.yml")
    assert sorted(specs) == sorted(defaults), "argument_specs and defaults/main.yml list different variables"
    for name, spec in specs.items():
        if "default" in spec:
            assert spec["default"] == defaults[name], f"{name}: default differs between argument_specs and defaults"
        else:
            assert spec.get("required"), f"{name}: neither a default nor required"


@pytest.mark.parametrize("role", ROLES)
def test_variables_carry_role_prefix(role):
    specs = load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(name.startswith(role + "_") for name in specs), sorted(n for n in specs if not n.startswith(role + "_"))


@pytest.mark.parametrize("role", ROLES)
def test_tasks_use_fqcn(role):
    for path in (ROOT / "roles" / role).glob("**/tasks/*.yml"):
        for task in load(path) or []:
            for block in [task] + task.get("block", []) + task.get("rescue", []) + task.get("always", []):
                modules = [k for k in block if "." in k and not k.startswith("__")]
                keys = set(block) - {"name", "when", "tags", "loop", "loop_control", "register", "become",
                                     "become_user", "vars", "notify", "changed_when", "failed_when",
                                     "check_mode", "no_log", "delegate_to", "run_once", "environment",
                                     "until", "retries", "delay", "async", "poll", "block", "rescue", "always", "listen",
                                     "diff", "throttle", "args", "any_errors_fatal", "ignore_errors",
                                     "delegate_facts", "ignore_unreachable"}
                assert not (keys - set(modules)), f"{path.name}: short module name in {block.get('name')}"
