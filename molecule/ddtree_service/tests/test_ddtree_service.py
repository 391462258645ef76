"""Verify ddtree_service on two replayed GPU hosts: the servers run under systemd with the
profile's flags, as the service user, with the API key only in a root-only credential; the
hardening score; then releases, rollback, a failing health gate, a crash and a refused flag
are driven through ansible-playbook and checked on the hosts and over HTTP."""
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://svc-b300", "ansible://svc-rtx"]
KEY = "molecule-secret-4f1c9a"
CONVERGE = "molecule/ddtree_service/converge.yml"
ROOT = "/opt/ddtree/service"
INSTANCES = {"svc-b300": {"main": 30000}, "svc-rtx": {"a": 30000, "b": 30001}}
BASE_OVERRIDES = {"min_ram_gib": 1}


def name(host):
    return host.backend.get_hostname()


def http(host, port, path, key=KEY):
    auth = "-H 'Authorization: Bearer %s'" % key if key else ""
    out = host.check_output("curl -s -o /tmp/body -w '%%{http_code}' %s http://127.0.0.1:%d%s" % (auth, port, path))
    return int(out), host.file("/tmp/body").content_string


def current(host, inst):
    return host.check_output("basename $(readlink -f %s/%s/current)" % (ROOT, inst))


def main_pid(host, unit):
    return int(host.check_output("systemctl show -p MainPID --value %s" % unit))


def deploy(*extra, limit="all"):
    return playbook(CONVERGE, *extra, limit=limit)


def overrides(**kw):
    return ["-e", json.dumps({"nvidia_facts_profile_overrides": dict(BASE_OVERRIDES, **kw)})]


def test_servers_run_under_systemd_as_the_service_user(host):
    for inst, port in INSTANCES[name(host)].items():
        unit = "ddtree-sglang@%s.service" % inst
        assert host.service(unit).is_running and host.service(unit).is_enabled
        pid = main_pid(host, unit)
        assert host.check_output("ps -o user= -p %d" % pid) == "ddtree"
        code, body = http(host, port, "/v1/models")
        assert code == 200 and json.loads(body)["data"][0]["id"] == "kimi-k2.6"
        assert http(host, port, "/v1/models", key=None)[0] == 401  # the key is enforced
        assert http(host, port, "/health_generate", key=None)[0] == 200  # health needs none


def test_flags_come_from_the_profile(host):
    info = {inst: json.loads(http(host, port, "/server_info")[1]) for inst, port in INSTANCES[name(host)].items()}
    if name(host) == "svc-b300":
        i = info["main"]
        assert (i["tp_size"], i["attention_backend"], i["page_size"]) == (8, "trtllm_mla", 64)
        assert i["speculative_algorithm"] == "DFLASH" and i["speculative_draft_model_path"] == "/opt/ddtree/models/drafter"
        assert i["max_running_requests"] == 128 and i["cuda_graph_max_bs_decode"] == 128
        assert "cuda_graph_max_bs" not in i and "enable_ep_moe" not in i  # never the removed flags
    else:
        for inst in ("a", "b"):
            i = info[inst]
            assert (i["tp_size"], i["ep_size"], i["attention_backend"]) == (4, 4, "triton")
            assert i["disable_prefill_cuda_graph"] is True and i["mem_fraction_static"] == 0.85


def test_environment_gpus_and_cpus(host):
    for inst in INSTANCES[name(host)]:
        unit = "ddtree-sglang@%s.service" % inst
        # as the service user: root in a container lacks the ptrace right to read it
        raw = host.check_output("runuser -u ddtree -- cat /proc/%d/environ | tr '\\0' '\\n'" % main_pid(host, unit))
        env = dict(kv.split("=", 1) for kv in raw.splitlines() if "=" in kv)
        want = {"main": "0,1,2,3,4,5,6,7", "a": "0,1,2,3", "b": "4,5,6,7"}[inst]
        assert env["CUDA_VISIBLE_DEVICES"] == want
        assert env["SGLANG_SKIP_VLM_WARMUP"] == "1"  # the patch series is applied, so only the image warmup is skipped
        assert env["HOME"] == "/var/lib/ddtree-sglang/%s" % inst
        assert host.file("/var/cache/ddtree-sglang/%s" % inst).user == "ddtree"
        dropin = host.file("/etc/systemd/system/%s.d/instance.conf" % unit).content_string
        status = host.file("/proc/%d/status" % main_pid(host, unit)).content_string
        allowed = [ln.split()[1] for ln in status.splitlines() if ln.startswith("Cpus_allowed_list")][0]
        if name(host) == "svc-b300":
            # the replayed B300s sit next to CPUs 0-63,128-191 and 64-127,192-255; this host has 0-1
            assert "CPUAffinity=0-1\n" in dropin and allowed == "0-1"
            assert env["TRITON_PTXAS_PATH"].endswith("/bin/ptxas")  # the profile's env reached the server
        else:
            assert "CPUAffinity" not in dropin
            assert env["NCCL_P2P_LEVEL"] == "SYS"


def test_api_key_never_in_argv_units_or_releases(host):
    assert KEY not in host.check_output("ps -eo args")
    assert KEY not in host.check_output("systemctl show 'ddtree-sglang@*' --all")
    assert host.run("grep -rl %s %s /etc/systemd/system" % (KEY, ROOT)).rc == 1
    for inst in INSTANCES[name(host)]:
        cred = host.file("/etc/ddtree/sglang/%s/secrets.yaml" % inst)
        assert cred.user == "root" and cred.mode == 0o600 and KEY in cred.content_string
    assert KEY not in host.check_output("journalctl -u 'ddtree-sglang@*' --no-pager -o cat")


def test_hardening_exposure(host):
    for inst in INSTANCES[name(host)]:
        out = host.check_output("systemd-analyze security --no-pager ddtree-sglang@%s.service | tail -1" % inst)
        score = float(out.split("exposure level for")[1].split(":")[1].split()[0])
        assert score <= 4.0, out


def test_release_pins_venv_stamp_and_config(host):
    for inst in INSTANCES[name(host)]:
        rel = json.loads(host.file("%s/%s/current/release.json" % (ROOT, inst)).content_string)
        assert rel["venv"] == "/opt/ddtree/venvs/sglang-0.5.23-test"
        assert rel["patch_stamp"]["series"] == "ddtree-fleet-0.5.23"
        assert rel["launcher"][0] == "/opt/ddtree/venvs/sglang-0.5.23-test/bin/python"
        launch = host.file("%s/%s/current/launch" % (ROOT, inst)).content_string
        assert "--max-running-requests 128" in launch and KEY not in launch


def test_rollback_state_returns_to_the_previous_release(host):
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    first = current(host, "main")
    r = deploy(*overrides(max_running_requests=100), limit="svc-b300")
    assert r.returncode == 0, r.text
    second = current(host, "main")
    assert second != first
    assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == 100
    # four rollbacks in a row: each swaps current and previous, restarts through the deploy's own
    # path (start limit cleared, StartLimitBurst=3) and passes the health gate
    for n in range(4):
        r = deploy("-e", "ddtree_service_state=rollback", limit="svc-b300")
        assert r.returncode == 0, (n, r.text)
        want, mrr = (first, 128) if n % 2 == 0 else (second, 100)
        assert current(host, "main") == want, n
        assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == mrr, n
        assert host.service("ddtree-sglang@main.service").is_running
    back = deploy(limit="svc-b300")  # the rendered release (content-addressed) is `first` again
    assert back.returncode == 0, back.text
    assert current(host, "main") == first
    again = deploy(limit="svc-b300")  # the rendered release is the current one: nothing to do
    assert again.returncode == 0 and "changed=0" in again.text, again.text


def test_deploys_in_a_row_are_not_refused_by_the_start_limit(host):
    """StartLimitBurst (3 an hour) is for crash loops; systemd counts deliberate restarts too, so
    the role clears it before each one: four changed releases in a row all start and pass."""
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    for n in (101, 102, 103, 104):
        r = deploy(*overrides(max_running_requests=n), limit="svc-b300")
        assert r.returncode == 0, (n, r.text)
        assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == n
    r = deploy(limit="svc-b300")
    assert r.returncode == 0, r.text
    assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == 128


def test_failing_health_gate_restores_the_previous_release(host):
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    good = current(host, "main")
    host.run_test("mkdir -p /etc/ddtree-sglang-double && echo '%s' > /etc/ddtree-sglang-double/faults.json"
                  % json.dumps([{"match": "--max-running-requests 96", "mode": "unhealthy"},
                                {"match": "--max-running-requests 97", "mode": "crash"}]))
    r = deploy(*overrides(max_running_requests=96), limit="svc-b300")
    assert r.returncode != 0
    assert "failed its admission gate" in r.text and "Restored the previous release %s: healthy again" % good in r.text, r.text
    assert "Journal tail" in r.text and "fault=unhealthy" in r.text
    assert current(host, "main") == good
    assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == 128
    # a crash fails the gate at once (the unit is watched), not at the 60 s timeout
    start = time.time()
    r = deploy(*overrides(max_running_requests=97), limit="svc-b300")
    assert r.returncode != 0 and "stopped while starting" in r.text, r.text
    assert time.time() - start < 55
    assert current(host, "main") == good
    assert "Restored the previous release %s: healthy again" % good in r.text, r.text
    assert http(host, 30000, "/health_generate", key=None)[0] == 200


def test_correctness_and_acceptance_gates_refuse_a_bad_release(host, tmp_path, monkeypatch):
    """An autoregressive deploy records the reference; a speculative release whose greedy output
    departs from it, or whose drafts are not accepted, is refused and the previous one restored."""
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(tmp_path))
    good = current(host, "main")
    recorded = ["-e", "ddtree_service_correctness_reference=recorded"]  # the default is fresh (next test)
    r = deploy("-e", "ddtree_service_algorithm=none", limit="svc-b300")
    assert r.returncode == 0, r.text
    ref = json.loads((tmp_path / "references" / "kimi-k2.6" / "svc-b300-main.json").read_text())
    assert (ref["host"], ref["instance"], ref["family"], ref["max_new_tokens"]) == ("svc-b300", "main", "b300", 32)
    # the four prompts alone, eight at once, one long output
    assert len(ref["outputs"]) == 13 and [len(o) for o in ref["outputs"]] == [32] * 12 + [256]
    r = deploy(*recorded, limit="svc-b300")  # DFLASH again: same greedy output, accept length 3.4 >= 1.5
    assert r.returncode == 0, r.text
    assert current(host, "main") == good
    host.run_test("mkdir -p /etc/ddtree-sglang-double && echo '%s' > /etc/ddtree-sglang-double/faults.json"
                  % json.dumps([{"match": "--max-running-requests 95", "mode": "wrong_tokens_batched:3"},
                                {"match": "--max-running-requests 94", "mode": "accept_collapsed"}]))
    r = deploy(*recorded, *overrides(max_running_requests=95), limit="svc-b300")
    assert r.returncode != 0
    assert "failed its admission gate" in r.text and "correctness against svc-b300" in r.text, r.text
    # wrong only under batching (TensorRT-LLM #17110): the four prompts alone pass, the batch wave is refused
    assert "batch request 0 of 8 (prompt 0): output departs from the reference at token 3" in r.text, r.text
    assert "): prompt 0: output departs" not in r.text
    assert "Restored the previous release %s: healthy again" % good in r.text, r.text
    assert current(host, "main") == good
    r = deploy(*recorded, *overrides(max_running_requests=94), limit="svc-b300")
    assert r.returncode != 0
    assert "acceptance: mean accept length 1.00 over 13 requests is under the floor 1.50" in r.text, r.text
    assert current(host, "main") == good
    assert json.loads(http(host, 30000, "/server_info")[1])["max_running_requests"] == 128


def test_a_fresh_reference_is_the_same_release_without_speculation(host, tmp_path, monkeypatch):
    """The default (ddtree_service_correctness_reference: fresh), with no reference recorded anywhere: each new
    speculative release is first started without its --speculative-* flags and its greedy outputs recorded
    for that release (keyed by its id), then started as deployed and compared. A release whose speculation
    corrupts the output (the stand-in's fault on --max-running-requests 95, after the previous test) is
    refused against its own autoregressive output, without any opt-in, and the release from before the
    deploy is restored, not the autoregressive one; a good one is admitted with the old release as its
    rollback target; a re-run starts nothing; the explicit opt-out is said in words."""
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(tmp_path))
    refs = tmp_path / "references" / "kimi-k2.6"
    good = current(host, "main")
    r = deploy(*overrides(max_running_requests=95), limit="svc-b300")
    assert r.returncode != 0
    assert "batch request 0 of 8 (prompt 0): output departs from the reference at token 3" in r.text, r.text
    assert "Restored the previous release %s: healthy again" % good in r.text, r.text
    assert current(host, "main") == good
    [ref_file] = refs.glob("svc-b300-main@*.json")
    ref = json.loads(ref_file.read_text())
    ar_launch = host.file("%s/main/releases/%s/launch" % (ROOT, ref["release"])).content_string
    assert "--max-running-requests 95" in ar_launch and "--speculative" not in ar_launch
    assert ref["speculative_release"] not in (good, ref["release"]) and ref_file.name == "svc-b300-main@%s.json" % ref["speculative_release"]

    r = deploy(*overrides(max_running_requests=93), limit="svc-b300")
    assert r.returncode == 0, r.text
    new = current(host, "main")
    ref = json.loads((refs / ("svc-b300-main@%s.json" % new)).read_text())
    assert ref["speculative_release"] == new and new != good
    assert host.check_output("basename $(readlink -f %s/main/previous)" % ROOT) == good
    assert "--speculative-algorithm DFLASH" in host.file("%s/main/current/launch" % ROOT).content_string
    pid = main_pid(host, "ddtree-sglang@main.service")
    r = deploy(*overrides(max_running_requests=93), limit="svc-b300")  # nothing new: no second fresh start
    assert r.returncode == 0 and "changed=0" in r.text, r.text
    assert main_pid(host, "ddtree-sglang@main.service") == pid
    assert "main correctness equal on 13 gate requests vs this release without speculation;" in r.text, r.text

    # the opt-out is explicit and said: the faulty release is admitted unchecked, and the report says why
    r = deploy("-e", "ddtree_service_correctness_gate=false", *overrides(max_running_requests=95), limit="svc-b300")
    assert r.returncode == 0, r.text
    assert "main correctness not checked: opted out (ddtree_service_correctness_gate=false);" in r.text, r.text
    assert deploy(limit="svc-b300").returncode == 0 and current(host, "main") == good


def test_ddtree_without_a_ddtree_series_is_refused_before_any_change(host):
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    pid, rel = main_pid(host, "ddtree-sglang@main.service"), current(host, "main")
    r = deploy("-e", "ddtree_service_algorithm=DDTREE", limit="svc-b300")
    assert r.returncode != 0
    assert "speculative algorithm DDTREE is not in sglang 0.5.23" in r.text and "apply a DDTree patch series" in r.text
    assert "--speculative-ddtree-budget is not a flag" in r.text
    assert main_pid(host, "ddtree-sglang@main.service") == pid and current(host, "main") == rel


def test_removed_flag_is_refused(host):
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    r = deploy("-e", json.dumps({"ddtree_service_extra_args": ["--cuda-graph-max-bs", "64"]}), limit="svc-b300")
    assert r.returncode != 0 and "argparse would call it ambiguous" in r.text, r.text


def test_bench_measures_baseline_and_speculative_and_restores(host, tmp_path, monkeypatch, request):
    """What the bench does, not how fast this machine is: both phases measured on the release of their
    mode, the figures recorded on the host and in bench.json, the configured release restored. The
    speed ratio is reported (the scenario's log), never asserted: it depends on the machine's load."""
    if name(host) != "svc-b300":
        pytest.skip("driven once, from svc-b300")
    before = current(host, "main")
    monkeypatch.setenv("DDTREE_REPORT_DIR", str(tmp_path))
    r = playbook("playbooks/bench.yml", "-e", json.dumps({"ddtree_bench_concurrency": [1, 4], "ddtree_bench_num_prompts": 4,
                                                          "ddtree_bench_input_len": 16, "ddtree_bench_output_len": 48}),
                 limit="svc-b300")
    assert r.returncode == 0, r.text
    row = json.loads((tmp_path / "bench.json").read_text())["hosts"]["svc-b300"]
    assert [lv["concurrency"] for lv in row["levels"]] == [1, 4] and row["algorithm"] == "DFLASH"
    assert sorted(row["modes"]) == ["none", "speculative"]
    for mode in ("none", "speculative"):  # each phase ran every request to the end, at each concurrency
        assert [m["concurrency"] for m in row["modes"][mode]] == [1, 4], row["modes"][mode]
        assert all(m["output_tokens"] == 4 * 48 and m["output_tok_per_s"] > 0 for m in row["modes"][mode])
    for lv in row["levels"]:
        assert lv["baseline_tok_s"] > 0 and lv["speculative_tok_s"] > 0 and lv["ttft_ms"] > 0
        assert lv["accept_length"] == 3.4  # the speculative phase ran against the speculative release
    # recorded on the host for the rollout's bench gate: the same row
    assert json.loads(host.file("/var/lib/ddtree/bench.json").content_string) == row
    assert current(host, "main") == before  # the configured release serves again
    assert json.loads(http(host, 30000, "/server_info")[1])["speculative_algorithm"] == "DFLASH"
    rep = playbook("playbooks/report.yml", limit=None)
    assert rep.returncode == 0, rep.text
    md = (tmp_path / "fleet.md").read_text()
    # the stand-in's venv has no importable sglang.bench_serving: the built-in generator measured
    assert row["engine"] == "builtin" and "| svc-b300 | b300 | DFLASH | builtin | 1 |" in md
    # the speed ratio, reported only (the stand-in sleeps 2.15x less per token when speculating; under load
    # the measured ratio is anything): benchmarks/ is where speed is judged
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("bench (report only, not asserted): " + "; ".join(
            "c=%d %.1f -> %.1f tok/s (%sx)" % (lv["concurrency"], lv["baseline_tok_s"], lv["speculative_tok_s"], lv["speedup"])
            for lv in row["levels"]))


def test_second_run_and_check_mode_change_nothing(host):
    if name(host) != "svc-b300":
        pytest.skip("the whole fleet, once")
    r = deploy("--check", "--diff")
    assert r.returncode == 0 and "changed=0" in r.text and "failed=0" in r.text, r.text
    assert other("svc-rtx").service("ddtree-sglang@b.service").is_running
