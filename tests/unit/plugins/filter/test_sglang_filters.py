"""Command lines rendered from every family profile, checked against the real sglang 0.5.23
wheel's flag contract; instances, pinning and environment."""
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.ddtree.fleet.plugins.module_utils.instances import merge

from ansible_collections.ddtree.fleet.plugins.filter import sglang as f
from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_flags as sf

ROOT = Path(__file__).resolve().parents[4]
FAMILIES = sorted(p.stem for p in (ROOT / "profiles").glob("*.yml") if not p.name.startswith("_"))


def profile(family):
    base = yaml.safe_load((ROOT / "profiles" / "_defaults.yml").read_text())
    return merge(base, yaml.safe_load((ROOT / "profiles" / ("%s.yml" % family)).read_text()))


@pytest.fixture(scope="module")
def contract(sglang_site):
    return sf.read_contract(str(sglang_site))


def render(family, **kw):
    args = dict(drafter_path="/opt/ddtree/models/drafter", served_model_name="kimi-k2.6",
                reasoning_parser="kimi_k2", tool_call_parser="kimi_k2")
    args.update(kw)
    return f.sglang_argv(profile(family), "/opt/ddtree/models/target", **args)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_renders_a_command_line_sglang_accepts(contract, family):
    argv = render(family)
    assert sf.check_argv(contract, argv) == []
    assert argv[argv.index("--max-running-requests") + 1] == "128"  # never DFLASH's silent 48
    assert "--cuda-graph-max-bs-decode" in argv and "--api-key" not in argv


@pytest.mark.parametrize("family", FAMILIES)
def test_autoregressive_baseline_renders_too(contract, family):
    argv = render(family, algorithm="none")
    assert sf.check_argv(contract, argv) == [] and "--speculative-algorithm" not in argv


@pytest.mark.parametrize("family", FAMILIES)
def test_the_fresh_reference_runs_the_same_command_line_without_speculation(contract, family):
    argv = render(family)
    ar = f.sglang_argv_autoregressive(argv)
    assert sf.check_argv(contract, ar) == [] and not [a for a in ar if a.startswith("--speculative")]
    assert "--speculative-algorithm" in argv and len(ar) < len(argv)
    kept = [a for a in argv if a not in ar]  # only speculative flags and their values went
    assert all(a.startswith("--speculative-") or not a.startswith("--") for a in kept)
    assert ar[ar.index("--tp-size") + 1] == argv[argv.index("--tp-size") + 1] and ar[-4:] == argv[-4:]


def test_family_choices_reach_the_command_line():
    b300, rtx = render("b300"), render("rtx_pro_6000")
    assert b300[b300.index("--attention-backend") + 1] == "trtllm_mla" and b300[b300.index("--page-size") + 1] == "64"
    assert rtx[rtx.index("--ep-size") + 1] == "8" and "--disable-prefill-cuda-graph" in rtx
    assert "--cuda-graph-backend-prefill" not in rtx
    assert rtx[rtx.index("--speculative-draft-attention-backend") + 1] == "triton"


def test_ddtree_switches_backend_and_is_refused_by_0_5_23(contract):
    argv = render("b300", algorithm="ddtree")
    assert argv[argv.index("--attention-backend") + 1] == "triton" and argv[argv.index("--page-size") + 1] == "1"
    assert argv[argv.index("--speculative-ddtree-budget") + 1] == "8" and "--disable-overlap-schedule" in argv
    problems = sf.check_argv(contract, argv)
    assert any("DDTREE is not in sglang 0.5.23" in p for p in problems)
    assert any("--speculative-ddtree-budget is not a flag" in p for p in problems)


def test_a_flag_0_5_23_removed_is_refused(contract):
    argv = render("h200", extra_args=["--cuda-graph-max-bs", "256", "--enable-dp-attention"])
    problems = sf.check_argv(contract, argv)
    assert any("--cuda-graph-max-bs is not a flag" in p and "ambiguous" in p for p in problems)
    assert any("--enable-dp-attention is deprecated" in p for p in problems)


def test_drafter_is_required_for_speculation():
    with pytest.raises(Exception, match="needs a drafter path"):
        f.sglang_argv(profile("b300"), "/m", drafter_path=None)


def test_server_expect_reads_values_back():
    exp = f.sglang_server_expect(render("rtx_pro_6000"))
    assert exp["tp_size"] == 8 and exp["ep_size"] == 8 and exp["speculative_algorithm"] == "DFLASH"
    assert exp["max_running_requests"] == 128 and exp["served_model_name"] == "kimi-k2.6"


def gpus(affinities):
    return [{"index": i, "cpu_affinity": a} for i, a in enumerate(affinities)]


def settings(**kw):
    s = dict(profile=profile("rtx_pro_6000"), gpus=gpus(["0-3,8-11"] * 2 + ["4-7,12-15"] * 2), cpu_pinning=True,
             online_cpus=16, model_path="/m", drafter_path="/d", served_model_name="k", provides={}, unit="ddtree-sglang")
    s.update(kw)
    return s


def test_instances_split_gpus_pin_cpus_and_merge_their_profile():
    out = f.sglang_instances([{"name": "a", "port": 30000, "gpus": [0, 1], "profile": {"parallelism": {"tp": 2, "ep": 2}}},
                              {"name": "b", "port": 30001, "gpus": [2, 3], "profile": {"parallelism": {"tp": 2, "ep": 2}}}],
                             settings())
    a, b = out
    assert (a["env"]["CUDA_VISIBLE_DEVICES"], b["env"]["CUDA_VISIBLE_DEVICES"]) == ("0,1", "2,3")
    assert (a["cpus"], b["cpus"]) == ("0-3 8-11", "4-7 12-15")
    assert a["expect"]["tp_size"] == 2 and a["expect"]["port"] == 30000 and b["expect"]["port"] == 30001
    assert a["env"]["NCCL_P2P_LEVEL"] == "SYS" and a["env"]["HOME"] == "/var/lib/ddtree-sglang/a"
    assert a["unit"] == "ddtree-sglang@a.service"


def test_pinning_keeps_online_cpus_and_refuses_none():
    one = [{"name": "a", "port": 1, "gpus": [2]}]
    assert f.sglang_instances(one, settings(online_cpus=6))[0]["cpus"] == "4-5"
    with pytest.raises(Exception, match="not online on this host"):
        f.sglang_instances(one, settings(online_cpus=2))
    assert f.sglang_instances(one, settings(online_cpus=2, cpu_pinning=False))[0]["cpus"] == ""


def test_vision_warmup_skip_uses_the_patch_or_skips_all_warmup():
    inst = [{"name": "a", "port": 1}]
    with_patch = f.sglang_instances(inst, settings(provides={"skip_vision_warmup": {"SGLANG_SKIP_VLM_WARMUP": "1"}}))[0]
    without = f.sglang_instances(inst, settings())[0]
    assert with_patch["env"]["SGLANG_SKIP_VLM_WARMUP"] == "1" and "--skip-server-warmup" not in with_patch["argv"]
    assert "SGLANG_SKIP_VLM_WARMUP" not in without["env"] and "--skip-server-warmup" in without["argv"]


def test_sglang_status_rows_from_the_status_reads():
    import base64
    import json as _json

    def slurped(name, port, argv, rid):
        rel = {"id": rid, "argv": argv}
        return {"content": base64.b64encode(_json.dumps(rel).encode()).decode(),
                "item": {"item": {"name": name, "port": port, "gpus": [0, 1]}, "stat": {"exists": True}}}
    results = [{"healthy": True, "version": "0.5.23", "device": "cpu",
                "item": slurped("main", 30000, ["--tp-size", "8", "--speculative-algorithm", "DFLASH"], "abc")},
               {"healthy": False, "item": slurped("b", 30001, ["--tp-size", "8"], "def")}]
    rows = f.sglang_status(results)
    assert rows == [{"name": "main", "port": 30000, "gpus": [0, 1], "release": "abc", "algorithm": "DFLASH", "healthy": True,
                     "version": "0.5.23", "device": "cpu"},
                    {"name": "b", "port": 30001, "gpus": [0, 1], "release": "def", "algorithm": "none", "healthy": False,
                     "version": None, "device": None}]
    assert f.sglang_status([]) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_a_serving_group_member_renders_its_rank_and_sglang_accepts_it(contract, family):
    """Every member of a two-host group runs the same command line but for --node-rank, accepted by the
    real 0.5.23 flag contract; the health gate reads --nnodes and --node-rank back from /server_info."""
    group = {"nodes": 2, "init_addr": "10.0.0.1:20000"}
    ranks = [render(family, group=dict(group, rank=r)) for r in (0, 1)]
    for r, argv in enumerate(ranks):
        assert sf.check_argv(contract, argv) == []
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == str(r)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:20000"
        assert f.sglang_server_expect(argv)["node_rank"] == r and f.sglang_server_expect(argv)["nnodes"] == 2
    differ = [i for i, (a, b) in enumerate(zip(*ranks)) if a != b]
    assert len(ranks[0]) == len(ranks[1]) and [ranks[0][i - 1] for i in differ] == ["--node-rank"]


def test_a_group_member_gets_the_nccl_interfaces_a_host_alone_does_not():
    env = {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_10,mlx5_11"}
    group = {"nodes": 2, "rank": 1, "init_addr": "10.0.0.1:20000"}
    member = f.sglang_instances([{"name": "main", "port": 30000}], settings(group=group, group_env=env))[0]
    alone = f.sglang_instances([{"name": "main", "port": 30000}], settings(group_env=env))[0]
    assert member["env"]["NCCL_IB_HCA"] == "=mlx5_10,mlx5_11" and "NCCL_IB_HCA" not in alone["env"]
    assert "--nnodes" in member["argv"] and "--nnodes" not in alone["argv"]


def test_a_day_two_fallback_serves_that_instance_without_speculation():
    two = [{"name": "a", "port": 30000, "gpus": [0]}, {"name": "b", "port": 30001, "gpus": [1]}]
    out = f.sglang_instances(two, settings(fallback=["b"]))
    assert out[0]["algorithm"] != "none" and "--speculative-algorithm" in out[0]["argv"]
    assert out[1]["algorithm"] == "none" and not [a for a in out[1]["argv"] if a.startswith("--speculative")]
    # the same command line as the speculative one without its --speculative-* flags (its autoregressive release)
    spec = f.sglang_instances(two, settings())[1]["argv"]
    assert out[1]["argv"] == f.sglang_argv_autoregressive(spec)


def test_sglang_references_keep_those_made_from_the_same_gate_requests_in_order():
    req = {"prompts": ["a", "b"], "max_new_tokens": 32, "batch": 8, "long_tokens": 256}
    ref = dict(req, host="h1", instance="main", release="r1", outputs=[[1], [2]])
    texts = [
        json.dumps(dict(ref, release="r0")),
        json.dumps(dict(ref, host="h2")),                       # another host's
        json.dumps(dict(ref, prompts=["a"])),                   # other prompts
        json.dumps(dict(ref, max_new_tokens=64)),               # another output length
        json.dumps({k: v for k, v in ref.items() if k != "batch"}),  # from before the batched wave
        json.dumps(dict(ref, long_tokens=0)),                   # another long output
        "not json", "[1, 2]",                                   # no reference at all
        json.dumps(dict(ref, release="r1")),
    ]
    assert [(r["host"], r["release"]) for r in f.sglang_references(texts, req)] == [("h1", "r0"), ("h2", "r1"), ("h1", "r1")]
    assert [(r["host"], r["release"]) for r in f.sglang_references(texts, req, host="h1")] == [("h1", "r0"), ("h1", "r1")]
    # the gate's settings arrive from Ansible as text where the inventory wrote them so
    assert len(f.sglang_references(texts, dict(req, max_new_tokens="32", batch="8", long_tokens="256"), host="h2")) == 1
    assert f.sglang_references([], req) == []
