"""The correctness and acceptance verdicts (plugins/module_utils/sglang_gate.py)."""
from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_gate as g


def test_first_divergence():
    assert g.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert g.first_divergence([1, 2], [1, 2, 3]) is None
    assert g.first_divergence([1, 9, 3], [1, 2, 3]) == 1


def test_correctness_tolerance_is_the_first_divergence_position():
    ref = {"outputs": [[1, 2, 3, 4, 5, 6]]}
    assert g.correctness_problems([[1, 2, 3, 4, 5, 6]], ref, 4) == []
    assert g.correctness_problems([[1, 2, 3, 4, 9, 9]], ref, 4) == []       # departs at 4: tolerated
    problems = g.correctness_problems([[1, 2, 9, 4, 5, 6]], ref, 4)          # departs at 2: refused
    assert problems == ["prompt 0: output departs from the reference at token 2 (id 9, reference 3); "
                        "the tolerance is 4 matching tokens"]
    # a tolerance longer than the outputs means the whole output must match
    assert g.correctness_problems([[1, 2, 3, 4, 5, 7]], ref, 32)
    assert g.correctness_problems([[]], ref, 4) == ["prompt 0: no output tokens, the reference has 6"]
    assert "record it again" in g.correctness_problems([[1], [2]], ref, 4)[0]


def test_acceptance_floor():
    assert g.acceptance_problems([3.4, 2.9], 1.5) == []
    assert g.acceptance_problems([1.0, 1.03], 1.5) == [
        "mean accept length 1.02 over 2 requests is under the floor 1.50: the draft model is not accepted "
        "(wrong or mismatched drafter, or a broken patch)"]
    assert g.acceptance_problems([None, None], 1.5)[0].startswith("the server reported no accept length")
    assert g.acceptance_problems([1.0], None) == []
    assert g.mean([1.0, None, 2.0]) == 1.5 and g.mean([]) is None


def test_waves_send_each_prompt_alone_then_a_batch_then_one_long_output():
    w = g.waves(["a", "b", "c"], 32, batch=8, long_output_len=256)
    assert [len(x) for x in w] == [1, 1, 1, 8, 1]
    assert [r[1] for r in w[3]] == ["a", "b", "c", "a", "b", "c", "a", "b"] and {r[2] for r in w[3]} == {32}
    assert w[4] == [("long output (prompt 0, 256 tokens)", "a", 256)]
    assert g.waves(["a"], 32) == [[("prompt 0", "a", 32)]]
    assert g.waves([], 32, batch=8, long_output_len=256) == []


def test_correctness_names_the_request_by_its_label():
    ref = {"outputs": [[1, 2, 3], [4, 5, 6]]}
    problems = g.correctness_problems([[1, 2, 3], [4, 9, 6]], ref, 3, ["prompt 0", "batch request 0 of 1 (prompt 0)"])
    assert problems == ["batch request 0 of 1 (prompt 0): output departs from the reference at token 1 (id 9, reference 5); "
                        "the tolerance is 3 matching tokens"]


def test_a_reference_that_names_its_requests_answers_a_recheck_of_some_of_them():
    # a running release is re-checked with its prompts alone; the reference recorded all its waves
    labels = ["prompt 0", "prompt 1", "batch request 0 of 2 (prompt 0)", "batch request 1 of 2 (prompt 1)"]
    ref = {"requests": labels, "outputs": [[1, 2, 3], [4, 5, 6], [1, 2, 3], [4, 5, 6]]}
    assert g.correctness_problems([[1, 2, 3], [4, 5, 6]], ref, 3, ["prompt 0", "prompt 1"]) == []
    assert g.correctness_problems([[1, 2, 3], [4, 9, 6]], ref, 3, ["prompt 0", "prompt 1"]) == [
        "prompt 1: output departs from the reference at token 1 (id 9, reference 5); the tolerance is 3 matching tokens"]
    # a request the reference never made is not matched by position: it has to be recorded again
    assert "record it again" in g.correctness_problems([[1, 2, 3]], ref, 3, ["long output (prompt 0, 256 tokens)"])[0]
    # a reference without names (or with names that do not fit its outputs) is compared by position, as before
    assert "record it again" in g.correctness_problems([[1, 2, 3]], {"outputs": ref["outputs"]}, 3, ["prompt 0"])[0]
    assert "record it again" in g.correctness_problems([[1, 2, 3]], dict(ref, requests=labels[:3]), 3, ["prompt 0"])[0]
