"""gpu_preflight and fleet_rows on facts built from real captures."""

import pytest

from ansible_collections.ddtree.fleet.plugins.filter import bench, gpu, report, rollout
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia
from helpers import facts_of, profile, records

GIB = 1024 ** 3


OK = dict(model_dir="/opt/ddtree/models", model_size_gib=561, disk_free_bytes=2000 * GIB, memtotal_mb=2048 * 1024)


@pytest.mark.parametrize("replay,family", [("b300_8x", "b300"), ("rtx_pro_6000_8x", "rtx_pro_6000"), ("b200_8x", "b200")])
def test_real_fleets_pass(replay, family):
    assert gpu.gpu_preflight("h1", facts_of(replay), profile(family), **OK) == []


def test_gpu_count():
    f = gpu.gpu_preflight("h200-1", facts_of("h200_1x"), profile("h200"), **OK)
    assert any("h200-1: 1 GPU(s) found, profile h200 needs 8" in m for m in f)


def test_gpu_memory_h100_cannot_hold_kimi():
    nv = facts_of("h200_8x")
    for g in nv["gpus"]:
        g["memory_total_mib"] = 81559  # an H100 80GB, as in the real H100 capture
    f = gpu.gpu_preflight("h100-1", nv, profile("h100"), **OK)
    assert any("cannot hold a 561 GiB model" in m for m in f)


def test_driver_too_old_names_value_and_fix():
    nv = facts_of("h200_8x")  # driver 570.211.01 (real capture)
    f = gpu.gpu_preflight("h200-2", nv, profile("h200"), **OK)
    assert f == ["h200-2: NVIDIA driver 570.211.01 is older than 580.65.06, the minimum of profile h200: "
                 "upgrade the driver to 580.65.06 or newer"]


def test_nvlink_required_on_pcie_host():
    f = gpu.gpu_preflight("rtx-1", facts_of("rtx_pro_6000_8x"), profile("b300"), **OK)
    assert any("needs NVLink between every pair, found interconnect pcie" in m for m in f)


def test_nvlink_partial():
    nv = facts_of("b300_8x")
    nv["topology"]["matrix"]["GPU0"]["GPU5"] = "SYS"  # one pair lost its NVLink (read in one direction)
    f = gpu.gpu_preflight("b300-9", nv, profile("b300"), **OK)
    assert len(f) == 1 and "nvlink_partial" in f[0] and "across all GPUs" in f[0]


TP4 = [{"name": "a", "port": 30000, "gpus": [0, 1, 2, 3], "profile": {"parallelism": {"tp": 4}}},
       {"name": "b", "port": 30001, "gpus": [4, 5, 6, 7], "profile": {"parallelism": {"tp": 4}}}]


def test_two_tp4_instances_are_preflighted_per_instance():
    """The NVLink check reads each instance's parallelism and the links between its own GPUs, not the host's TP8."""
    nv = facts_of("b300_8x")
    nv["topology"]["matrix"]["GPU0"]["GPU5"] = "SYS"  # between the halves: neither TP4 instance uses this pair
    assert gpu.gpu_preflight("b300-9", nv, profile("b300"), instances=TP4, **OK) == []
    assert gpu.gpu_preflight("b300-9", nv, profile("b300"), **OK)  # one TP8 instance needs it
    nv["topology"]["matrix"]["GPU5"]["GPU6"] = "SYS"  # inside instance b
    f = gpu.gpu_preflight("b300-9", nv, profile("b300"), instances=TP4, **OK)
    assert len(f) == 1 and "TP4 across instance b (GPUs 4,5,6,7)" in f[0] and "nvlink_partial" in f[0], f
    # on a PCIe host two TP4 instances need NVLink just the same
    assert len(gpu.gpu_preflight("rtx-1", facts_of("rtx_pro_6000_8x"), profile("b300"), instances=TP4, **OK)) == 2


def test_two_tp4_instances_are_reported_as_two_tp4_instances():
    hv = {"b": {"ansible_facts": {"nvidia": facts_of("b300_8x")}, "nvidia_facts_profile": profile("b300"),
                "ddtree_service_instances": TP4, "group_names": ["gpu_hosts"]},
          "c": {"ansible_facts": {"nvidia": facts_of("b300_8x")}, "nvidia_facts_profile": profile("b300"), "group_names": ["gpu_hosts"]}}
    b, c = report.fleet_rows(records(hv, ["b", "c"]), instances=[{"name": "main", "port": 30000}])
    assert b["parallelism"] == "a tp4 ep1 dp1 (GPUs 0-3); b tp4 ep1 dp1 (GPUs 4-7)", b["parallelism"]
    assert [i["parallelism"]["tp"] for i in b["instances"]] == [4, 4] and b["instances"][1]["gpus"] == [4, 5, 6, 7]
    assert c["parallelism"] == "tp8 ep1 dp1" and c["instances"][0]["gpus"] == list(range(8))


def test_mixed_gpus():
    nv = facts_of("b300_8x")
    nv["homogeneous"] = False
    nv["gpus"][7]["name"] = "NVIDIA B200"
    assert any("mixed GPU models" in m for m in gpu.gpu_preflight("m", nv, profile("b300"), **OK))


def test_disk_and_ram():
    args = {**OK, "disk_free_bytes": 100 * GIB, "memtotal_mb": 64 * 1024}
    f = gpu.gpu_preflight("b300-1", facts_of("b300_8x"), profile("b300"), **args)
    assert any("100.0 GiB free for the model directory /opt/ddtree/models, the model needs 561.0 GiB" in m for m in f)
    assert any("64 GiB of RAM, profile b300 needs 256 GiB" in m for m in f)


def test_checks_can_be_switched_off():
    args = {**OK, "disk_free_bytes": 1, "memtotal_mb": 1}
    checks = {"disk": False, "ram": False, "nvlink": False}
    assert gpu.gpu_preflight("rtx-1", facts_of("rtx_pro_6000_8x"), profile("b300"), checks=checks, **args) == []


def test_fleet_rows():
    hv = {
        "b": {"ansible_facts": {"nvidia": facts_of("b300_8x")}, "nvidia_facts_profile": profile("b300"),
              "group_names": ["fleet", "gpu_b300", "gpu_sm_103", "gpu_hosts"]},
        "s": {"ansible_facts": {"nvidia": nvidia.absent_facts(["nvidia-smi not found"])}, "group_names": ["sources"]},
    }
    rows = report.fleet_rows(records(hv, ["s", "b"]))
    assert [r["host"] for r in rows] == ["b", "s"]
    b, s = rows
    assert (b["gpus"], b["family"], b["interconnect"], b["nvlink_lanes"], b["profile"], b["parallelism"]) == (
        "NVIDIA B300 SXM6 AC x 8", "b300", "nvlink", 18, "b300", "tp8 ep1 dp1")
    assert b["groups"] == ["gpu_b300", "gpu_hosts", "gpu_sm_103"]
    assert (s["gpus"], s["family"], s["interconnect"], s["profile"]) == ("none", None, None, None)
    assert not b["from_previous_report"]


def test_fleet_rows_under_limit_keep_the_last_reports_rows_of_the_other_hosts():
    hv = {"b": {"ansible_facts": {"nvidia": facts_of("b300_8x")}, "nvidia_facts_profile": profile("b300"),
                "group_names": ["fleet", "gpu_hosts"]},
          "r": {"group_names": ["fleet", "gpu_hosts"]},  # not reached by this run: no facts
          "n": {"group_names": ["fleet"]}}                # not reached, and in no earlier report
    last = [{"host": "r", "gpus": "NVIDIA RTX PRO 6000 Blackwell Server Edition x 8", "family": "rtx_pro_6000"},
            {"host": "b", "gpus": "stale"}]
    b, n, r = report.fleet_rows(records(hv, ["b", "r", "n"]), previous=last, current=["b"])
    assert b["gpus"] == "NVIDIA B300 SXM6 AC x 8" and not b["from_previous_report"]  # reached: fresh, not the old row
    assert dict((k, r[k]) for k in last[0]) == last[0] and r["from_previous_report"] and r["warnings"] == []
    assert n["gpus"] == "none" and not n["from_previous_report"]
    # report.yml run alone reaches every host but reads no facts: the last report stands
    r2 = report.fleet_rows(records({"r": {"group_names": ["fleet"]}}, ["r"]), previous=last, current=["r"])[0]
    assert r2["from_previous_report"] and r2["family"] == "rtx_pro_6000"


RECORDED = {"release": "r-old", "levels": [
    {"concurrency": 1, "baseline_tok_s": 141.0, "speculative_tok_s": 303.0},
    {"concurrency": 128, "baseline_tok_s": 2200.0, "speculative_tok_s": 4723.0}]}


def test_bench_gate_passes_within_tolerance():
    assert bench.bench_gate([{"concurrency": 1, "output_tok_per_s": 280.0}], RECORDED, 0.1) == []
    assert bench.bench_gate([{"concurrency": 128, "output_tok_per_s": 5000.0}], RECORDED, 0.1) == []


def test_bench_gate_refuses_a_slower_release_and_says_by_how_much():
    # the autoregressive speed where speculative decoding was recorded: 2.15x slower
    p = bench.bench_gate([{"concurrency": 1, "output_tok_per_s": 141.0}], RECORDED, 0.1)
    assert len(p) == 1 and "141.0 tok/s" in p[0] and "303.0" in p[0] and "r-old" in p[0] and ">= 272.7" in p[0]


def test_bench_gate_needs_a_recorded_figure_at_that_concurrency():
    p = bench.bench_gate([{"concurrency": 16, "output_tok_per_s": 900.0}], RECORDED, 0.1)
    assert len(p) == 1 and "no recorded figure at concurrency 16" in p[0] and "[1, 128]" in p[0]
    assert "no recorded figure" in bench.bench_gate([{"concurrency": 1, "output_tok_per_s": 1.0}], {}, 0.1)[0]


def test_rollout_changed_names_only_instances_whose_release_moved():
    # ddtree_service_planned: each instance's release before the deploy (null: none yet)
    planned = [{"name": "main", "port": 30000, "current": "aaa"}, {"name": "b", "port": 30001, "current": "bbb"},
               {"name": "c", "port": 30002, "current": None}]
    status = [{"name": "main", "release": "aaa2"}, {"name": "b", "release": "bbb"}, {"name": "c", "release": "ccc"}]
    # main moved; b did not; c had no release before (a first deploy: nothing to roll back to, but it moved)
    assert [i["name"] for i in rollout.rollout_changed(planned, status)] == ["main", "c"]
    assert rollout.rollout_changed([], status) == []
