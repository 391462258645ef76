"""ddtree.fleet.sglang_bench: which engine measures, and how sglang.bench_serving's figures are mapped.
A fake venv python stands in for the serving venv here (the real one is exercised by
molecule/ddtree_service on the real server); it records its argv and environment."""
import stat

FAKE_PY = r"""#!/bin/sh
# fake venv python: 'import sglang.bench_serving' works; '-m sglang.bench_serving' writes one result line
if [ "$1" = "-c" ]; then exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "--output-file" ] && out=$a; prev=$a; done
printf '%s\n' "$*" >> "$(dirname "$0")/argv.log"
printf '%s\n' "${OPENAI_API_KEY:-none}" >> "$(dirname "$0")/key.log"
printf '{"completed": 4, "total_output_tokens": 32, "duration": 2.0, "output_throughput": 16.0, ' >> "$out"
printf '"mean_ttft_ms": 50.0, "p99_ttft_ms": 80.0, "mean_tpot_ms": 20.0}\n' >> "$out"
"""


def fake_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PY)
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return venv


def test_the_venvs_bench_serving_measures_with_the_key_in_its_environment(tmp_path, run_module):
    venv = fake_venv(tmp_path)
    r = run_module("sglang_bench", url="http://127.0.0.1:9", api_key="s3cret-key", venv=str(venv), tokenizer="/m",
                   concurrency=[1, 2], num_prompts=4, input_len=16, output_len=8)
    assert r["engine"] == "sglang.bench_serving" and not r.get("failed"), r
    assert r["results"][0] == {"concurrency": 1, "requests": 4, "errors": 0, "first_error": None, "output_tokens": 32,
                               "seconds": 2.0, "output_tok_per_s": 16.0, "ttft_ms_mean": 50.0, "ttft_ms_p99": 80.0,
                               "decode_tok_per_s_per_request": 50.0, "accept_length": None}
    argv = (venv / "bin" / "argv.log").read_text().splitlines()
    assert len(argv) == 2 and "--max-concurrency 2" in argv[1] and "--dataset-name random-ids" in argv[0]
    assert "s3cret-key" not in " ".join(argv) and "--tokenizer /m" in argv[0]
    assert (venv / "bin" / "key.log").read_text().split() == ["s3cret-key", "s3cret-key"]


def test_engine_sglang_needs_the_venv(tmp_path, run_module):
    r = run_module("sglang_bench", url="http://127.0.0.1:9", venv=str(tmp_path / "none"), engine="sglang")
    assert r["failed"] and "does not import" in r["msg"]


def test_builtin_is_used_without_a_venv_and_says_so(run_module):
    r = run_module("sglang_bench", url="http://127.0.0.1:9", concurrency=[1], num_prompts=1, input_len=4, output_len=4, timeout=2)
    assert r["failed"] and r["engine"] == "builtin" and "every request at concurrency 1 failed (builtin)" in r["msg"]
