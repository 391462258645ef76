"""module_utils/fleet.py: a host's record (the one read of its variables), the --limit keep rule, and the
serving group rule both roles ask (serving_group_problem); the correctness column in words."""
from ansible_collections.ddtree.fleet.plugins.filter.sglang import sglang_correctness
from ansible_collections.ddtree.fleet.plugins.module_utils import fleet, serving_groups

from helpers import facts_of, profile


class Undefined:
    """An undefined template behind a hostvar raises on access, as Ansible's hostvars do."""
    def get(self, key, default=None):
        if key == "nvidia_facts_profile":
            raise RuntimeError("undefined")
        return {"inventory_hostname": "u"}.get(key, default)


def test_a_record_holds_the_declared_outputs_and_the_address():
    hv = {"inventory_hostname": "b300-1.example.internal", "ansible_facts": {"nvidia": facts_of("b300_8x")},
          "nvidia_facts_profile": profile("b300"), "serving_group_member": {}, "ddtree_service_refused": True,
          "ddtree_service_api_key": "s3cret", "group_names": ["gpu_hosts"], "unrelated": 1}
    r = fleet.record(hv)
    assert r["host"] == r["address"] == "b300-1.example.internal" and r["facts_read"] and r["nvidia"]["gpu_count"] == 8
    assert r["profile"]["name"] == "b300" and r["refused"] and r["api_key_set"] and "api_key" not in r and "unrelated" not in r
    assert "s3cret" not in repr(r)  # the key itself never travels in a record
    assert fleet.record(dict(hv, ddtree_address="10.1.0.5", ddtree_service_refused=False))["address"] == "10.1.0.5"
    assert not fleet.record(dict(hv, ddtree_service_refused="false"))["refused"]
    u = fleet.record(Undefined())
    assert u["host"] == "u" and u["profile"] is None and not u["facts_read"]


def test_records_of_hosts_without_variables_come_from_their_names():
    assert [r["address"] for r in fleet.records({}, ["gpu-9"])] == ["gpu-9"]


def test_keep_unreached_is_the_limit_rule():
    fresh, last = {"a": "A2", "b": "B2"}, {"b": "B1", "c": "C1"}
    # a reached: fresh; b not reached and recorded: its last entry; c not reached, nothing fresh: last; d: nothing
    assert fleet.keep_unreached(["a", "b", "c", "d"], fresh, last, reached={"a"}) == {"a": "A2", "b": "B1", "c": "C1"}
    assert fleet.keep_unreached(["a", "b"], fresh, last, reached={"a", "b"}) == fresh


def test_parse_nodes_is_one_rule():
    assert [fleet.parse_nodes(v) for v in (None, "", 1, "2", " 3 ", 0, "two", -1)] == [1, 1, 1, 2, 3, 0, 0, 0]


def test_a_member_missing_from_the_play_is_named_with_the_fix():
    group = {"name": "pair", "members": ["b300-1", "b300-2"]}
    assert serving_groups.problem("b300-1", group, ["b300-1", "b300-2"]) == ""
    msg = serving_groups.problem("b300-1", group, ["b300-1"], outside=["b300-2"])
    assert msg.startswith("b300-1: serving group pair") and "b300-2 is not in this run" in msg
    assert "a --limit must take whole groups" in msg and "fix it" in msg
    assert serving_groups.problem("x", {}, []) == ""


def test_correctness_in_words():
    ref = {"host": "b300-1", "family": "b300", "speculative_release": "r2", "outputs": [[1, 2, 3], [4, 5]]}
    same = {"outputs": [[1, 2, 3], [4, 5]]}
    assert sglang_correctness(same, "DFLASH", ref, "r2") == "equal on 2 gate requests vs this release without speculation"
    assert sglang_correctness(same, "DFLASH", ref, "r3") == "equal on 2 gate requests vs b300-1 (b300)"
    late = {"outputs": [[1, 2, 9], [4, 5]]}  # departed after the tolerated prefix: said, not hidden
    assert sglang_correctness(late, "DFLASH", ref, "r2") == (
        "equal on 1 of 2 gate requests, the rest on their first 2 tokens vs this release without speculation")
    assert sglang_correctness(same, "DFLASH", {}, "r3") == "not checked: no reference for this release on record"
    assert sglang_correctness({}, "DFLASH", ref, "r3") == "not checked: the gate sent no prompts"
    assert sglang_correctness(same, "DFLASH", {}, "r3", skipped="opted out (ddtree_service_correctness_gate=false)") == (
        "not checked: opted out (ddtree_service_correctness_gate=false)")
    assert sglang_correctness({"outputs": []}, "none", {}, "r1") == "reference"
    assert sglang_correctness(same, "DFLASH", ref, "r2", member=True) == "answered by rank 0"
