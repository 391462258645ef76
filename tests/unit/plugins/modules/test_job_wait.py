"""ddtree.fleet.job_wait for real: ansible-playbook on localhost starts a real background job that writes
progress documents, and the action follows it to its end in one task."""
import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.ddtree.fleet.plugins.action import job_wait as jw

ROOT = Path(__file__).resolve().parents[4]

JOB = r"""
import json, os, sys, time
path, secs, rc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
total, t0 = 3 * 2 ** 30, time.time()
while time.time() - t0 < secs:
    done = int(total * (time.time() - t0) / secs)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"bytes": done, "total": total, "rate_bps": 2 ** 27, "eta_s": int(secs - (time.time() - t0))}, f)
    os.replace(tmp, path)
    time.sleep(0.1)
sys.exit(rc)
"""


def test_delays_start_short_and_settle_at_the_interval():
    d = jw.delays(4.0)
    got = [next(d) for _n in range(8)]
    assert got[0] == 0.5 and got == sorted(got) and got[-1] == 4.0
    assert next(jw.delays(0.2)) == 0.2


def test_progress_line_picks_the_unit():
    line = jw.progress_line("repo", {"bytes": 2 ** 30 + 2 ** 29, "total": 3 * 2 ** 30, "rate_bps": 10 * 2 ** 20, "eta_s": 150})
    assert line == "repo: 1.50 of 3.00 GiB (50%), 10.0 MiB/s, ETA 150 s"
    assert jw.progress_line("venv", {"bytes": 2 ** 20, "total": 4 * 2 ** 20}) == "venv: 1.00 of 4.00 MiB (25%), 0.0 MiB/s, ETA 0 s"


def play(tmp_path, secs, rc, interval=0.5, timeout=0):
    progress, out = tmp_path / "progress.json", tmp_path / "result.json"
    tasks = [
        {"ansible.builtin.command": {"argv": [sys.executable, "-c", JOB, str(progress), str(secs), str(rc)]},
         "async": 60, "poll": 0, "register": "job", "changed_when": False},
        {"block": [{"ddtree.fleet.job_wait": {"jid": "{{ job.ansible_job_id }}", "progress_file": str(progress),
                                              "label": "model", "interval": interval, "timeout": timeout},
                    "register": "r"}],
         "rescue": [{"ansible.builtin.set_fact": {"r": "{{ ansible_failed_result }}"}}]},
        {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out), "mode": "0600"}},
    ]
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    p = subprocess.run(["ansible-playbook", str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.read_text()), p.stdout


def test_follows_a_job_to_its_end_printing_progress(tmp_path):
    # a 5 s job polled every 0.5 s: at least two polls even when a loaded machine starts the wait late
    r, stdout = play(tmp_path, secs=5, rc=0)
    assert r["finished"] is True and not r.get("failed") and r["rc"] == 0
    assert r["polls"] >= 2 and r["waited_s"] >= 1
    assert r["progress_lines"] and all(" of 3.00 GiB (" in l for l in r["progress_lines"])
    assert "localhost: model: " in stdout  # printed while waiting, with the host


def test_the_jobs_failure_is_the_tasks(tmp_path):
    r, _out = play(tmp_path, secs=0.5, rc=3)
    assert r["failed"] is True and r["rc"] == 3 and r["finished"] is True


def test_timeout_gives_up_and_says_so(tmp_path):
    r, _out = play(tmp_path, secs=8, rc=0, interval=0.5, timeout=1)
    assert r["failed"] is True and r["finished"] is False and "did not end within 1 s" in r["msg"]


def test_progress_line_while_the_job_waits_for_its_parent():
    """venv_install waits for the host it pulls from (the fan-out's parent) and says so."""
    assert jw.progress_line("venv 0123", {"bytes": 0, "total": 2 * 2 ** 30, "waiting_for": "b300-2", "state": "absent"}) == (
        "venv 0123: waiting for b300-2 (it has no copy yet)")
    assert jw.progress_line("venv 0123", {"bytes": 2 ** 30, "total": 2 * 2 ** 30, "waiting_for": "b300-2", "state": "progress"}) == (
        "venv 0123: waiting for b300-2 (it has 1.00 of 2.00 GiB)")
