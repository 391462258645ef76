"""The shipped SGLang series against the real pinned wheel, and the strict diff applier."""
import ast
import hashlib
import types

import pytest
from helpers import series

from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_patch as sp


def sha(b):
    return hashlib.sha256(b).hexdigest()


def patched(site, path):
    doc = series()
    data = (site / path).read_bytes()
    for p in doc["patches"]:
        hunks = sp.parse_diff(p["diff"]).get(path)
        if hunks:
            data = sp.apply_hunks(data, hunks)
    return data


def function_from(source, name, env):
    """Compile one top-level function of a patched module on its own and return it."""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    code = compile(ast.Module(body=[fn], type_ignores=[]), name, "exec")
    ns = dict(env)
    exec(code, ns)  # noqa: S102 - the patched function itself, to run its behaviour
    return ns[name]


def test_series_is_for_the_pinned_version_and_lists_real_files(sglang_site):
    doc = series()
    assert doc["sglang_version"] == "0.5.23"
    assert len(doc["patches"]) >= 2
    for p in doc["patches"]:
        assert p["description"].strip() and p["upstream"] and p["families"]
        assert set(sp.parse_diff(p["diff"])) == {f["path"] for f in p["files"]}, p["name"]
        for f in p["files"]:
            assert sha((sglang_site / f["path"]).read_bytes()) == f["before"], (p["name"], f["path"])


def test_every_patch_applies_to_the_wheel_gives_its_after_hash_and_compiles(sglang_site):
    for p in series()["patches"]:
        for f in p["files"]:
            data = sp.apply_hunks((sglang_site / f["path"]).read_bytes(), sp.parse_diff(p["diff"])[f["path"]])
            assert sha(data) == f["after"], p["name"]
            compile(data, f["path"], "exec")
            assert data != (sglang_site / f["path"]).read_bytes()


def test_every_patch_reverts_exactly(sglang_site):
    for p in series()["patches"]:
        for f in p["files"]:
            orig = (sglang_site / f["path"]).read_bytes()
            hunks = sp.parse_diff(p["diff"])[f["path"]]
            assert sp.apply_hunks(sp.apply_hunks(orig, hunks), hunks, reverse=True) == orig


def test_vlm_warmup_skip_env_is_read_as_a_switch(sglang_site):
    src = patched(sglang_site, "sglang/srt/entrypoints/http_server.py")
    skipped = function_from(src, "_vlm_warmup_skipped", {"os": __import__("os")})
    assert skipped({"SGLANG_SKIP_VLM_WARMUP": "1"}) is True
    assert skipped({"SGLANG_SKIP_VLM_WARMUP": " TRUE "}) is True
    assert skipped({"SGLANG_SKIP_VLM_WARMUP": "0"}) is False
    assert skipped({}) is False
    # the switch only turns the image request off: is_vlm is reset right after it is computed
    warmup = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "_execute_server_warmup")
    text = ast.unparse(warmup)
    assert "if is_vlm and _vlm_warmup_skipped():" in text
    assert text.index("_vlm_warmup_skipped()") < text.index("request_name = '/v1/chat/completions'")


def test_dflash_cap_follows_an_explicit_decode_graph_size(sglang_site):
    src = patched(sglang_site, "sglang/srt/arg_groups/speculative_hook.py")
    cap = function_from(src, "_dflash_default_max_running_requests", {})
    assert cap(types.SimpleNamespace(cuda_graph_max_bs_decode=128)) == 128
    assert cap(types.SimpleNamespace(cuda_graph_max_bs_decode=None)) == 48
    assert cap(types.SimpleNamespace()) == 48
    handle = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "_handle_dflash")
    assert "max_running_requests=default_cap" in ast.unparse(handle)
    assert "max_running_requests=48" not in ast.unparse(handle)


def test_a_hunk_that_does_not_match_is_refused():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert sp.apply_hunks(b"a\nb\n", sp.parse_diff(diff)["x.py"]) == b"a\nc\n"
    with pytest.raises(sp.PatchError, match="line 1 does not match"):
        sp.apply_hunks(b"a\nB\n", sp.parse_diff(diff)["x.py"])


def test_plan_names_the_drifted_file_and_both_hashes():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    patch = {"name": "p1", "files": [{"path": "x.py", "before": sha(b"a\nb\n"), "after": sha(b"a\nc\n")}]}
    diffs = {"p1": sp.parse_diff(diff)}
    assert sp.plan({"x.py": b"a\nb\n"}, None, {}, [patch], diffs, True) == {"x.py": (b"a\nb\n", b"a\nc\n")}
    assert sp.plan({"x.py": b"a\nc\n"}, None, {}, [patch], diffs, True) == {"x.py": (b"a\nb\n", b"a\nc\n")}
    with pytest.raises(sp.PatchError) as e:
        sp.plan({"x.py": b"a\nz\n"}, None, {}, [patch], diffs, True)
    assert "x.py" in str(e.value) and sha(b"a\nz\n") in str(e.value) and sha(b"a\nb\n") in str(e.value)


def test_patches_on_one_file_must_chain():
    p1 = {"name": "p1", "files": [{"path": "x", "before": "h0", "after": "h1"}]}
    p2 = {"name": "p2", "files": [{"path": "x", "before": "hX", "after": "h2"}]}
    with pytest.raises(sp.PatchError, match="not consistent"):
        sp.chains([p1, p2])
