"""The nvidia_facts module against the nvidia-smi replay double: call count, faults, and one
real run through ansible."""
from pathlib import Path

import pytest

from ansible_collections.ddtree.fleet.plugins.modules import nvidia_facts
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health

ROOT = Path(__file__).resolve().parents[4]
DOUBLE = ROOT / "tests" / "doubles" / "nvidia-smi"


@pytest.fixture
def replay(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_REPLAY_ETC", str(tmp_path))
    monkeypatch.setenv("NVIDIA_SMI_REPLAY_DATA", str(ROOT / "tests" / "doubles" / "replays"))
    monkeypatch.setattr(nvidia_facts, "libcuda_version", lambda: None)  # no driver library here

    def use(name, fault=None, health=False, q=None):
        (tmp_path / "set").write_text(name)
        if fault:
            (tmp_path / "fault").write_text(fault)
        if q:
            (tmp_path / "q").write_text(q)
        smi = nvidia_facts.NvidiaSmi(str(DOUBLE), 10)
        facts, error = nvidia_facts.gather(smi)
        if health and facts is not None:
            facts["health"] = nvidia_facts.gather_health(smi, facts, systemctl=None)
        calls = (tmp_path / "calls.log").read_text().splitlines()
        return facts, error, calls
    return use


def test_two_calls_for_everything(replay):
    facts, error, calls = replay("b300_8x")
    assert error is None
    assert calls == ["--query-gpu=" + ",".join(nvidia_facts.nvidia.QUERY_FIELDS) + " --format=csv,noheader,nounits", "topo -m"]
    assert (facts["family"], facts["gpu_count"], facts["topology"]["interconnect"]) == ("b300", 8, "nvlink")
    assert facts["topology"]["nvlink_min_links"] == 18
    assert facts["gpus"][5]["numa_node"] == 1
    assert facts["cuda_version"] is None  # driver 610 is newer than the branch table
    # the real capture's driver 610.57.04 is newer than the table: said as a fact, not warned on every run
    assert facts["cuda_version_source"] == "unknown branch" and not [w for w in facts["warnings"] if "CUDA" in w]


def test_rtx_pro_6000_is_pcie(replay):
    facts, error, calls = replay("rtx_pro_6000_8x")
    assert error is None and len(calls) == 2
    assert (facts["family"], facts["topology"]["interconnect"], facts["cuda_version"]) == ("rtx_pro_6000", "pcie", "13.2")
    assert facts["gpus"][0]["uuid"] == "GPU-e588912b-1368-6b4f-0e2a-0d08f8afb39b"
    assert [g["sm"] for g in facts["gpus"]] == ["sm_120"] * 8


def test_old_driver_falls_back_to_name_table(replay):
    facts, error, calls = replay("h200_8x", fault="old_driver")
    assert error is None and len(calls) == 3
    assert "compute_cap" not in calls[1]
    assert (facts["family"], facts["compute_capability"]) == ("h200", "9.0")
    assert any("does not report compute_cap" in w for w in facts["warnings"])


def test_topo_failure_keeps_gpu_facts(replay):
    facts, error, calls = replay("b200_8x", fault="topo_fail")
    assert error is None and len(calls) == 2
    assert (facts["family"], facts["gpu_count"], facts["topology"]["interconnect"]) == ("b200", 8, "unknown")
    assert facts["gpus"][0]["name"] == "NVIDIA B200"


@pytest.mark.parametrize("fault,words", [
    ("nvml_mismatch", "version mismatch"),
    ("no_devices", "No devices were found"),
])
def test_driver_faults(replay, fault, words):
    facts, error, calls = replay("b300_8x", fault=fault)
    assert facts is None and words in error and len(calls) == 1


def test_health_is_one_more_call_on_pcie(replay):
    facts, error, calls = replay("rtx_pro_6000_8x", health=True)
    assert error is None and calls[2:] == ["-q"]
    health = facts["health"]
    assert (health["read"], health["sources"], len(health["gpus"])) == (True, ["-q"], 8)
    gpu = health["gpus"][0]
    # the real capture: an idle GPU at PCIe Gen1 of 5, full x16, no ECC errors, no fabric
    assert (gpu["index"], gpu["pcie_gen_current"], gpu["pcie_gen_max"], gpu["pcie_width_current"]) == (0, 1, 5, 16)
    assert (gpu["ecc_uncorrectable_volatile"], gpu["remapped_rows_pending"], gpu["fabric_state"]) == (0, False, None)
    assert health["fabric"] == {}  # no NVLink and no fabric state: fabric manager not looked for


def test_health_reads_nvlink_links_on_nvlink_hosts(replay):
    # the B200 set has its own nvlink -s capture; -q comes from a real degraded 8-GPU H100 capture
    facts, error, calls = replay("b200_8x", health=True, q="health/h100-sxm-8x-hw-slowdown-power-brake__1.txt")
    assert error is None and calls[2:] == ["-q", "nvlink -s"]
    health = facts["health"]
    assert health["sources"] == ["-q", "nvlink -s"]
    assert [(g["nvlink_links"], g["nvlink_inactive"]) for g in health["gpus"]] == [(18, [])] * 8
    assert health["gpus"][3]["throttle_active"] == ["HW Slowdown", "HW Power Brake Slowdown"]
    assert health["fabric"]["manager_installed"] in (True, False)


def test_health_not_captured_is_a_warning_not_a_failure(replay):
    facts, error, calls = replay("h200_8x", health=True)
    assert error is None and calls[2:] == ["-q"]
    assert facts["health"]["read"] is False and "nvidia-smi -q failed" in facts["health"]["error"]
    assert facts["gpu_count"] == 8  # the GPU facts stand


def test_b300_health_from_its_sibling_stand_ins(replay):
    # the lab's B300 hosts: -q of an 8x H100 SXM5 HGX board, nvlink -s of the 8x B200 (NVLink 5, 18 links)
    facts, error, calls = replay("b300_8x", health=True)
    health = facts["health"]
    assert error is None and calls[2:] == ["-q", "nvlink -s"] and health["read"] is True
    assert [(g["index"], g["fabric_state"], g["nvlink_links"], g["nvlink_inactive"]) for g in health["gpus"]] == [
        (i, "Completed", 18, []) for i in range(8)]
    assert health["gpus"][0]["bus_id"] == facts["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    assert nvidia_health.facts_problems("b300-1", facts, {"fabric_required": True}) == []


def test_module_through_ansible(replay, run_module):
    replay("rtx_pro_6000_8x")
    res = run_module("nvidia_facts", nvidia_smi_path=str(DOUBLE))
    assert res["changed"] is False
    nv = res["ansible_facts"]["nvidia"]
    assert (nv["present"], nv["family"], nv["gpu_count"], nv["nvidia_smi_calls"]) == (True, "rtx_pro_6000", 8, 3)
    assert nv["health"]["read"] is True and len(nv["health"]["gpus"]) == 8


def test_module_health_off_is_two_calls(replay, run_module):
    replay("rtx_pro_6000_8x")
    nv = run_module("nvidia_facts", nvidia_smi_path=str(DOUBLE), health=False)["ansible_facts"]["nvidia"]
    assert nv["nvidia_smi_calls"] == 2 and nv["health"]["read"] is False


def test_module_absent_driver_not_required(tmp_path, run_module):
    res = run_module("nvidia_facts", nvidia_smi_path=str(tmp_path / "missing"))
    nv = res["ansible_facts"]["nvidia"]
    assert (nv["present"], nv["gpu_count"], nv["family"]) == (False, 0, "unknown")
    assert "nvidia-smi not found" in nv["errors"][0]


def test_module_absent_driver_required_fails(tmp_path, run_module):
    res = run_module("nvidia_facts", required=True, nvidia_smi_path=str(tmp_path / "missing"))
    assert "ansible_facts" not in res  # the module failed (failed_when: false keeps the play going)
    assert "no usable NVIDIA GPU" in res["msg"] and "install the NVIDIA driver" in res["msg"]
