"""sglang_release and sglang_health run for real; the health gate against the SGLang stand-in."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port

DOUBLE = Path(__file__).resolve().parents[3] / "doubles" / "sglang_server.py"


def release(run_module, tmp_path, venv, **kw):
    args = dict(instance="main", root=str(tmp_path / "svc"), venv=str(venv), argv=["--model-path", "/m", "--tp-size", "8"],
                env={"A": "1"})
    args.update(kw)
    return run_module("sglang_release", **args)


@pytest.fixture
def venv(tmp_path):
    real = tmp_path / "venvs" / "v1"
    (real / ".ddtree").mkdir(parents=True)
    (real / ".ddtree" / "sglang-patch.json").write_text(json.dumps({"series": "s", "patches": ["p1"]}))
    os.symlink(real, tmp_path / "venv")
    return tmp_path / "venv"


def test_release_is_content_addressed_and_switches_atomically(run_module, tmp_path, venv):
    dry = release(run_module, tmp_path, venv, check=True)
    assert dry["changed"] and not (tmp_path / "svc").exists()
    r1 = release(run_module, tmp_path, venv)
    assert r1["changed"] and r1["previous"] is None
    cur = tmp_path / "svc" / "main" / "current"
    assert os.path.realpath(cur).endswith(r1["id"])
    launch = (cur / "launch").read_text()
    assert str(tmp_path / "venvs" / "v1") + "/bin/python -m sglang.launch_server" in launch  # the venv's real path
    assert "--tp-size 8" in launch and os.access(cur / "launch", os.X_OK)
    assert (cur / "env").read_text().splitlines()[1] == 'A="1"'
    assert json.loads((cur / "release.json").read_text())["patch_stamp"]["patches"] == ["p1"]
    assert not release(run_module, tmp_path, venv)["changed"]  # same inputs, same release

    r2 = release(run_module, tmp_path, venv, argv=["--model-path", "/m", "--tp-size", "4"], diff=True)
    assert r2["changed"] and r2["previous"] == r1["id"] and r2["id"] != r1["id"]
    assert '"4"' in r2["diff"]["after"] and '"8"' in r2["diff"]["before"]
    # the patch stamp is part of the release: re-patching the venv makes a new one
    (tmp_path / "venvs" / "v1" / ".ddtree" / "sglang-patch.json").write_text(json.dumps({"series": "s", "patches": []}))
    r3 = release(run_module, tmp_path, venv, argv=["--model-path", "/m", "--tp-size", "4"])
    assert r3["changed"] and r3["id"] != r2["id"]

    back = run_module("sglang_release", instance="main", root=str(tmp_path / "svc"), state="rollback")
    assert back["id"] == r2["id"] and back["previous"] == r3["id"]
    assert os.path.realpath(cur).endswith(r2["id"])


def test_rollback_without_a_previous_release_fails(run_module, tmp_path, venv):
    release(run_module, tmp_path, venv)
    r = run_module("sglang_release", instance="main", root=str(tmp_path / "svc"), state="rollback")
    assert r["failed"] and "no previous release" in r["msg"]


def test_a_deploy_can_keep_its_rollback_target_and_roll_back_to_a_named_release(run_module, tmp_path, venv):
    """The fresh correctness reference makes an autoregressive release current for a while: the
    speculative one that follows keeps the release from before the deploy as 'previous'."""
    before = release(run_module, tmp_path, venv)["id"]
    spec_argv = ["--tp-size", "8", "--speculative-algorithm", "DFLASH"]
    new = release(run_module, tmp_path, venv, argv=spec_argv)  # the deploy makes its release current
    assert new["previous"] == before
    for n in range(3):  # older releases than `before`'s rivals: keep=2 would prune it were it not the target
        release(run_module, tmp_path, venv, argv=["--tp-size", str(n + 1)], keep=2, previous=before)
    ar = release(run_module, tmp_path, venv, argv=["--tp-size", "8"], keep=2, previous=before)
    assert ar["previous"] == before and (tmp_path / "svc" / "main" / "releases" / before).is_dir()
    spec = release(run_module, tmp_path, venv, argv=spec_argv, previous=before)
    assert spec["changed"] and spec["previous"] == before and spec["id"] == new["id"]
    base = tmp_path / "svc" / "main"
    assert os.path.realpath(base / "previous").endswith(before) and os.path.realpath(base / "current").endswith(spec["id"])
    again = release(run_module, tmp_path, venv, argv=spec_argv, previous=before)
    assert not again["changed"]
    # the rollback target is the very release made current (a bench's autoregressive baseline is the fresh
    # reference's release): nothing to keep apart, so it is ignored and the spec release becomes previous
    same = release(run_module, tmp_path, venv, argv=["--tp-size", "8"], previous=ar["id"])
    assert same["changed"] and same["id"] == ar["id"] and same["previous"] == spec["id"]
    spec = release(run_module, tmp_path, venv, argv=spec_argv, previous=ar["id"])
    assert spec["previous"] == ar["id"]
    bad = release(run_module, tmp_path, venv, argv=["--tp-size", "8"], previous="0123456789ab")
    assert bad["failed"] and "previous=0123456789ab is not another release of instance main" in bad["msg"]
    back = run_module("sglang_release", instance="main", root=str(tmp_path / "svc"), state="rollback", release=before)
    assert back["id"] == before and back["previous"] == spec["id"]
    assert os.path.realpath(base / "current").endswith(before)
    none = run_module("sglang_release", instance="main", root=str(tmp_path / "svc"), state="rollback", release="0123456789ab")
    assert none["failed"] and "no release 0123456789ab to roll back to" in none["msg"]


def test_old_releases_are_pruned(run_module, tmp_path, venv):
    for n in range(5):
        release(run_module, tmp_path, venv, argv=["--tp-size", str(n + 1)], keep=2)
    assert len(list((tmp_path / "svc" / "main" / "releases").iterdir())) == 2


@pytest.fixture
def server(tmp_path):
    procs = []

    def start(*argv, faults=None):
        port = free_port()
        env = dict(os.environ, DDTREE_SGLANG_DOUBLE_LOAD_S="0.5",
                   DDTREE_SGLANG_DOUBLE_FAULTS=str(tmp_path / "faults.json"))
        (tmp_path / "faults.json").write_text(json.dumps(faults or []))
        (tmp_path / "model").mkdir(exist_ok=True)
        p = subprocess.Popen([sys.executable, str(DOUBLE), "--model-path", str(tmp_path / "model"), "--served-model-name",
                              "kimi", "--host", "127.0.0.1", "--port", str(port), *argv], env=env)
        procs.append(p)
        return "http://127.0.0.1:%d" % port
    start.procs = procs
    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_gate_passes_and_reads_server_info(run_module, server):
    url = server("--tp-size", "8", "--speculative-algorithm", "DFLASH", "--api-key", "k", "--device", "cpu")
    r = run_module("sglang_health", url=url, model="kimi", expect={"tp_size": 8, "speculative_algorithm": "dflash"},
                   api_key="k", timeout=20, interval=0.2)
    assert r["healthy"] and r["server_info"] == {"tp_size": 8, "speculative_algorithm": "DFLASH"} and r["seconds"] >= 0
    # what the server says it is, for the report: its version and device from /server_info
    assert r["version"] == "0.5.23" and r["device"] == "cpu"
    assert r["since_start"] is None  # no unit: no start to measure from


def test_gate_measures_from_the_units_start_on_the_hosts_own_clock(run_module, server, tmp_path, monkeypatch):
    # systemctl as systemd answers: the main process started 42 s ago on the monotonic clock (CLOCK_MONOTONIC, the
    # clock Python's time.monotonic reads), so the figure is this host's, whatever the controller's tasks waited for
    started_us = int((time.monotonic() - 42) * 1e6)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(
        "#!/bin/sh\ncase \"$*\" in *ExecMainStartTimestampMonotonic*) echo ExecMainStartTimestampMonotonic=%d ;;\n"
        "*) printf 'ActiveState=active\\nSubState=running\\nNRestarts=0\\n' ;; esac\n" % started_us)
    (fake / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (fake, os.environ["PATH"]))
    r = run_module("sglang_health", url=server(), model="kimi", unit="ddtree-sglang@main.service", timeout=20, interval=0.2)
    assert r["healthy"] and 42 <= r["since_start"] < 42 + 120, r


def test_gate_reports_drift_wrong_model_and_timeout(run_module, server):
    url = server("--tp-size", "8", faults=[{"match": "--tp-size 8", "mode": "drift:tp_size=4"}])
    r = run_module("sglang_health", url=url, model="kimi", expect={"tp_size": 8}, timeout=20, interval=0.2)
    assert r["failed"] and "tp_size is 4, expected 8" in r["msg"]
    r = run_module("sglang_health", url=url, model="other", timeout=20, interval=0.2)
    assert r["failed"] and "lists ['kimi'], not other" in r["msg"]
    bad = server(faults=[{"match": "", "mode": "unhealthy"}])
    start = time.time()
    r = run_module("sglang_health", url=bad, model="kimi", timeout=2, interval=0.2)
    assert r["failed"] and "did not answer 200 within 2s" in r["msg"] and time.time() - start < 15


PROMPTS = ["The capital of France is", "def fibonacci(n):"]


def test_gate_records_then_admits_a_correct_speculative_release(run_module, server):
    # autoregressive: the outputs are the reference
    ref = run_module("sglang_health", url=server(), model="kimi", prompts=PROMPTS, output_len=24,
                     timeout=20, interval=0.2)
    assert ref["healthy"] and len(ref["outputs"]) == 2 and len(ref["outputs"][0]) == 24
    assert ref["accept_length"] is None  # no speculation, no accept length
    # speculative, same greedy output, accept length over the floor: admitted
    spec = server("--speculative-algorithm", "DFLASH")
    r = run_module("sglang_health", url=spec, model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2,
                   reference={"outputs": ref["outputs"], "host": "h1", "release": "r1"}, accept_length_floor=1.5)
    assert r["healthy"] and r["gate_problems"] == [] and r["outputs"] == ref["outputs"] and r["accept_length"] == 3.4


def test_gate_refuses_wrong_tokens_naming_prompt_and_position(run_module, server):
    ref = run_module("sglang_health", url=server(), model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2)
    bad = server("--speculative-algorithm", "DFLASH", faults=[{"match": "DFLASH", "mode": "wrong_tokens_after:5"}])
    reference = {"outputs": ref["outputs"], "host": "h1", "release": "r1"}
    r = run_module("sglang_health", url=bad, model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2,
                   reference=reference, min_prefix=16)
    assert r["failed"] and not r["healthy"]
    assert "is up but not admitted" in r["msg"]
    assert "correctness against h1 (release r1): prompt 0: output departs from the reference at token 5" in r["msg"]
    assert "the tolerance is 16 matching tokens" in r["msg"]
    # a divergence after the tolerance is accepted (GPU arithmetic is not bit-stable)
    r = run_module("sglang_health", url=bad, model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2,
                   reference=reference, min_prefix=4)
    assert r["healthy"]


def test_gate_catches_corruption_that_only_batching_or_a_long_output_shows(run_module, server):
    """TensorRT-LLM #17110: speculation corrupted tokens only in batched CUDA graphs. The stand-in corrupts only a
    request that ran beside another: the prompts one at a time pass; the gate's batch wave is refused, named."""
    gate = dict(model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2, batch=8, long_output_len=64)
    ref = run_module("sglang_health", url=server(), **gate)
    assert ref["healthy"] and len(ref["outputs"]) == 2 + 8 + 1 and len(ref["outputs"][-1]) == 64
    assert ref["requests"][2] == "batch request 0 of 8 (prompt 0)" and ref["requests"][-1] == "long output (prompt 0, 64 tokens)"
    reference = {"outputs": ref["outputs"], "host": "h1", "release": "r1"}
    bad = server("--speculative-algorithm", "DFLASH", faults=[{"match": "DFLASH", "mode": "wrong_tokens_batched:3"}])
    alone = run_module("sglang_health", url=bad, model="kimi", prompts=PROMPTS, output_len=24, timeout=20, interval=0.2,
                       reference={"outputs": ref["outputs"][:2]}, min_prefix=16)
    assert alone["healthy"], alone  # what the gate saw before: one request at a time is right
    r = run_module("sglang_health", url=bad, reference=reference, min_prefix=16, **gate)
    assert r["failed"] and not r["healthy"]
    assert "batch request 0 of 8 (prompt 0): output departs from the reference at token 3" in r["msg"]
    assert "prompt 0: output" not in r["msg"].replace("(prompt 0): output", "")  # the lone requests passed
    # a corruption from token 40 on: only the long output reaches it
    late = server("--speculative-algorithm", "DFLASH", faults=[{"match": "DFLASH", "mode": "wrong_tokens_after:40"}])
    r = run_module("sglang_health", url=late, reference=reference, min_prefix=48, **gate)
    assert r["failed"] and "long output (prompt 0, 64 tokens): output departs from the reference at token 40" in r["msg"]
    assert "the tolerance is 48 matching tokens" in r["msg"] and "batch request" not in r["msg"]
    # a reference made without the batch and the long output is not compared against: it is to be made again
    r = run_module("sglang_health", url=late, reference={"outputs": ref["outputs"][:2]}, **gate)
    assert r["failed"] and "the reference has 2 outputs for 11 gate requests: record it again" in r["msg"]


def test_a_hung_server_answers_health_but_fails_the_gate(run_module, server):
    """sglang #21486: a hung scheduler (rank 0 after NCCL aborted a rank) still answers /health 200; the gate asks
    /health_generate, which never answers, and fails at its timeout."""
    import urllib.request
    url = server(faults=[{"match": "kimi", "mode": "hang"}])
    deadline = time.time() + 20
    while True:
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                break
        except OSError:
            assert time.time() < deadline
            time.sleep(0.2)
    r = run_module("sglang_health", url=url, model="kimi", timeout=3, interval=0.5)
    assert r["failed"] and "/health_generate did not answer 200 within 3s" in r["msg"]


def test_gate_refuses_collapsed_acceptance_with_measured_and_expected(run_module, server):
    bad = server("--speculative-algorithm", "DFLASH", faults=[{"match": "DFLASH", "mode": "accept_collapsed"}])
    r = run_module("sglang_health", url=bad, model="kimi", prompts=PROMPTS, output_len=8, timeout=20, interval=0.2,
                   accept_length_floor=1.5)
    assert r["failed"] and r["accept_length"] == 1.0
    assert "acceptance: mean accept length 1.00 over 2 requests is under the floor 1.50" in r["msg"]


def test_a_serving_group_is_healthy_only_with_every_rank(run_module, server, tmp_path):
    """The stand-in models SGLang's rendezvous: rank 0 answers /health_generate only once rank 1 joined its init
    address; a rank of another group shape is refused; rank 1 serves only /health (the gate's member mode);
    when rank 1 goes away, rank 0 goes down with it."""
    init = "127.0.0.1:%d" % free_port()
    rank0 = server("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", init)
    r = run_module("sglang_health", url=rank0, model="kimi", timeout=3, interval=0.2)
    assert r["failed"] and "did not answer 200 within 3s" in r["msg"]  # alone, rank 0 waits for rank 1
    wrong = subprocess.run([sys.executable, str(DOUBLE), "--model-path", str(tmp_path / "model"), "--nnodes", "3",
                            "--node-rank", "1", "--dist-init-addr", init, "--port", str(free_port())],
                           capture_output=True, text=True, timeout=30, check=False)
    assert wrong.returncode == 3 and "refused" in wrong.stderr
    rank1 = server("--nnodes", "2", "--node-rank", "1", "--dist-init-addr", init)
    assert run_module("sglang_health", url=rank1, model="kimi", member=True, timeout=20, interval=0.2)["healthy"]
    r = run_module("sglang_health", url=rank0, model="kimi", expect={"nnodes": 2, "node_rank": 0}, timeout=20, interval=0.2)
    assert r["healthy"] and r["server_info"] == {"nnodes": 2, "node_rank": 0}
    r = run_module("sglang_health", url=rank1, model="kimi", timeout=3, interval=0.2)
    assert r["failed"] and "/v1/models" in r["msg"]  # no API on a non-zero rank: only the member gate fits it
    procs = server.procs
    procs[-1].kill()
    procs[-1].wait()
    assert procs[0].wait(timeout=10) == 3  # rank 0 goes down with its group
