"""cuda_pip_prefix and cuda_probe run for real on the controller with NVIDIA's CUDA 13.0 wheels
(the wheelhouse scripts/test downloads): a CUDA_HOME that compiles for sm_103 and sm_120."""
import os
import sys
from pathlib import Path

import pytest

PACKAGES = [ln.strip() for ln in (Path(__file__).resolve().parents[3] / "cuda" / "requirements.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]


@pytest.fixture(scope="module")
def wheelhouse():
    house = os.environ.get("DDTREE_CUDA_WHEELHOUSE", "")
    assert house and list(Path(house).glob("nvidia_cuda_nvcc-*.whl")), \
        "DDTREE_CUDA_WHEELHOUSE (%r) has no CUDA wheels: run through scripts/test" % house
    return house


def test_prefix_builds_once_and_probe_compiles(run_module, tmp_path, wheelhouse):
    prefix = tmp_path / "cuda-13.0"
    # the tool venv does not exist yet: the module makes it, and only when the prefix has to be built
    pip = tmp_path / "tools" / "pip" / "bin" / "pip"
    args = dict(prefix=str(prefix), version="13.0", packages=PACKAGES, pip=str(pip), pip_venv_python=sys.executable,
                find_links=wheelhouse)
    assert run_module("cuda_pip_prefix", check=True, **args)["changed"] and not prefix.exists() and not pip.exists()
    r = run_module("cuda_pip_prefix", **args)
    assert r["changed"] and r["nvcc_version"] == "13.0" and pip.exists()
    assert (prefix / "bin" / "nvcc").exists() and (prefix / "include" / "curand.h").exists()
    assert os.readlink(prefix / "lib64") == "lib" and not list(tmp_path.glob("*.staging-*"))
    assert not run_module("cuda_pip_prefix", **args)["changed"]

    probe = run_module("cuda_probe", cuda_home=str(prefix), compute_caps=["10.3", "12.0", "9.9"], python="/usr/bin/python3")
    assert probe["nvcc_version"] == "13.0"
    assert probe["archs_ok"] == ["sm_103", "sm_120"] and list(probe["archs_failed"]) == ["sm_99"]
    assert probe["headers_ok"], probe["headers_error"]

    no_pip = dict(args, prefix=str(tmp_path / "cuda-x"), pip=str(tmp_path / "none" / "bin" / "pip"), pip_venv_python="")
    no_pip = run_module("cuda_pip_prefix", **no_pip)
    assert no_pip["failed"] and not (tmp_path / "cuda-x").exists()

    wrong = run_module("cuda_pip_prefix", **dict(args, prefix=str(tmp_path / "cuda-12.9"), version="12.9"))
    assert wrong["failed"] and "reports release 13.0, not 12.9" in wrong["msg"]
    assert not (tmp_path / "cuda-12.9").exists()


def test_probe_reports_missing_headers(run_module, tmp_path, wheelhouse):
    fake = tmp_path / "cuda"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    (fake / "bin" / "nvcc").chmod(0o755)
    probe = run_module("cuda_probe", cuda_home=str(fake), compute_caps=[], python="/usr/bin/python3")
    assert not probe["headers_ok"] and "curand.h" in probe["headers_error"]
