"""sglang_patch and sglang_flags run for real (ansible-playbook on localhost) on a copy of the wheel."""
import hashlib
import json

from helpers import series


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def files_of(doc):
    return {f["path"]: f for p in doc["patches"] for f in p["files"]}


def test_apply_idempotent_check_mode_and_exact_revert(run_module, sglang_venv):
    venv, site = sglang_venv
    doc = series()
    files = files_of(doc)

    dry = run_module("sglang_patch", check=True, diff=True, venv=str(venv), series=doc)
    assert dry["changed"] and not dry.get("failed")
    assert all(sha(site / q) == f["before"] for q, f in files.items())  # check mode wrote nothing
    assert not (venv / ".ddtree").exists()

    r = run_module("sglang_patch", venv=str(venv), series=doc)
    assert r["changed"] and r["applied"] == [p["name"] for p in doc["patches"]]
    for q, f in files.items():
        assert sha(site / q) == f["after"]
        assert list((site / q).parent.glob("__pycache__/%s.*.pyc" % (site / q).stem)), q  # byte-compiled
        assert sha(venv / ".ddtree" / "sglang-patch-orig" / q) == f["before"]
    stamp = json.loads((venv / ".ddtree" / "sglang-patch.json").read_text())
    assert stamp["series"] == doc["name"] and stamp["sglang_version"] == "0.5.23"
    assert {q: v["after"] for q, v in stamp["files"].items()} == {q: f["after"] for q, f in files.items()}

    again = run_module("sglang_patch", venv=str(venv), series=doc)
    assert not again["changed"]

    back = run_module("sglang_patch", venv=str(venv), state="absent")  # no series needed: the stamp has it
    assert back["changed"] and back["applied"] == []
    assert all(sha(site / q) == f["before"] for q, f in files.items())
    assert not (venv / ".ddtree" / "sglang-patch.json").exists()
    assert not run_module("sglang_patch", venv=str(venv), state="absent")["changed"]


def test_drift_fails_naming_the_file_and_changes_nothing(run_module, sglang_venv):
    venv, site = sglang_venv
    doc = series()
    assert run_module("sglang_patch", venv=str(venv), series=doc)["changed"]
    drifted = doc["patches"][0]["files"][0]["path"]
    with open(site / drifted, "a") as f:
        f.write("# edited by hand\n")
    before = {p: sha(p) for p in site.joinpath("sglang").rglob("*.py")}
    r = run_module("sglang_patch", venv=str(venv), series=doc)
    assert r["failed"]
    assert drifted in r["msg"] and sha(site / drifted) in r["msg"] and "nothing was changed" in r["msg"]
    assert {p: sha(p) for p in site.joinpath("sglang").rglob("*.py")} == before
    r = run_module("sglang_patch", venv=str(venv), state="absent")
    assert r["failed"] and drifted in r["msg"]


def test_unpatched_file_that_is_not_the_release_is_refused(run_module, sglang_venv):
    venv, site = sglang_venv
    doc = series()
    other = doc["patches"][1]["files"][0]["path"]
    (site / other).write_text((site / other).read_text().replace("48", "64", 1))
    untouched = doc["patches"][0]["files"][0]["path"]
    before = sha(site / untouched)
    r = run_module("sglang_patch", venv=str(venv), series=doc)
    assert r["failed"] and other in r["msg"] and doc["patches"][1]["files"][0]["before"] in r["msg"]
    assert sha(site / untouched) == before  # all or nothing: the good file was not patched either


def test_wrong_sglang_version_is_refused(run_module, sglang_venv):
    venv, site = sglang_venv
    doc = series()
    doc["sglang_version"] = "0.5.22"
    r = run_module("sglang_patch", venv=str(venv), series=doc)
    assert r["failed"] and "sglang 0.5.23" in r["msg"] and "0.5.22" in r["msg"]
    assert all(sha(site / q) == f["before"] for q, f in files_of(series()).items())


def test_a_ddtree_series_makes_ddtree_a_valid_algorithm(run_module, sglang_venv, tmp_path):
    """An operator's series that registers DDTREE and adds its budget flag turns both valid."""
    venv, site = sglang_venv
    argv = ["--model-path", "/m", "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8"]
    r = run_module("sglang_flags", venv=str(venv), argv=argv)
    assert r["failed"] and "apply a DDTree patch series" in r["msg"] and "--speculative-ddtree-budget" in r["msg"]

    spec = "sglang/srt/arg_groups/fields/spec.py"
    info = "sglang/srt/speculative/spec_info.py"
    old_spec, old_info = (site / spec).read_bytes(), (site / info).read_bytes()
    anchor = "    speculative_dflash_block_size: A[\n"
    new_spec = old_spec.decode().replace(anchor, (
        '    speculative_ddtree_budget: A[\n        Optional[int],\n        "DDTREE only. Tree node budget.",\n'
        '    ] = None\n' + anchor), 1).encode()
    new_info = old_info + b'\n\n@SpeculativeAlgorithm.register("DDTREE", supports_overlap=False)\ndef _ddtree(server_args):\n    return None\n'
    import difflib
    diff = "".join(
        "".join(difflib.unified_diff(a.decode().splitlines(True), b.decode().splitlines(True), "a/" + q, "b/" + q))
        for q, a, b in ((spec, old_spec, new_spec), (info, old_info, new_info)))
    own = {"name": "ddtree-test", "sglang_version": "0.5.23", "patches": [{
        "name": "0001-ddtree", "file": "x", "families": ["all"], "diff": diff,
        "files": [{"path": spec, "before": hashlib.sha256(old_spec).hexdigest(), "after": hashlib.sha256(new_spec).hexdigest()},
                  {"path": info, "before": hashlib.sha256(old_info).hexdigest(), "after": hashlib.sha256(new_info).hexdigest()}]}]}
    assert run_module("sglang_patch", venv=str(venv), series=own)["changed"]
    r = run_module("sglang_flags", venv=str(venv), argv=argv)
    assert not r.get("failed"), r.get("msg")
    assert "DDTREE" in r["speculative_algorithms"] and r["problems"] == []
    # switching to the shipped series goes back to the release first: DDTREE is gone again
    assert run_module("sglang_patch", venv=str(venv), series=series())["changed"]
    assert "DDTREE" not in run_module("sglang_flags", venv=str(venv))["speculative_algorithms"]
    assert (site / spec).read_bytes() == old_spec


def test_the_published_contract_checks_on_the_controller_as_the_module_does(run_module, sglang_venv):
    """sglang_patch publishes the contract it read (return_options); ddtree_service checks command lines
    against it with the sglang_argv_problems filter instead of another module run: same verdicts."""
    from ansible_collections.ddtree.fleet.plugins.filter.sglang import sglang_argv_problems
    venv, _site = sglang_venv
    read = run_module("sglang_flags", venv=str(venv), return_options=True)
    contract = {"sglang_version": read["sglang_version"], "speculative_algorithms": read["speculative_algorithms"],
                "options": read["options"]}
    good = ["--model-path", "/m", "--tp-size", "8", "--speculative-algorithm", "DFLASH", "--enable-metrics"]
    bad = ["--model-path", "/m", "--cuda-graph-max-bs", "256", "--speculative-algorithm", "DDTREE", "--tp-size", "x"]
    assert sglang_argv_problems(good, contract) == [] and not run_module("sglang_flags", venv=str(venv), argv=good).get("failed")
    module = run_module("sglang_flags", venv=str(venv), argv=bad)
    problems = sglang_argv_problems(bad, contract)
    assert module["failed"] and problems == module["problems"] and len(problems) == 3, problems
