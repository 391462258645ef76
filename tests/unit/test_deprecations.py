"""No [DEPRECATION WARNING] from this collection's own code on the ansible-core these tests run on
(scripts/test runs them on every supported one). Three places read Ansible's output for one that
points into the collection (scripts/lib/deprecations.py): here, every playbook and role parsed
(--syntax-check) and every module's and filter's documentation loaded; every module run of the unit
tests (the run_module fixture); and every molecule scenario's log with the playbooks its tests ran
(scripts/test molecule_one), where the roles run for real."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
import deprecations  # noqa: E402

# as ansible-core 2.21 prints them: one from a role of this checkout, one from another collection
SAMPLE = """TASK [ddtree.fleet.base : Service user] *****************************************
[WARNING]: Deprecation warnings can be disabled by setting `deprecation_warnings=False` in ansible.cfg.
[DEPRECATION WARNING]: INJECT_FACTS_AS_VARS default to `True` is deprecated, top-level facts will not be auto \
injected after the change. This feature will be removed from ansible-core version 2.24.
Origin: {root}/roles/base/tasks/accounts.yml:5:14

3   - name: Service user
5         home: "{{{{ ansible_hostname }}}}"
               ^ column 14

Use `ansible_facts["fact_name"]` (no `ansible_` prefix) instead.

[DEPRECATION WARNING]: The `play_hosts` magic variable is deprecated. This feature will be removed from ansible-core version 2.23.
Origin: /usr/share/ansible/collections/ansible_collections/other/thing/roles/x/tasks/main.yml:2:9

Use `ansible_play_batch` instead.

ok: [base-a]
[DEPRECATION WARNING]: Importing 'to_native' from 'ansible.module_utils._text' is deprecated. This feature will be removed from ansible-core version 2.24.
changed: [base-b]
[DEPRECATION WARNING]: The ddtree.fleet.sglang_release module's `warn` argument is deprecated.
"""


def env():
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_DEPRECATION_WARNINGS="true",
                ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1")


def test_a_deprecation_is_ours_when_its_origin_or_its_text_points_into_the_collection(tmp_path):
    text = SAMPLE.format(root=ROOT)
    every = deprecations.blocks(text)
    assert [b["origin"] for b in every] == [str(ROOT / "roles/base/tasks/accounts.yml"),
                                            "/usr/share/ansible/collections/ansible_collections/other/thing/roles/x/tasks/main.yml",
                                            None, None]
    assert "Use `ansible_facts" in every[0]["text"] and "ok: [base-a]" not in every[1]["text"]
    found = deprecations.find(text + text, root=str(ROOT))  # each once
    assert [b["message"][:40] for b in found] == ["INJECT_FACTS_AS_VARS default to `True` i",
                                                  "The ddtree.fleet.sglang_release module's"]
    # an installed copy of the collection is the collection too
    installed = "[DEPRECATION WARNING]: x\nOrigin: /tmp/c/ansible_collections/ddtree/fleet/roles/a/tasks/main.yml:1:1\n"
    assert deprecations.find(installed, root="/nowhere")
    # the command line: exit 1 naming them, 0 on a clean log or none at all
    log = tmp_path / "molecule.log"
    log.write_text(text)
    clean = tmp_path / "clean.log"
    clean.write_text("PLAY RECAP\n")
    cli = [sys.executable, str(ROOT / "scripts" / "lib" / "deprecations.py"), "--root", str(ROOT)]
    p = subprocess.run(cli + [str(log)], capture_output=True, text=True, check=False)
    assert p.returncode == 1 and "2 deprecation warning(s) from this collection" in p.stdout, p.stdout
    p = subprocess.run(cli + [str(clean), str(tmp_path / "absent.log")], capture_output=True, text=True, check=False)
    assert p.returncode == 0 and p.stdout == "", p.stdout


def test_every_playbook_and_role_parses_without_a_deprecation():
    """--syntax-check loads each playbook, the playbooks it imports, the roles (defaults, vars, meta,
    argument specs) and the task files named statically."""
    books = ["site.yml"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yml"))
    p = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "localhost,"] + books, cwd=ROOT, env=env(),
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    found = deprecations.find(p.stdout + p.stderr)
    assert not found, "\n\n".join(b["text"] for b in found)


def test_every_module_and_filter_documentation_loads_without_a_deprecation():
    for kind, folder in (("module", "modules"), ("filter", "filter")):
        names = sorted({"ddtree.fleet." + f.stem for f in (ROOT / "plugins" / folder).iterdir()
                        if f.suffix in (".py", ".yml") and not f.name.startswith("_")
                        and (kind == "module" or f.suffix == ".yml")})
        p = subprocess.run(["ansible-doc", "-t", kind, "--json"] + names, cwd=ROOT, env=env(),
                           capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stderr[-3000:]
        assert sorted(json.loads(p.stdout)) == names
        found = deprecations.find(p.stdout + p.stderr)
        assert not found, "\n\n".join(b["text"] for b in found)
