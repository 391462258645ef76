"""The execution-environment definition names the same pins as the controller requirements and
the collection version it packages (ansible-builder itself cannot run here: no registry)."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_ee_pins_match_the_controller_and_the_collection():
    ee = yaml.safe_load((ROOT / "ee" / "execution-environment.yml").read_text())
    pins = dict(ln.split("==") for ln in (ROOT / "requirements" / "controller.txt").read_text().split()
                if "==" in ln and not ln.startswith("#"))
    deps = ee["dependencies"]
    assert ee["version"] == 3
    assert deps["ansible_core"]["package_pip"] == "ansible-core==" + pins["ansible-core"]
    assert deps["ansible_runner"]["package_pip"] == "ansible-runner==" + pins["ansible-runner"]
    for name in ("jmespath", "plotly", "narwhals"):  # what the controller-side filters import
        assert "%s==%s" % (name, pins[name]) in deps["python"]
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert deps["galaxy"]["collections"][0]["name"] == "ddtree-fleet-%s.tar.gz" % version


def test_ansible_builder_makes_a_build_context(tmp_path):
    """ansible-builder itself (the controller venv pins it) validates the definition and writes the
    build context; only the image build needs a registry."""
    import shutil
    import subprocess

    builder = shutil.which("ansible-builder")
    assert builder, "ansible-builder is pinned in requirements/controller.txt; run through scripts/test"
    shutil.copy(ROOT / "ee" / "execution-environment.yml", tmp_path)
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    (tmp_path / ("ddtree-fleet-%s.tar.gz" % version)).write_bytes(b"")  # the built collection goes here
    p = subprocess.run([builder, "create", "-f", "execution-environment.yml", "-c", "ctx"], cwd=tmp_path,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    containerfile = (tmp_path / "ctx" / "Containerfile").read_text()
    assert "COPY _build/collections/ddtree-fleet-%s.tar.gz" % version in containerfile
    assert "ansible-galaxy collection install" in containerfile
    assert (tmp_path / "ctx" / "_build" / "collections" / ("ddtree-fleet-%s.tar.gz" % version)).exists()
    reqs = yaml.safe_load((tmp_path / "ctx" / "_build" / "requirements.yml").read_text())
    assert reqs["collections"][0]["name"] == "ddtree-fleet-%s.tar.gz" % version
