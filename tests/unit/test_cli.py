"""The ddtree-fleet CLI runs the real facts job through ansible-runner on localhost."""
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cli"))

import ddtree_fleet_cli as cli  # noqa: E402


def test_facts_job_reports_progress_and_writes_the_report(tmp_path, monkeypatch):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    fleet:\n      hosts:\n        localhost:\n"
                   "          ansible_connection: local\n          ansible_python_interpreter: %s\n" % sys.executable)
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
