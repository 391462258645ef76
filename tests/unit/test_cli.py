"""The ddtree-fleet CLI runs the real facts job through ansible-runner on localhost."""
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cli"))

import ddtree_fleet_cli as cli  # noqa: E402


def local_inventory(path):
    """The controller itself as the fleet's one host."""
    path.write_text("all:\n  children:\n    fleet:\n      hosts:\n        localhost:\n"
                    "          ansible_connection: local\n          ansible_python_interpreter: %s\n" % sys.executable)
    return path


def test_facts_job_reports_progress_and_writes_the_report(tmp_path, monkeypatch):
    inv = local_inventory(tmp_path / "hosts.yml")
    monkeypatch.setenv("DDTREE_FLEET_DIR", str(ROOT))
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(tmp_path / "reports"))
    out = io.StringIO()
    rc = cli.main(["facts", "-i", str(inv)], out=out)
    text = out.getvalue()
    assert rc == 0, text
    assert "PLAY 1: Facts - GPUs, family groups, serving profile, preflight" in text
    # a line per task as it ends, with its host counts
    assert any("Read the GPUs" in ln and "ok 1" in ln for ln in text.splitlines()), text
    assert "localhost" in text and "failed=0" in text
    rows = json.loads((tmp_path / "reports" / "fleet.json").read_text())["hosts"]
    assert [r["host"] for r in rows] == ["localhost"]


def test_failures_and_usage_have_their_exit_codes(tmp_path, monkeypatch):
    monkeypatch.setenv("DDTREE_FLEET_DIR", str(ROOT))
    assert cli.main(["facts", "-i", str(tmp_path / "missing.yml")], out=io.StringIO()) == 4
    inv = tmp_path / "hosts.yml"
    # a GPU host without a driver: nvidia_facts fails it (nvidia-smi missing)
    inv.write_text("all:\n  children:\n    fleet:\n      children:\n        gpu_hosts:\n          hosts:\n            localhost:\n"
                   "              ansible_connection: local\n              ansible_python_interpreter: %s\n"
                   "              nvidia_facts_nvidia_smi_path: /nonexistent/nvidia-smi\n" % sys.executable)
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(tmp_path / "reports"))
    out = io.StringIO()
    assert cli.main(["facts", "-i", str(inv)], out=out) == 2
    assert "FAILED localhost" in out.getvalue()


def test_help_describes_every_job_and_option(capsys):
    import pytest
    with pytest.raises(SystemExit) as e:
        cli.parse(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for job, (_pb, what) in cli.JOBS.items():
        assert ("%s %s" % (job, " ".join(what.split()))) in text
    for opt in ("--inventory", "--limit", "--extra-vars", "--tags", "--check"):
        assert opt in text
    assert "installed collection" in text and "exit codes: 0 success" in text


def test_errors_name_the_real_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("DDTREE_FLEET_DIR", str(ROOT))
    out = io.StringIO()
    assert cli.main(["facts", "-i", str(tmp_path / "missing.yml")], out=out) == 4
    assert "inventory %s does not exist" % (tmp_path / "missing.yml") in out.getvalue()
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    monkeypatch.setenv("DDTREE_FLEET_DIR", str(tmp_path))
    out = io.StringIO()
    assert cli.main(["facts", "-i", str(inv)], out=out) == 4
    assert "DDTREE_FLEET_DIR=%s is not a checkout of ddtree.fleet" % tmp_path in out.getvalue()
    monkeypatch.delenv("DDTREE_FLEET_DIR")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(tmp_path / "nothing"))
    out = io.StringIO()
    assert cli.main(["facts", "-i", str(inv)], out=out) == 4
    assert "the ddtree.fleet collection is not installed" in out.getvalue() and "ansible-galaxy collection install" in out.getvalue()


def test_the_installed_collection_runs_its_jobs_by_name(tmp_path, monkeypatch):
    """Built into its tarball and installed like an operator does, outside any checkout: the job runs as
    ddtree.fleet.facts with the operator's Ansible configuration, not the checkout's."""
    import subprocess
    build = subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = next(tmp_path.glob("ddtree-fleet-*.tar.gz"))
    colls = tmp_path / "collections"
    # --force: the checkout's ansible.cfg puts its own ddtree.fleet on the collections path ("already installed")
    inst = subprocess.run(["ansible-galaxy", "collection", "install", "--offline", "--force", "-p", str(colls), str(tarball)],
                          capture_output=True, text=True, check=False)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    work = tmp_path / "ops"
    work.mkdir()
    inv = local_inventory(work / "hosts.yml")
    monkeypatch.delenv("DDTREE_FLEET_DIR", raising=False)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(work)
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(colls))
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(work / "reports"))
    out = io.StringIO()
    rc = cli.main(["facts", "-i", str(inv)], out=out)
    text = out.getvalue()
    assert rc == 0, text
    assert "facts: ddtree.fleet.facts (installed collection)" in text
    assert [r["host"] for r in json.loads((work / "reports" / "fleet.json").read_text())["hosts"]] == ["localhost"]


def test_progress_lines_become_a_bar_on_a_terminal_and_stay_lines_elsewhere():
    line = "fl-b300-1: kimi-k2.6: 1.25 of 4.00 GiB (31%), 12.5 MiB/s, ETA 220 s"
    events = [{"event": "playbook_on_task_start", "event_data": {"task": "Download"}},
              {"event": "verbose", "stdout": line},
              {"event": "verbose", "stdout": line.replace("1.25", "4.00").replace("(31%)", "(100%)")},
              {"event": "runner_on_ok", "event_data": {"host": "fl-b300-1", "res": {"changed": True}}},
              {"event": "playbook_on_stats", "event_data": {}}]
    tty, plain = io.StringIO(), io.StringIO()
    for out, is_tty in ((tty, True), (plain, False)):
        p = cli.Progress(out, tty=is_tty)
        for e in events:
            p(e)
    t = tty.getvalue()
    assert "\r\x1b[2K    fl-b300-1 kimi-k2.6 [" + "#" * 9 + "-" * 21 + "] 31% 1.25/4.00 GiB" in t
    assert "[" + "#" * 30 + "] 100%" in t and "\n[" in t  # the bar's line ends before the next line
    lines = plain.getvalue().splitlines()
    assert "\r" not in plain.getvalue() and any(ln.endswith("    " + line) for ln in lines), lines
    assert any("Download" in ln and "ok 1, changed 1" in ln for ln in lines)


def test_a_rollout_ends_with_its_record(tmp_path):
    d = tmp_path / "rollouts"
    d.mkdir()
    assert "none written" in cli.rollout_summary(str(tmp_path), 0)
    (d / "20261204T180000Z.json").write_text(json.dumps({"outcome": "completed", "hosts": {"a": [], "b": []},
                                                         "probe": {"requests": 812, "failed_requests": 0}}))
    line = cli.rollout_summary(str(tmp_path), 0)
    assert line == "rollout record: %s (completed; 2 hosts; probe: 812 requests, 0 failed)\n" % (d / "20261204T180000Z.json")
