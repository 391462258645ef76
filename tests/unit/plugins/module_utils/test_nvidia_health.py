"""GPU health parsing and verdict on real captures (tests/fixtures/nvidia-smi/health/SOURCES.md and
the family captures): every degraded capture is refused for its own problem, the healthy ones pass."""
from pathlib import Path

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health as nh

CAPTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-smi"


def health_of(q, nvlink=None):
    gpus = nh.host_health((CAPTURES / q).read_text(), (CAPTURES / nvlink).read_text() if nvlink else None)
    for i, gpu in enumerate(gpus):
        gpu["index"] = i
    return {"read": True, "gpus": gpus, "fabric": {}}


@pytest.mark.parametrize("capture,count", [
    ("h200-1gpu/q.txt", 1),                             # driver 580, the project's own H200
    ("h200-1gpu-live/q.txt", 1),                        # the same H200, 2026-12-04 (tests/device/live.sh)
    ("rtx_pro_6000_blackwell/q__1.txt", 8),             # 595, PCIe Gen1 at idle
    ("h100/h100-sxm-1gpu-vm_q-idle__1.txt", 1),         # fabric Completed
    ("health/a100-sxm4-4x-remapped-rows-pending__1.txt", 4),
    ("health/h100-sxm-8x-hw-slowdown-power-brake__1.txt", 8),
    ("health/a10-remapped-rows-pending__1.txt", 1),
])
def test_every_gpu_of_a_capture_is_read(capture, count):
    gpus = health_of(capture)["gpus"]
    assert len(gpus) == count
    for gpu in gpus:
        assert gpu["ecc_mode"] == "Enabled" and gpu["pcie_width_max"] == 16 and gpu["pcie_gen_max"] in (4, 5)
        assert gpu["persistence_mode"] is True and isinstance(gpu["throttle_active"], list)


@pytest.mark.parametrize("capture", ["h200-1gpu/q.txt", "h200-1gpu-live/q.txt", "rtx_pro_6000_blackwell/q__1.txt",
                                     "h100/h100-sxm-1gpu-vm_q-idle__1.txt"])
def test_healthy_captures_pass_the_defaults(capture):
    assert nh.problems("gpu-1", health_of(capture), {}) == []


def test_pending_row_remap_is_refused_naming_gpu_counter_and_fix():
    problems = nh.problems("a10-host", health_of("health/a10-remapped-rows-pending__1.txt"), {})
    assert problems == ["a10-host: GPU 0 (00000000:07:00.0) remapped_rows_pending is yes, the profile allows no: "
                        "drain the host and reset the GPU (nvidia-smi -r) or reboot, then check again"]
    assert health_of("health/a10-remapped-rows-pending__1.txt")["gpus"][0]["remapped_rows_uncorrectable"] == 4


def test_only_the_degraded_gpu_of_four_is_named():
    health = health_of("health/a100-sxm4-4x-remapped-rows-pending__1.txt")
    problems = nh.problems("a100-host", health, {})
    assert len(problems) == 1 and "GPU 1 (00000000:9E:00.0) remapped_rows_pending" in problems[0]
    # the remap already applied on another GPU (Pending No) is not a problem
    assert [g["remapped_rows_pending"] for g in health["gpus"]] == [False, True, False, False]


def test_hw_slowdown_and_power_brake_on_every_gpu():
    problems = nh.problems("h100-host", health_of("health/h100-sxm-8x-hw-slowdown-power-brake__1.txt"), {})
    assert len(problems) == 8
    assert "GPU 7 (00000000:DB:00.0) clock event reason is HW Slowdown + HW Power Brake Slowdown" in problems[7]
    # a profile may accept a power brake (a chassis that caps power on purpose)
    relaxed = {"throttle_reasons_refused": ["HW Thermal Slowdown"]}
    assert nh.problems("h100-host", health_of("health/h100-sxm-8x-hw-slowdown-power-brake__1.txt"), relaxed) == []


def test_inactive_nvlink_links_from_nvlink_s():
    links = nh.parse_nvlink_status((CAPTURES / "health/v100-sxm2-nvlink-s-inactive-fragment__1.txt").read_text())
    assert links == {3: {"links": 6, "inactive": [3, 5], "speeds_gbps": [25.781] * 4}}
    healthy = nh.parse_nvlink_status((CAPTURES / "health/a100-sxm4-8x-nvlink-s-healthy__1.txt").read_text())
    assert sorted(healthy) == list(range(8)) and all(v["links"] == 12 and not v["inactive"] for v in healthy.values())
    b200 = nh.parse_nvlink_status((CAPTURES / "b200/nvlink-s__1.txt").read_text())
    assert all(v["links"] == 18 and v["speeds_gbps"][0] == 53.125 for v in b200.values())


def test_a_link_down_is_refused_with_its_ids():
    gpu = {"index": 3, "bus_id": "00000000:3B:00.0", "nvlink_links": 6, "nvlink_inactive": [3, 5]}
    problems = nh.problems("v100-host", {"read": True, "gpus": [gpu]}, {})
    assert problems[0].startswith("v100-host: GPU 3 (00000000:3B:00.0) inactive NVLink links is 2 (links 3, 5), "
                                  "the profile allows 0")
    # fewer active links than the topology's bond is refused too
    fewer = nh.problems("v100-host", {"read": True, "gpus": [gpu]}, {"nvlink_inactive_max": 2}, nvlink_links_expected=6)
    assert any("active NVLink links is 4" in p for p in fewer)


def test_pcie_generation_below_max_only_when_the_profile_says_so():
    health = health_of("rtx_pro_6000_blackwell/q__1.txt")
    assert nh.problems("rtx", health, {}) == []
    strict = nh.problems("rtx", health, {"pcie_gen_below_max": False})
    assert len(strict) == 8 and "PCIe generation is 1, the profile allows 5 (its maximum)" in strict[0]


def test_fabric_required_on_multi_gpu_nvswitch_hosts():
    health = health_of("health/h100-sxm-8x-hw-slowdown-power-brake__1.txt")  # fabric Completed/Success
    assert not nh.problems("h", health, {"fabric_required": True, "throttle_reasons_refused": []})
    for gpu in health["gpus"]:
        gpu["fabric_state"], gpu["fabric_status"] = "In Progress", None
    health["fabric"] = {"manager_installed": True, "manager_active": False}
    problems = nh.problems("h", health, {"fabric_required": True, "throttle_reasons_refused": []})
    assert len(problems) == 8 and "NVSwitch fabric state is In Progress/-" in problems[0]
    assert "start nvidia-fabricmanager (installed: yes, active: no)" in problems[0]
    # a driver that does not report the state: an active fabric manager stands in for it
    for gpu in health["gpus"]:
        gpu["fabric_state"] = None
    health["fabric"]["manager_active"] = True
    assert nh.problems("h", health, {"fabric_required": True, "throttle_reasons_refused": []}) == []
    # one GPU (a VM slice) has no fabric to wait for
    assert nh.problems("h", health_of("h200-1gpu/q.txt"), {"fabric_required": True}) == []


def test_unread_health_is_no_verdict():
    assert nh.problems("h", {"read": False, "gpus": []}, {}) == []
    assert nh.problems("h", None, {}) == []


def test_old_layouts():
    # pre-Ampere ECC (Double Bit -> Total) and Clocks Throttle Reasons
    text = """
GPU 00000000:04:00.0
    Persistence Mode                    : Disabled
    Clocks Throttle Reasons
        Idle                            : Not Active
        HW Slowdown                     : Active
    ECC Errors
        Volatile
            Single Bit
                Device Memory           : 0
                Total                   : 3
            Double Bit
                Device Memory           : 2
                Total                   : 2
    Retired Pages
        Single Bit ECC                  : 1
        Double Bit ECC                  : 2
        Pending Page Blacklist          : Yes
"""
    gpu = nh.host_health(text)[0]
    assert (gpu["ecc_uncorrectable_volatile"], gpu["retired_pages_dbe"], gpu["retired_pages_pending"]) == (2, 2, True)
    assert gpu["throttle_active"] == ["HW Slowdown"] and gpu["persistence_mode"] is False
    assert gpu["remapped_rows_pending"] is None  # not reported: no verdict, no guess


def test_dcgm_failures_walks_either_layout():
    # SYNTHETIC (no public capture of a failing run found): the two top-level layouts DCGM's JSON schema has had
    old = {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "Blacklist", "results": [{"status": "Pass"}]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
            {"gpu_id": "0", "status": "Pass"},
            {"gpu_id": "3", "status": "Fail", "warnings": [{"warning": "Row remap pending", "error_id": 1}]}]}]}]}}
    assert nh.dcgm_failures(old) == ["Hardware / GPU Memory GPU 3: Row remap pending"]
    new = {"DCGM Diagnostic": {"test_categories": [{"category": "Integration", "tests": [
        {"name": "pcie", "results": [{"entity_id": 1, "status": "Fail", "info": "bandwidth under threshold"}]},
        {"name": "nvlink", "results": [{"entity_id": 1, "status": "Skip"}]}]}]}}
    assert nh.dcgm_failures(new) == ["Integration / pcie GPU 1: bandwidth under threshold"]
    assert nh.dcgm_failures({"DCGM Diagnostic": {"test_categories": []}}) == []
