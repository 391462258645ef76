"""The nvidia-smi replay double answers like nvidia-smi and can be made to fail."""
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "doubles" / "nvidia-smi"
REPLAYS = ROOT / "tests" / "doubles" / "replays"
CAPTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"


@pytest.fixture
def smi(tmp_path):
    def run(replay, *args, fault=None):
        (tmp_path / "set").write_text(replay)
        if fault:
            (tmp_path / "fault").write_text(fault)
        env = {"NVIDIA_SMI_REPLAY_ETC": str(tmp_path), "NVIDIA_SMI_REPLAY_DATA": str(REPLAYS), "PATH": "/usr/bin:/bin"}
        return subprocess.run([str(DOUBLE), *args], capture_output=True, text=True, env=env, check=False)
    return run


def test_topo_is_the_capture_byte_for_byte(smi):
    out = smi("b300_8x", "topo", "-m")
    assert out.returncode == 0
    assert out.stdout.encode() == (CAPTURES / "b300" / "topo-m__2.txt").read_bytes()


def test_query_answers_requested_fields_in_order(smi):
    out = smi("rtx_pro_6000_8x", "--query-gpu=compute_cap,index,memory.total", "--format=csv,noheader,nounits")
    assert out.returncode == 0
    assert out.stdout.splitlines()[7] == "12.0, 7, 97887"


def test_query_with_header_and_units(smi):
    out = smi("h200_8x", "--query-gpu=index,memory.total", "--format=csv")
    assert out.stdout.splitlines()[:2] == ["index, memory.total [MiB]", "0, 143771 MiB"]


def test_unknown_field_fails_like_nvidia_smi(smi):
    out = smi("b200_8x", "--query-gpu=index,bogus.field", "--format=csv")
    assert out.returncode == 2
    assert out.stdout.strip() == (CAPTURES / "rtx_pro_6000_blackwell" / "query-gpu-invalid-field__1.txt").read_text().split("\n\n")[0].strip()


@pytest.mark.parametrize("fault,code,text", [
    ("nvml_mismatch", 18, "Failed to initialize NVML: Driver/library version mismatch"),
    ("no_devices", 6, "No devices were found"),
])
def test_faults(smi, fault, code, text):
    out = smi("b300_8x", "--query-gpu=index", "--format=csv", fault=fault)
    assert (out.returncode, out.stdout.splitlines()[0]) == (code, text)


def test_old_driver_rejects_compute_cap_only(smi):
    assert smi("b300_8x", "--query-gpu=compute_cap", "--format=csv", fault="old_driver").returncode == 2
    assert smi("b300_8x", "--query-gpu=name", "--format=csv", fault="old_driver").returncode == 0


def test_topo_fail_keeps_queries(smi):
    assert smi("b300_8x", "topo", "-m", fault="topo_fail").returncode != 0
    assert smi("b300_8x", "--query-gpu=name", "--format=csv", fault="topo_fail").returncode == 0


def test_unexpected_command_is_refused(smi):
    assert smi("h200_8x", "-q").returncode == 2  # no -q capture of that machine
    assert smi("b300_8x", "nvlink", "-c").returncode == 2


def test_q_and_nvlink_are_the_captures_byte_for_byte(smi, tmp_path):
    assert smi("rtx_pro_6000_8x", "-q").stdout.encode() == (CAPTURES / "rtx_pro_6000_blackwell" / "q__1.txt").read_bytes()
    assert smi("b200_8x", "nvlink", "-s").stdout.encode() == (CAPTURES / "b200" / "nvlink-s__1.txt").read_bytes()
    # the B300 set's health stand-ins (no B300 -q is published): an 8x H100 SXM5 HGX -q, the B200 nvlink -s
    assert smi("b300_8x", "-q").stdout.encode() == (CAPTURES / "h100" / "h100-sxm-8x_q__1.txt").read_bytes()
    assert smi("b300_8x", "nvlink", "-s").stdout.encode() == (CAPTURES / "b200" / "nvlink-s__1.txt").read_bytes()
    # a test can present a degraded GPU: the real degraded capture replaces the set's own -q
    (tmp_path / "q").write_text("health/a10-remapped-rows-pending__1.txt")
    out = smi("rtx_pro_6000_8x", "-q")
    assert out.stdout.encode() == (CAPTURES / "health" / "a10-remapped-rows-pending__1.txt").read_bytes()
    assert smi("b200_8x", "nvlink", "-s").stdout.encode() == (CAPTURES / "b200" / "nvlink-s__1.txt").read_bytes()


@pytest.mark.parametrize("replay", sorted(p.name for p in REPLAYS.iterdir() if p.name != "health"))
def test_replay_sets_are_consistent(replay):
    doc = json.loads((REPLAYS / replay / "gpus.json").read_text())
    fields = set(doc["gpus"][0])
    assert all(set(g) == fields for g in doc["gpus"])
    assert [g["index"] for g in doc["gpus"]] == [str(i) for i in range(len(doc["gpus"]))]
    assert doc["provenance"], "every replay set says where its values come from"
