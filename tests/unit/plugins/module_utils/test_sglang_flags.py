"""The flag contract read statically from the real sglang 0.5.23 wheel."""
import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_flags as sf


@pytest.fixture(scope="module")
def contract(sglang_site):
    return sf.read_contract(str(sglang_site))


def test_version_and_algorithms(contract):
    assert contract["version"] == "0.5.23"
    algos = contract["speculative_algorithms"]
    assert {"DFLASH", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "DSPARK"} <= set(algos)
    assert "DDTREE" not in algos and "NONE" not in algos
    assert "MY_SPEC" not in algos  # the register() example in a docstring is not code


@pytest.mark.parametrize("flag,dest,kind,typ", [
    ("--model-path", "model_path", "value", "str"),
    ("--model", "model_path", "value", "str"),
    ("--tp-size", "tp_size", "value", "int"),
    ("--tensor-parallel-size", "tp_size", "value", "int"),
    ("--ep-size", "ep_size", "value", "int"),
    ("--attn-dp-size", "attn_dp_size", "value", "int"),
    ("--mem-fraction-static", "mem_fraction_static", "value", "float"),
    ("--cuda-graph-max-bs-decode", "cuda_graph_max_bs_decode", "value", "int"),
    ("--trust-remote-code", "trust_remote_code", "flag", "bool"),
    ("--enable-metrics", "enable_metrics", "flag", "bool"),
    ("--speculative-draft-model-path", "speculative_draft_model_path", "value", "str"),
    ("--speculative-draft-model", "speculative_draft_model_path", "value", "str"),
    ("--cuda-graph-bs-decode", "cuda_graph_bs_decode", "list", "int"),
    ("--reasoning-parser", "reasoning_parser", "value", "str"),
])
def test_known_flags(contract, flag, dest, kind, typ):
    opt = contract["options"][flag]
    assert (opt["dest"], opt["kind"], opt["type"]) == (dest, kind, typ)


def test_choices(contract):
    o = contract["options"]
    assert {"triton", "fa3", "flashinfer", "trtllm_mla"} <= set(o["--attention-backend"]["choices"])
    assert "cutlass_mla" not in o["--attention-backend"]["choices"]  # gone in 0.5.23
    assert {"auto", "kimi_k2"} <= set(o["--reasoning-parser"]["choices"])
    assert "kimi_k2" in o["--tool-call-parser"]["choices"]
    assert set(o["--speculative-draft-attention-backend"]["choices"]) >= {"flashinfer", "fa3", "triton"}
    assert "none" in o["--moe-a2a-backend"]["choices"]


def test_deprecated_and_removed(contract):
    o = contract["options"]
    assert o["--disable-cuda-graph"]["deprecated"] and o["--enable-dp-attention"]["deprecated"]
    for gone in ("--cuda-graph-max-bs", "--cuda-graph-bs", "--enable-ep-moe", "--speculative-ddtree-budget"):
        assert gone not in o


def test_a_full_kimi_command_line_passes(contract):
    argv = ["--model-path", "/opt/ddtree/models/kimi", "--trust-remote-code", "--tp-size", "8", "--ep-size", "1",
            "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/opt/ddtree/models/drafter",
            "--speculative-num-draft-tokens", "8", "--attention-backend", "triton", "--page-size", "1",
            "--cuda-graph-backend-decode", "full", "--cuda-graph-max-bs-decode", "128",
            "--disable-prefill-cuda-graph", "--max-running-requests", "128", "--mem-fraction-static", "0.85",
            "--host", "0.0.0.0", "--port", "30000", "--enable-metrics", "--reasoning-parser", "kimi_k2",
            "--tool-call-parser", "kimi_k2", "--cuda-graph-bs-decode", "1", "2", "4", "--moe-a2a-backend", "none"]
    assert sf.check_argv(contract, argv) == []


@pytest.mark.parametrize("argv,expect", [
    (["--cuda-graph-max-bs", "8"], "ambiguous: --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--enable-ep-moe"], "--enable-ep-moe is not a flag of sglang 0.5.23"),
    (["--speculative-algorithm", "DDTREE"], "apply a DDTree patch series"),
    (["--speculative-algorithm", "dflash"], None),
    (["--attention-backend", "cutlass_mla"], "cutlass_mla is not one of"),
    (["--tp-size", "eight"], "not a valid int"),
    (["--tp", "8"], "--tp is not a flag"),
    (["--disable-cuda-graph"], "deprecated"),
    (["--trust-remote-code=yes"], "takes no value"),
    (["--model-path"], "needs a value"),
    (["stray"], "not a flag"),
    (["--speculative-draft-attention-backend", "trtllm_mla"], "not one of"),
])
def test_bad_command_lines(contract, argv, expect):
    problems = sf.check_argv(contract, argv)
    if expect is None:
        assert problems == []
    else:
        assert any(expect in p for p in problems), problems


def test_cached_contract_is_the_same_and_a_patch_invalidates_it(sglang_venv, tmp_path):
    _venv, site = sglang_venv
    cache = tmp_path / "cache"
    first, hit = sf.read_contract_cached(str(site), str(cache))
    assert not hit and first == sf.read_contract(str(site))
    again, hit = sf.read_contract_cached(str(site), str(cache))
    assert hit and again == first
    # what a patch series does: a register() call appears in one file
    spec = site / "sglang" / "srt" / "speculative" / "spec_registry.py"
    spec.write_text(spec.read_text() + '\nSpeculativeAlgorithm.register("DDTREE_TEST")\n')
    patched, hit = sf.read_contract_cached(str(site), str(cache))
    assert not hit and "DDTREE_TEST" in patched["speculative_algorithms"]
    assert "DDTREE_TEST" not in first["speculative_algorithms"]


def test_check_mode_reads_but_never_writes_the_cache(sglang_venv, tmp_path):
    _venv, site = sglang_venv
    cache = tmp_path / "cache"
    _contract, hit = sf.read_contract_cached(str(site), str(cache), write=False)
    assert not hit and not cache.exists()
