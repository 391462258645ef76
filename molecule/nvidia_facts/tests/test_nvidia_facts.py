"""Verify nvidia_facts on three replayed GPU hosts: the report the play wrote, and a real
preflight failure driven through ansible-playbook."""
import json
import os
import subprocess
from pathlib import Path

import pytest

testinfra_hosts = ["ansible://nvf-b200"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
REPORT = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"


@pytest.fixture(scope="module")
def rows():
    doc = json.loads((REPORT / "fleet.json").read_text())
    return {r["host"]: r for r in doc["hosts"]}


def test_report_markdown_lists_every_host():
    md = (REPORT / "fleet.md").read_text()
    for host in ("nvf-b300", "nvf-rtx", "nvf-b200"):
        assert "| %s |" % host in md


@pytest.mark.parametrize("host,family,cc,interconnect,lanes,groups", [
    ("nvf-b300", "b300", "10.3", "nvlink", 18, ["gpu_b300", "gpu_hosts", "gpu_sm_103"]),
    ("nvf-rtx", "rtx_pro_6000", "12.0", "pcie", 0, ["gpu_hosts", "gpu_rtx_pro_6000", "gpu_sm_120"]),
    ("nvf-b200", "b200", "10.0", "nvlink", 18, ["gpu_b200", "gpu_hosts", "gpu_sm_100"]),
])
def test_facts_and_groups(rows, host, family, cc, interconnect, lanes, groups):
    r = rows[host]
    assert (r["family"], r["compute_capability"], r["interconnect"], r["nvlink_lanes"]) == (family, cc, interconnect, lanes)
    assert r["groups"] == groups
    assert r["gpu_count"] == 8 and r["numa_nodes"] == [0, 1]


def test_selected_profiles(rows):
    assert (rows["nvf-b300"]["profile"], rows["nvf-b300"]["parallelism"]) == ("b300", "tp8 ep1 dp1")
    assert (rows["nvf-rtx"]["profile"], rows["nvf-rtx"]["parallelism"]) == ("rtx_pro_6000", "tp8 ep8 dp1")
    assert rows["nvf-b200"]["profile"] == "b200"


def run_facts(limit, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"),
               DDTREE_REPORT_DIR=str(REPORT.parent / "reports-failure"))
    return subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", limit,
                           str(PROJECT / "playbooks" / "facts.yml"), *extra],
                          cwd=PROJECT, env=env, capture_output=True, text=True, check=False)


def test_profile_merge_order(rows):
    # nvf-rtx: family file, then the group override (min_ram_gib), then the host override
    # (cuda_graph.max_bs_decode) merged recursively: the rest of cuda_graph stays the family's
    rtx = rows["nvf-rtx"]["profile_settings"]
    assert rtx["cuda_graph"] == {"decode_backend": "full", "prefill_backend": "breakable",
                                 "max_bs_decode": 64, "disable_prefill": True}
    assert rtx["min_ram_gib"] == 1
    assert rtx["attention_backend"] == "triton" and rtx["env"] == {"NCCL_P2P_LEVEL": "SYS"}
    b300 = rows["nvf-b300"]["profile_settings"]
    assert b300["cuda_graph"]["max_bs_decode"] == 128 and b300["cuda_graph"]["disable_prefill"] is False
    assert (b300["attention_backend"], b300["page_size"], b300["min_ram_gib"]) == ("trtllm_mla", 64, 1)


def test_preflight_failure_names_host_value_and_fix(host):
    # the real 8x H200 capture runs driver 570.211.01, below the CUDA-13 floor of the profile
    host.run_test("echo h200_8x > /etc/nvidia-smi-replay/set")
    try:
        p = run_facts("nvf-b200")
    finally:
        host.run_test("echo b200_8x > /etc/nvidia-smi-replay/set")
    assert p.returncode != 0
    assert "nvf-b200: NVIDIA driver 570.211.01 is older than 580.65.06, the minimum of profile h200" in p.stdout
    assert "upgrade the driver to 580.65.06 or newer" in p.stdout
    assert "failed=1" in p.stdout


def test_gpu_health_read_on_a_host_with_a_q_capture(rows):
    # the RTX set replays its machine's own real -q: read, healthy (Gen1 at idle is allowed)
    assert rows["nvf-rtx"]["health"]["verdict"] == "ok"
    # the B300 set replays its siblings' real captures (an 8x H100 SXM5 HGX -q, the B200's nvlink -s):
    # read on every GPU and NVLink, healthy
    assert rows["nvf-b300"]["health"]["verdict"] == "ok"
    # the B200 set has no -q capture of its machine: not read, said so, not refused
    assert rows["nvf-b200"]["health"]["verdict"] == "not read"


def test_degraded_gpus_are_refused_naming_gpu_counter_and_threshold(host):
    # nvf-b200's -q replaced by a real capture of 8 H100s in HW slowdown + power brake; its own
    # nvlink -s (18 links per GPU) stays. The preflight refuses the host before anything changes.
    host.run_test("echo health/h100-sxm-8x-hw-slowdown-power-brake__1.txt > /etc/nvidia-smi-replay/q")
    try:
        p = run_facts("nvf-b200")
    finally:
        host.run_test("rm -f /etc/nvidia-smi-replay/q")
    assert p.returncode != 0, p.stdout[-3000:]
    assert ("nvf-b200: GPU 0 (00000000:19:00.0) clock event reason is HW Slowdown + HW Power Brake Slowdown, the "
            "profile allows none of HW Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown, SW Thermal Slowdown") in p.stdout
    assert "failed=1" in p.stdout


def test_clean_kernel_log_is_read_and_lists_no_xids(rows):
    # the kernel-log replay double answers journalctl -k with a clean boot on every host
    for host in ("nvf-b300", "nvf-rtx", "nvf-b200"):
        assert rows[host]["xids"] == [], host
        assert not [w for w in rows[host]["warnings"] if "kernel log" in w], host


def test_injected_xid_79_is_refused_naming_gpu_xid_action_and_clear(host):
    # a real Xid 79 line (open-gpu-kernel-modules#1151) replayed for GPU 3 of nvf-b200 (00000000:63:00.0)
    host.run_test("echo 79@3 > /etc/kernel-log-replay/xid")
    try:
        p = run_facts("nvf-b200")
    finally:
        host.run_test("rm -f /etc/kernel-log-replay/xid")
    assert p.returncode != 0, p.stdout[-3000:]
    assert ("nvf-b200: GPU 3 (00000000:63:00.0) Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: GPU has fallen off "
            "the bus) in the kernel log since boot (journalctl, 1 line; last: May 18 19:02:39 kernel: NVRM: Xid "
            "(PCI:0000:63:00): 79, GPU has fallen off the bus.); NVIDIA's catalogue: immediate action RESTART_BM") in p.stdout
    assert "the kernel log since boot is clean" in p.stdout
    assert "nvidia_facts_xid_acknowledged: [{xid: 79, pci: '0000:63:00', lines: 1}]" in p.stdout
    assert "failed=1" in p.stdout


def test_acknowledged_xid_79_lets_the_host_pass(host):
    host.run_test("echo 79@3 > /etc/kernel-log-replay/xid")
    try:
        p = run_facts("nvf-b200", "-e", '{"nvidia_facts_xid_acknowledged": [{"xid": 79, "pci": "00000000:63:00.0", "lines": 1}]}')
    finally:
        host.run_test("rm -f /etc/kernel-log-replay/xid")
    assert p.returncode == 0, p.stdout[-3000:]
    assert "the profile says refuse" not in p.stdout
    # the report still lists it, as acknowledged
    assert "| Xid 79 GPU 3 x1 acknowledged |" in p.stdout


def test_application_xid_13_passes_with_a_warning(host):
    host.run_test("echo 13@1 > /etc/kernel-log-replay/xid")
    try:
        p = run_facts("nvf-b200")
    finally:
        host.run_test("rm -f /etc/kernel-log-replay/xid")
    assert p.returncode == 0, p.stdout[-3000:]
    assert "WARNING: the health check let these pass" in p.stdout
    assert "nvf-b200: GPU 1 (00000000:52:00.0) Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION: Graphics Engine Exception)" in p.stdout
    assert "class application, the profile says warn" in p.stdout
    assert "failed=0" in p.stdout
    # the report of that run lists it on the host's row, and says so in its warnings
    doc = json.loads((REPORT.parent / "reports-failure" / "fleet.json").read_text())
    row = [r for r in doc["hosts"] if r["host"] == "nvf-b200"][0]
    assert [(x["xid"], x["gpu_index"], x["class"], x["action"]) for x in row["xids"]] == [(13, 1, "application", "warn")]
    assert [w for w in row["warnings"] if "Xid 13" in w]
