"""ddtree.fleet.packages for real on this (Debian) machine, through ansible-playbook: dpkg's view first,
a tool on PATH counts, apt only for what is missing."""
import shutil

import pytest

from ansible_collections.ddtree.fleet.plugins.modules import packages

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg")


def test_installed_reads_dpkg_status_lines():
    lines = ["ii  openssh-server", "ii  zstd:amd64", "un  ninja-build", "rc  gcc", ""]
    assert packages.installed(lines) == {"openssh-server", "zstd"}


def test_everything_present_is_one_quick_call(run_module):
    r = run_module("packages", names=["coreutils", "dpkg"])
    assert r["changed"] is False and r["missing"] == [] and r["present"] == ["coreutils", "dpkg"]


def test_a_tool_on_path_counts_as_its_package(run_module):
    r = run_module("packages", check=True, names=["ddtree-no-such-package"], tools={"ddtree-no-such-package": "sh"})
    assert r["changed"] is False and r["missing"] == [] and r["present"] == ["ddtree-no-such-package"]


def test_a_missing_package_goes_to_apt_and_a_failure_names_it(run_module):
    r = run_module("packages", check=True, names=["coreutils", "ddtree-no-such-package"])
    assert r["missing"] == ["ddtree-no-such-package"]
    assert r["failed"] is True and "apt could not install ddtree-no-such-package" in r["msg"]
