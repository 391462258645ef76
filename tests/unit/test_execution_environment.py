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
    assert "jmespath==" + pins["jmespath"] in deps["python"]
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert deps["galaxy"]["collections"][0]["name"] == "ddtree-fleet-%s.tar.gz" % version
