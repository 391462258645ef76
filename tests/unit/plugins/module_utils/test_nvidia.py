"""module_utils/nvidia.py on every real capture in tests/fixtures/nvidia-smi.
Expected values were written by reading each capture."""
import csv
import io
import re
from pathlib import Path

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia

CAP = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-smi"


def read(rel):
    return (CAP / rel).read_text()


# capture -> (GPUs, interconnect, nvlink_min_links, NIC devices, NUMA nodes, GPU0 cpu affinity, last GPU cpu affinity)
TOPO = {
    "b300/topo-m__2.txt": (8, "nvlink", 18, ["mlx5_1%d" % i for i in range(8)] + ["mlx5_bond_0"], [0, 1], "0-63,128-191", "64-127,192-255"),
    "b200/topo-m__1.txt": (8, "nvlink", 18, [], [0, 1], "0-47,96-143", "48-95,144-191"),
    "rtx_pro_6000_blackwell/topo-m__1.txt": (8, "pcie", 0, [], [0, 1], "0-63,128-191", "64-127,192-238"),
    "h100/topo-m__2.txt": (8, "nvlink", 18, ["mlx5_0"], [0, 1], "0-103", "104-207"),
    "h100/h100-sxm-1gpu-vm_topo-m__1.txt": (1, "single", None, [], [0], "0-19", "0-19"),
    "mig/h100-mig-1gpu-vm_topo-m__1.txt": (1, "single", None, [], [0], "0-19", "0-19"),
    "a100/topo-m__1.txt": (8, "nvlink", 12, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], [0, 1], "0-31,64-95", "32-63,96-127"),
    "l40s_l4/topo-m-l40s-4x__1.txt": (4, "pcie", 0, ["mlx5_0", "mlx5_1"], [0, 1], "0-95,192-287", "96-191,288-383"),
    "rtx_4090_5090/topo-m-5090-2x__1.txt": (2, "pcie", 0, [], [0], "0-63", "0-63"),
    "other/h200_topo-m__1.txt": (8, "nvlink", 18, ["mlx5_%d" % i for i in range(8)], [0, 1], "0-63,128-191", "64-127,192-255"),
    "h200-1gpu/topo_m.txt": (1, "single", None, [], [0], "0-15", "0-15"),
}


def rows_for(n, name="NVIDIA B300 SXM6 AC", cc="10.3"):
    return [{"index": str(i), "name": name, "uuid": "GPU-%d" % i, "pci.bus_id": "00000000:%02X:00.0" % i,
             "memory.total": "1000", "compute_cap": cc, "driver_version": "580.159.04",
             "mig.mode.current": "Disabled"} for i in range(n)]


@pytest.mark.parametrize("capture", sorted(TOPO))
def test_topology_of_every_capture(capture):
    gpus, interconnect, min_links, nics, numa, cpu0, cpu_last = TOPO[capture]
    topo = nvidia.parse_topo(read(capture))
    facts = nvidia.build_facts(rows_for(gpus), topo)
    t = facts["topology"]
    assert (t["interconnect"], t["nvlink_min_links"]) == (interconnect, min_links)
    assert [n["device"] for n in t["nics"]] == nics
    assert t["numa_nodes"] == numa
    assert facts["gpus"][0]["cpu_affinity"] == cpu0
    assert facts["gpus"][-1]["cpu_affinity"] == cpu_last
    assert sorted(t["matrix"]) == ["GPU%d" % i for i in range(gpus)]


def test_topo_header_escape_codes_are_stripped():
    # raw ESC[4m/ESC[0m bytes (RTX PRO 6000) and their remains without ESC (B300, pasted)
    assert "\x1b[4m" in read("rtx_pro_6000_blackwell/topo-m__1.txt")
    assert "[4mGPU0" in read("b300/topo-m__2.txt") and "\x1b" not in read("b300/topo-m__2.txt")
    for cap in ("rtx_pro_6000_blackwell/topo-m__1.txt", "b300/topo-m__2.txt"):
        topo = nvidia.parse_topo(read(cap))
        assert topo["devices"][0] == "GPU0"
        assert "GPU NUMA ID" not in topo["devices"]


def test_degraded_nvlink_pair_gives_partial_and_min():
    # derived from the real B200 capture: one pair lost its NVLinks, another runs on fewer
    text = read("b200/topo-m__1.txt").splitlines(True)
    text[1] = text[1].replace("NV18", "SYS", 1)              # GPU0-GPU1
    text[2] = text[2].replace("NV18", "SYS", 1)              # GPU1-GPU0
    text[3] = text[3].replace("NV18\tNV18\t X", "NV18\tNV12\t X")  # GPU2-GPU1
    topo = nvidia.parse_topo("".join(text))
    t = nvidia.build_facts(rows_for(8), topo)["topology"]
    assert t["interconnect"] == "nvlink_partial"
    assert t["nvlink_min_links"] == 0
    assert t["matrix"]["GPU0"]["GPU1"] == "SYS"


def test_degraded_but_connected_nvlink():
    # derived from the real H100 capture; only GPU3's row shows the degraded link: the worse direction counts
    text = read("h100/topo-m__2.txt").replace("GPU3\tNV18", "GPU3\tNV6", 1)
    t = nvidia.build_facts(rows_for(8, "NVIDIA H100 80GB HBM3", "9.0"), nvidia.parse_topo(text))["topology"]
    assert (t["interconnect"], t["nvlink_min_links"]) == ("nvlink", 6)


def test_legacy_mlx5_columns():
    # derived from the real A100 capture: older drivers name NIC columns mlx5_N, with no legend
    text = read("a100/topo-m__1.txt").split("\nLegend")[0]
    for i in range(4):
        text = text.replace("NIC%d" % i, "mlx5_%d" % i)
    topo = nvidia.parse_topo(text)
    assert [n["device"] for n in topo["nics"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert nvidia.summarize_topology(topo, 8)["interconnect"] == "nvlink"


def test_topology_unknown_without_topo():
    facts = nvidia.build_facts(rows_for(8), None)
    assert facts["topology"]["interconnect"] == "unknown"
    assert facts["topology"]["nvlink_min_links"] is None
    assert any("topology not readable" in w for w in facts["warnings"])


def test_topo_garbage_raises():
    with pytest.raises(nvidia.NvidiaSmiError):
        nvidia.parse_topo("Failed to run topology command")


def header_csv(text):
    """A captured --format=csv (with header and units) as rows keyed by field names."""
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
    r = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    keys = [h.split(" [")[0] for h in r[0]]
    return [{k: v.split(" ")[0] if k == "memory.total" else v for k, v in zip(keys, row)} for row in r[1:]]


def test_b300_query_capture():
    rows = header_csv(read("b300/query-gpu-csv__1.txt"))
    for i, r in enumerate(rows):
        r["index"] = str(i)
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read("b300/topo-m__2.txt")))
    assert facts["gpu_count"] == 7  # the capture has 7 rows
    assert (facts["family"], facts["compute_capability"], facts["driver_version"]) == ("b300", "10.3", "610.57.04")
    assert {g["sm"] for g in facts["gpus"]} == {"sm_103"}
    assert facts["homogeneous"] is True


def test_h100_query_capture_300_fields():
    rows = header_csv(read("h100/h100-sxm-1gpu-vm_query-gpu-csv-idle__1.txt"))
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read("h100/h100-sxm-1gpu-vm_topo-m__1.txt")), "13.1")
    g = facts["gpus"][0]
    assert (facts["family"], g["name"], g["memory_total_mib"], g["pci_bus_id"]) == ("h100", "NVIDIA H100 80GB HBM3", 81559, "00000000:00:09.0")
    assert facts["topology"]["interconnect"] == "single"
    assert g["mig_enabled"] is False


def test_mig_capture_warns():
    rows = header_csv(read("mig/h100-mig-1gpu-vm_query-gpu-csv-idle__1.txt"))
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read("mig/h100-mig-1gpu-vm_topo-m__1.txt")))
    assert facts["gpus"][0]["mig_enabled"] is True
    assert any("MIG is enabled on GPU(s) 0" in w for w in facts["warnings"])


def test_h200_8x_query_capture():
    rows = header_csv(read("other/h200_query-gpu-csv__1.txt"))
    for r in rows:
        r["compute_cap"] = None  # not in this capture: the family must come from the name table
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read("other/h200_topo-m__1.txt")), cc_from_table=True)
    assert (facts["family"], facts["gpu_count"], facts["compute_capability"]) == ("h200", 8, "9.0")
    assert facts["gpus"][7]["memory_total_mib"] == 143771
    assert facts["topology"]["interconnect"] == "nvlink"


def test_h200_live_capture_noheader_nounits():
    text = read("h200-1gpu/query_gpu.csv")
    fields = text.splitlines()[0].split("--query-gpu=")[1].split()[0].split(",")
    rows = nvidia.parse_query("\n".join(text.splitlines()[1:]), fields)
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read("h200-1gpu/topo_m.txt")))
    g = facts["gpus"][0]
    assert (facts["family"], g["uuid"], g["compute_capability"], g["numa_node"]) == ("h200", "GPU-1682937c-62a9-9033-a256-5f4eec0a7d47", "9.0", 0)
    assert facts["driver_version"] == "580.159.04"


def test_rtx_pro_6000_noheader_nounits_capture():
    fields = ["index", "uuid", "name", "pci.bus_id", "driver_version"] + ["f%d" % i for i in range(5, 7)] + ["memory.total"] + ["f%d" % i for i in range(8, 23)]
    rows = nvidia.parse_query(read("rtx_pro_6000_blackwell/query-gpu-csv-noheader-nounits__1.txt"), fields)
    facts = nvidia.build_facts(rows, None, cc_from_table=True)
    assert (facts["family"], facts["gpu_count"], facts["compute_capability"]) == ("rtx_pro_6000", 4, "12.0")
    assert facts["gpus"][3]["pci_bus_id"] == "00000000:C1:00.0"


def test_parse_query_rejects_wrong_width():
    with pytest.raises(nvidia.NvidiaSmiError):
        nvidia.parse_query("0, NVIDIA H200", nvidia.QUERY_FIELDS)


@pytest.mark.parametrize("name,cc,family", [
    ("NVIDIA B300 SXM6 AC", "10.3", "b300"),
    ("NVIDIA GB300", "10.3", "gb300"),
    ("NVIDIA B200", "10.0", "b200"),
    ("NVIDIA GB200", "10.0", "gb200"),
    ("NVIDIA H200", "9.0", "h200"),
    ("NVIDIA GH200 480GB", "9.0", "gh200"),
    ("NVIDIA H100 80GB HBM3", "9.0", "h100"),
    ("NVIDIA H100 PCIe", "9.0", "h100"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "rtx_pro_6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0", "rtx_pro_6000"),
    ("NVIDIA GeForce RTX 5090", "12.0", "rtx_5090"),
    ("NVIDIA GeForce RTX 4090", "8.9", "rtx_4090"),
    ("NVIDIA GeForce RTX 3090", "8.6", "rtx_3090"),
    ("NVIDIA L40S", "8.9", "l40s"),
    ("NVIDIA L4", "8.9", "l4"),
    ("NVIDIA A100-SXM4-40GB", "8.0", "a100"),
    ("Tesla V100-SXM2-32GB", "7.0", "v100"),
    ("NVIDIA H20", "9.0", "unknown"),
    ("NVIDIA B300 SXM6 AC", "9.0", "unknown"),   # name and capability disagree: never guess
])
def test_family(name, cc, family):
    assert nvidia.family_for(name, cc) == family


def test_unknown_model_warns_not_fails():
    facts = nvidia.build_facts(rows_for(2, "NVIDIA Future GPU", "13.0"), None)
    assert facts["family"] == "unknown"
    assert any("not a known family" in w and "NVIDIA Future GPU" in w for w in facts["warnings"])


def test_mixed_host():
    rows = rows_for(2)
    rows[1].update(name="NVIDIA H200", compute_cap="9.0")
    facts = nvidia.build_facts(rows, None)
    assert (facts["family"], facts["homogeneous"], facts["compute_capability"]) == ("mixed", False, None)


@pytest.mark.parametrize("capture", [
    "b200/nvidia-smi__1.txt", "h100/h100-sxm-1gpu-vm_nvidia-smi-idle__1.txt", "h100/nvidia-smi-h100-pcie-2x__3.txt",
    "l40s_l4/nvidia-smi-l40s-4x__1.txt", "rtx_pro_6000_blackwell/nvidia-smi-partial__1.txt", "h200-1gpu/default.txt",
])
def test_driver_branch_table_matches_captures(capture):
    import re
    m = re.search(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)", read(capture))
    assert nvidia.cuda_for_driver(m.group(1)) == m.group(2)


def test_driver_branch_newer_than_table_is_not_guessed():
    assert nvidia.cuda_for_driver("610.57.04") is None


@pytest.mark.parametrize("text,kind", [
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95", "driver_mismatch"),
    ("No devices were found", "no_devices"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ...", "no_driver"),
    ('Field "compute_cap" is not a valid field to query.', "invalid_field"),
])
def test_classify_error(text, kind):
    assert nvidia.classify_error(text)[0] == kind


def test_invalid_field_capture():
    assert nvidia.classify_error(read("rtx_pro_6000_blackwell/query-gpu-invalid-field__1.txt"))[0] == "invalid_field"


def test_live_h200_capture_gives_the_facts_the_module_returned_there():
    """tests/device/live.sh ran the module on a real H200; the parser must reproduce its facts
    from the raw output captured in the same run."""
    import json
    live = "h200-1gpu-live/"
    text = read(live + "query-gpu-module.txt")
    assert text.splitlines()[0].split("--query-gpu=")[1].split()[0] == ",".join(nvidia.QUERY_FIELDS)
    rows = nvidia.parse_query("\n".join(text.splitlines()[1:]), nvidia.QUERY_FIELDS)
    facts = nvidia.build_facts(rows, nvidia.parse_topo(read(live + "topo-m.txt")), "13.0")
    expected = json.loads(read(live + "facts.expected.json"))
    for added_by_module in ("cuda_version_source", "nvidia_smi_calls"):
        expected.pop(added_by_module)
    assert facts == expected


def test_topo_rows_that_lost_a_separator_keep_the_matrix():
    """Real B200 capture with two separators removed the way some drivers (and copies) print them:
    two links glued (NV18NV18) and the last link glued to the CPU affinity (SYS0-55)."""
    real = (CAP / "b200" / "topo-m__1.txt").read_text()
    clean = nvidia.parse_topo(real)
    lines = real.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("GPU3"))
    cells = lines[i].split("\t")
    j = next(k for k in range(2, len(cells)) if cells[k].startswith("NV") and cells[k - 1].startswith("NV"))
    cells[j - 1:j + 1] = [cells[j - 1] + cells[j]]
    lines[i] = "\t".join(cells)
    k = next(n for n, l in enumerate(lines) if l.startswith("GPU6"))
    lines[k] = re.sub(r"(NV18)\t(\d)", r"\1\2", lines[k], count=1)  # the last link glued to the CPU affinity
    messy = nvidia.parse_topo("\n".join(lines) + "\n")
    assert messy["matrix"] == clean["matrix"] and messy["gpus"] == clean["gpus"]
    assert any("GPU3" in w and "no separator" in w for w in messy["warnings"])
    assert any("GPU6" in w and "no separator" in w for w in messy["warnings"])
    assert clean["warnings"] == []


def test_topo_row_that_cannot_be_read_keeps_the_rest_and_warns():
    real = (CAP / "b200" / "topo-m__1.txt").read_text()
    clean = nvidia.parse_topo(real)
    lines = real.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("GPU5"))
    cells = lines[i].split("\t")
    cells[4] = "??"
    lines[i] = "\t".join(cells)
    messy = nvidia.parse_topo("\n".join(lines) + "\n")
    assert {k: v for k, v in messy["matrix"].items() if k != "GPU5"} == {k: v for k, v in clean["matrix"].items() if k != "GPU5"}
    assert len(messy["matrix"]["GPU5"]) == 3  # the links before the unreadable cell
    assert messy["gpus"]["GPU0"] == clean["gpus"]["GPU0"]
    assert any("GPU5" in w and "readable" in w for w in messy["warnings"])
    facts = nvidia.summarize_topology(messy, 8)
    assert facts["interconnect"] == "unknown"  # a pair that cannot be read is not guessed


def test_the_gpudirect_nics_are_those_on_a_switch_with_a_gpu():
    """Real B300 capture: mlx5_10..17 each sit on a PCIe switch with one GPU (PXB); mlx5_bond_0, the bonded
    frontend NIC, is across the CPU (NODE/SYS) from every GPU and is no NIC for NCCL."""
    topo = nvidia.parse_topo(read("b300/topo-m__2.txt"))
    nics = nvidia.build_facts(rows_for(8), topo)["topology"]["nics"]
    near = dict((n["device"], n["near_gpus"]) for n in nics)
    assert near["mlx5_bond_0"] == []
    assert all(len(near["mlx5_1%d" % i]) >= 1 for i in range(8)), near
    assert sorted(g for i in range(8) for g in near["mlx5_1%d" % i]) == ["GPU%d" % i for i in range(8)], near
