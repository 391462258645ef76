"""Every role: argument_specs (every entry point) and defaults list the same variables with the same defaults,
every variable carries the role's prefix, tasks use FQCN module names; every fact a role hands on is declared in
its meta/outputs.yml, set where it says and read where it says; every cross-role read is a declared output or
input of its owner; docs/data_flow.md is what scripts/lib/data_flow.py generates from them."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
import data_flow  # noqa: E402  pylint: disable=wrong-import-position


def load(path):
    return yaml.safe_load(path.read_text()) or {}


def entry_points(role):
    return load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]


def all_tasks(tasks):
    for t in tasks or []:
        yield t
        for k in ("block", "rescue", "always"):
            yield from all_tasks(t.get(k))


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role):
    defaults = load(ROOT / "roles" / role / "defaults" / "main.yml")
    specs = {}
    for entry, spec in entry_points(role).items():
        for name, opt in (spec.get("options") or {}).items():
            assert name in defaults or opt.get("required"), f"{entry}: {name} has no default in defaults/main.yml"
            if "default" in opt:
                assert opt["default"] == defaults[name], f"{entry}: {name}: default differs between argument_specs and defaults"
            else:
                assert opt.get("required"), f"{entry}: {name}: neither a default nor required"
            specs[name] = opt
    # a required option (an entry point's parameter, e.g. restart_gate's instance) has no default
    assert sorted(n for n, o in specs.items() if not o.get("required") or n in defaults) == sorted(defaults), \
        "argument_specs (all entry points) and defaults/main.yml list different variables"
    for entry in entry_points(role):
        assert entry == "main" or (ROOT / "roles" / role / "tasks" / (entry + ".yml")).exists(), f"entry point {entry} has no tasks file"


@pytest.mark.parametrize("role", ROLES)
def test_variables_carry_role_prefix(role):
    names = [n for spec in entry_points(role).values() for n in spec.get("options") or {}]
    names += [n for n, o in data_flow.outputs(role).items() if not o.get("kind")]
    assert all(name.startswith(role + "_") for name in names), sorted(n for n in names if not n.startswith(role + "_"))


@pytest.mark.parametrize("role", ROLES)
def test_outputs_are_declared_and_set_where_they_say(role):
    declared = data_flow.outputs(role)
    inputs = set(data_flow.inputs(role))
    set_in = {}
    for path in (ROOT / "roles" / role / "tasks").glob("*.yml"):
        for task in all_tasks(load(path) if isinstance(load(path), list) else []):
            names = list((task.get("ansible.builtin.set_fact") or {}) if isinstance(task.get("ansible.builtin.set_fact"), dict) else [])
            names += [task["register"]] if task.get("register") else []
            for n in names:
                if not n.startswith("__"):
                    set_in.setdefault(n, set()).add("tasks/" + path.name)
    undeclared = sorted(set(set_in) - set(declared))
    assert not undeclared, f"facts the role sets but meta/outputs.yml does not declare: {undeclared}"
    for name, out in declared.items():
        assert out.get("description") and out.get("type"), name
        assert name not in inputs, f"{name} is both an input and an output of {role}: name the output apart"
        if out.get("kind"):
            for f in out["set_in"]:
                assert (ROOT / "roles" / role / f).exists(), (name, f)
            continue
        assert set(out["set_in"]) == set_in.get(name, set()), f"{name}: set in {sorted(set_in.get(name, []))}, declared {out['set_in']}"


@pytest.mark.parametrize("role", ROLES)
def test_readers_named_in_outputs_read_them(role):
    for name, out in data_flow.outputs(role).items():
        for reader in out.get("read_by") or []:
            who = reader.split()[0]
            if who == "host_records":
                key = re.search(r"\((\w+)\)", reader).group(1)
                rec = data_flow.record_keys()
                assert key in ("nvidia",) or rec.get(key, (None,))[0] == name, f"{name}: RECORD[{key}] is not {name}"
            elif who in ROLES:
                text = "\n".join(t for _rel, t in data_flow.role_text(who))
                text += (ROOT / "roles" / who / "meta" / "argument_specs.yml").read_text()
                assert name.split(".")[-1] in text, f"{name}: {who} is named as a reader but never reads it"
            elif who.startswith("playbooks/"):
                assert name in (ROOT / who).read_text(), f"{name}: {who} does not read it"


def test_record_reads_only_declared_outputs_and_inputs():
    declared = set()
    for role in ROLES:
        declared |= set(data_flow.outputs(role)) | set(data_flow.inputs(role))
    for key, (var, _src) in data_flow.record_keys().items():
        assert var in declared, f"RECORD[{key}] reads {var}, which no role declares as an output or input"


def test_every_cross_role_read_is_declared_by_its_owner():
    bad = [(reader, var, owner, files) for reader, var, owner, files, ok in data_flow.cross_reads() if not ok]
    assert not bad, f"reads of another role's variable that it neither outputs nor takes as input: {bad}"


def test_reads_through_hostvars_never_reach_another_roles_private_facts():
    rows = data_flow.hostvars_reads()
    # the checker sees every form: hostvars[h].var, map('extract', hostvars) | map(attribute=...), a role's own
    assert ("ddtree_rollout", "sglang_router_port", "sglang_router", ["defaults/main.yml"], True) in rows
    assert any(r[:3] == ("ddtree_service", "__ddtree_service_run", "ddtree_service") for r in rows)
    bad = [r for r in rows if not r[4]]
    assert not bad, f"reads through hostvars of another role's private fact, or of an undeclared variable: {bad}"


def test_plugins_read_no_private_facts():
    assert not data_flow.plugin_private_reads(), "a plugin reads a role's private fact: take it from the host records"


def test_data_flow_text_is_checked_against_the_code():
    doc = (ROOT / "docs" / "data_flow.md").read_text()
    assert data_flow.prose_problems(doc) == []
    # the drift the check exists for: a name that moved out of the file the text says it is in
    drifted = doc.replace("ddtree_report: host_records", "playbooks/report.yml: fleet_rows")
    assert any("fleet_rows is not in playbooks/report.yml" in p for p in data_flow.prose_problems(drifted))
    assert any("nowhere" in p for p in data_flow.prose_problems(doc.replace("ddtree_service_runs", "ddtree_service_rnus")))


def test_data_flow_doc_is_generated():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "lib" / "data_flow.py"), "--check"], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr


def test_every_role_has_a_readme_naming_its_inputs_and_outputs():
    for role in ROLES:
        readme = ROOT / "roles" / role / "README.md"
        assert readme.exists(), f"roles/{role}/README.md is missing"
        text = readme.read_text()
        for name in list(data_flow.inputs(role)) + list(data_flow.outputs(role)):
            assert name in text, f"roles/{role}/README.md does not name {name}"


def test_playbooks_are_hosts_roles_and_serial():
    allowed = {"name", "hosts", "gather_facts", "become", "tags", "roles", "serial", "max_fail_percentage",
               "any_errors_fatal", "tasks", "import_playbook", "ansible.builtin.import_playbook"}
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in load(path) or []:
            assert set(play) <= allowed, f"{path.name}: {play.get('name')}: {sorted(set(play) - allowed)}"
            assert "vars_files" not in play and "vars" not in play, f"{path.name}: settings belong in role defaults"
            for task in play.get("tasks") or []:
                kind = set(task) - {"name"}
                assert kind == {"ansible.builtin.include_role"}, f"{path.name}: {task.get('name')}: a play's tasks only include roles"


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
                                     "delegate_facts", "ignore_unreachable", "module_defaults"}
                assert not (keys - set(modules)), f"{path.name}: short module name in {block.get('name')}"
