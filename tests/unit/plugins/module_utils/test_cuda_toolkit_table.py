"""The toolkit-vs-GPU-vs-driver rules (module_utils/nvidia.py), used by the cuda_toolkit role."""
import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia


@pytest.mark.parametrize("version,ccs,driver,floor,expect", [
    ("13.0", ["10.3", "12.0"], "13.2", "12.9", []),
    ("12.9", ["10.3"], "13.0", None, []),
    ("12.8", ["10.3"], "13.2", None, ["CUDA 12.8 cannot compile for sm_103 (needs >= 12.9)"]),
    ("12.8", ["12.0", "10.0"], None, None, []),
    ("12.6", ["12.0"], None, None, ["CUDA 12.6 cannot compile for sm_120 (needs >= 12.8)"]),
    ("13.0", ["9.0"], "12.8", None, ["CUDA 13.0 is newer than the driver supports (CUDA 12.8)"]),
    ("12.9", ["9.0"], "13.0", "13.0", ["CUDA 12.9 is below the profile's cuda_toolkit_min 13.0"]),
    ("13.0", ["5.0"], None, None, ["compute capability 5.0 is not in the toolkit table"]),
])
def test_toolkit_problems(version, ccs, driver, floor, expect):
    got = nvidia.toolkit_problems(version, ccs, driver, floor)
    assert len(got) == len(expect)
    for want, line in zip(expect, got):
        assert want in line


def test_every_family_cc_has_a_toolkit_floor():
    assert {cc for _f, cc, _n in nvidia.FAMILIES} <= set(nvidia.ARCH_MIN_CUDA)


def test_version_tuple():
    assert nvidia.version_tuple("12.9") < nvidia.version_tuple("12.10") < nvidia.version_tuple("13.0")
