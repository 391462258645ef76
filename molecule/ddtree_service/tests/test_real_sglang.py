"""Verify ddtree_service against the real SGLang 0.5.23 (svc-cpu): python -m sglang.launch_server from
the CPU test venv (tests/sglang_cpu), patched by the sglang_patch role, runs under the production unit
(hardening, the API key as a credential, the release switch, the health gate) and answers as itself."""
import hashlib
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import playbook  # noqa: E402

testinfra_hosts = ["ansible://svc-cpu"]
KEY = "molecule-secret-4f1c9a"
UNIT = "ddtree-sglang@main.service"
VENV = os.path.join(os.environ.get("DDTREE_SGLANG_CPU", "/nonexistent"), "venv")


def http(host, path, key=KEY, data=None):
    auth = "-H 'Authorization: Bearer %s'" % key if key else ""
    body = "-H 'Content-Type: application/json' -d '%s'" % json.dumps(data) if data is not None else ""
    out = host.check_output("curl -s -m 120 -o /tmp/body -w '%%{http_code}' %s %s http://127.0.0.1:30000%s" % (auth, body, path))
    return int(out), host.file("/tmp/body").content_string


def test_the_real_server_answers_as_itself(host):
    code, body = http(host, "/server_info")
    info = json.loads(body)
    assert code == 200 and info["version"] == "0.5.23" and info["device"] == "cpu"
    assert info["attention_backend"] == "torch_native" and info["max_running_requests"] == 4
    assert info["served_model_name"] == "tiny-llama" and info["model_path"].endswith("/models/target")
    assert len(info) > 300  # the real server_info, not the stand-in's handful of keys


def test_it_runs_from_the_venv_under_the_production_unit(host):
    svc = host.service(UNIT)
    assert svc.is_running and svc.is_enabled
    assert host.check_output("systemctl show -p User --value %s" % UNIT) == "ddtree"
    pid = int(host.check_output("systemctl show -p MainPID --value %s" % UNIT))
    argv = host.file("/proc/%d/cmdline" % pid).content_string.split("\0")
    assert argv[1:3] == ["-m", "sglang.launch_server"] and os.path.realpath(argv[0]).startswith("/usr/bin/python3")
    assert "--device" in argv and KEY not in " ".join(argv)  # the key is in the credential, never argv
    journal = host.check_output("journalctl -u %s --no-pager -o cat" % UNIT)
    assert "The server is fired up and ready to roll!" in journal  # SGLang's own startup line


def test_the_api_key_from_the_credential_is_enforced(host):
    assert http(host, "/v1/models", key="")[0] == 401
    code, body = http(host, "/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["id"] == "tiny-llama"


def test_it_generates_and_exports_metrics(host):
    code, body = http(host, "/generate", data={"text": "The fleet", "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
    out = json.loads(body)
    assert code == 200 and len(out["output_ids"]) == 8 and out["meta_info"]["completion_tokens"] == 8
    code, metrics = http(host, "/metrics")
    assert code == 200 and "sglang:num_running_reqs" in metrics


def test_the_patch_series_is_applied_to_the_real_sglang(host):
    stamp = json.loads(host.file(VENV + "/.ddtree/sglang-patch.json").content_string)
    assert stamp["patches"] == ["0001-vlm-warmup-skip-image", "0002-dflash-running-cap-from-cuda-graph-size"]
    assert stamp["provides"] == {"skip_vision_warmup": {"SGLANG_SKIP_VLM_WARMUP": "1"}}
    for path, sums in stamp["files"].items():  # the running server imported these patched files
        data = host.file("%s/lib/python3.11/site-packages/%s" % (VENV, path)).content
        assert hashlib.sha256(data).hexdigest() == sums["after"], path


def test_the_bench_is_the_real_sglang_bench_serving(host):
    """ddtree.fleet.sglang_bench measures with the venv's own sglang.bench_serving where it imports."""
    model = os.path.join(os.environ.get("DDTREE_SGLANG_CPU", "/nonexistent"), "models", "target")
    r = host.ansible("ddtree.fleet.sglang_bench",
                     "url=http://127.0.0.1:30000 api_key=%s venv=%s tokenizer=%s concurrency=1,2 num_prompts=4 "
                     "input_len=16 output_len=8" % (KEY, VENV, model), check=False, become=True)
    assert r["engine"] == "sglang.bench_serving", r
    assert [lv["concurrency"] for lv in r["results"]] == [1, 2]
    for lv in r["results"]:
        assert lv["requests"] == 4 and lv["errors"] == 0 and lv["output_tokens"] == 32 and lv["output_tok_per_s"] > 0


def test_the_gate_recorded_the_real_servers_greedy_outputs_as_the_reference(host):
    """Algorithm none: the admission gate's greedy outputs are the correctness reference, and they are
    what the real server generates (the same ids again, over HTTP, at temperature 0)."""
    refs = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "references", "tiny-llama")
    with open(os.path.join(refs, "svc-cpu-main.json")) as f:
        ref = json.load(f)
    assert (ref["host"], ref["model"], ref["max_new_tokens"], len(ref["outputs"])) == ("svc-cpu", "tiny-llama", 32, 4 + 8 + 1)
    # the four prompts alone, eight at once (the server batches them), one long output
    assert (ref["batch"], ref["long_tokens"], len(ref["outputs"][-1])) == (8, 256, 256)
    assert ref["requests"][4] == "batch request 0 of 8 (prompt 0)" and ref["requests"][-1] == "long output (prompt 0, 256 tokens)"
    code, body = http(host, "/generate", data={"text": ref["prompts"][1], "sampling_params": {
        "temperature": 0, "max_new_tokens": 32, "ignore_eos": True}})
    assert code == 200 and json.loads(body)["output_ids"] == ref["outputs"][1]
    assert len(set(ref["outputs"][0])) > 1  # a real model's ids, not a constant


def deploy_cpu(profile, draft):
    return playbook("molecule/ddtree_service/converge.yml", "-e",
                    json.dumps({"cpu_test_profile": profile, "cpu_test_draft": draft}), limit="svc-cpu")


def test_speculation_on_the_real_server_is_gated_on_acceptance_and_correctness(host):
    """STANDALONE speculation (the test bed's DFLASH: a tiny draft model) on the real server: a draft the
    target rejects is refused by the acceptance gate (its output stays correct) and the autoregressive
    release returns; a draft that copies the target is admitted, its greedy output the reference's."""
    refs = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "references", "tiny-llama")
    with open(os.path.join(refs, "svc-cpu-main.json")) as f:
        ref = json.load(f)
    r = deploy_cpu("profile_standalone.yml", "draft-collapsed")
    assert r.returncode != 0
    m = re.search(r"acceptance: mean accept length ([0-9.]+) over 13 requests is under the floor 1.50", r.text)
    assert m and float(m.group(1)) < 1.3, r.text[-3000:]
    assert "correctness against" not in r.text  # a rejected draft slows decoding, it does not change the output
    assert "healthy again" in r.text, r.text[-3000:]
    info = json.loads(http(host, "/server_info")[1])
    assert info["speculative_algorithm"] in (None, "", "NONE")  # the autoregressive release serves again

    r = deploy_cpu("profile_standalone.yml", "draft-good")
    assert r.returncode == 0, r.text[-3000:]
    info = json.loads(http(host, "/server_info")[1])
    assert info["speculative_algorithm"] == "STANDALONE" and info["speculative_num_draft_tokens"] == 4
    for prompt, expected in zip(ref["prompts"], ref["outputs"]):
        code, body = http(host, "/generate", data={"text": prompt, "sampling_params": {
            "temperature": 0, "max_new_tokens": 32, "ignore_eos": True}})
        out = json.loads(body)
        assert code == 200 and out["output_ids"] == expected  # speculation left greedy output unchanged
        assert out["meta_info"]["spec_accept_length"] >= 1.5
