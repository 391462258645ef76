"""The structure the roles keep (issue 40): includes nest at most three task files deep from any entry point, the
service's private variables rarely cross files (its run is one record), no task call is written twice, and the
entry points of a role share one definition of their options."""
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
import private_vars  # noqa: E402  pylint: disable=wrong-import-position
import task_repeats  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize("role", ROLES)
def test_no_include_nests_deeper_than_three(role):
    assert private_vars.analyse(role)[2] <= 3


def test_the_services_private_variables_rarely_cross_files():
    # 36 crossed files before the instance's run became one record (__ddtree_service_run)
    _private, crossing, _depth = private_vars.analyse("ddtree_service")
    assert len(crossing) <= 17, sorted(crossing)


def test_no_task_call_is_written_twice():
    found = task_repeats.repeated_calls(5) + task_repeats.repeated_windows(6)
    assert not found, "\n".join(found)


def test_the_scan_finds_a_call_written_twice(tmp_path, monkeypatch):
    task = {"name": "t", "ansible.builtin.file": {"path": "/x", "state": "directory", "owner": "root", "group": "root",
                                                  "mode": "0755"}}
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "tasks" / "a.yml").write_text(yaml.safe_dump([task]))
    (tmp_path / "roles" / "r" / "tasks" / "b.yml").write_text(yaml.safe_dump([dict(task, name="u")]))
    (tmp_path / "site.yml").write_text("---\n[]\n")
    monkeypatch.setattr(task_repeats, "ROOT", str(tmp_path))
    assert len(task_repeats.repeated_calls(5)) == 1


@pytest.mark.parametrize("role", ["ddtree_service", "ddtree_rollout", "common"])
def test_entry_points_share_one_definition_of_their_options(role):
    text = (ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text()
    specs = yaml.safe_load(text)["argument_specs"]
    assert len(specs) > 1
    # each option is written once (the other entry points take the anchor), and every entry point validates them
    for name in specs["main"]["options"]:
        assert text.count("\n      %s:" % name) == 1, name
        assert all(name in spec["options"] for spec in specs.values()), name
