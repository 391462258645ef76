"""The supported ansible-core releases are stated once each and agree: the pinned controller core
(requirements/controller.txt, the newest), the other tested ones (requirements/controller-X.Y.txt,
which scripts/test runs sanity and unit on), meta/runtime.yml's requires_ansible, the sanity ignore
files and the example CI's matrix."""
import re
import sys
from pathlib import Path

import yaml
from ansible.release import __version__ as running_core

ROOT = Path(__file__).resolve().parents[2]
REQ = ROOT / "requirements"


def pins(path):
    return dict(ln.strip().split("==", 1) for ln in path.read_text().splitlines()
                if "==" in ln and not ln.lstrip().startswith("#"))


def minor(version):
    return tuple(int(x) for x in version.split(".")[:2])


def cores():
    """{(major, minor): requirements file}, the pinned core's file first."""
    out = {minor(pins(REQ / "controller.txt")["ansible-core"]): REQ / "controller.txt"}
    for f in sorted(REQ.glob("controller-*.txt")):
        out[minor(pins(f)["ansible-core"])] = f
    return out


def test_each_other_core_file_is_named_for_its_core_and_pins_the_rest_as_the_controller_does():
    main = pins(REQ / "controller.txt")
    others = sorted(REQ.glob("controller-*.txt"))
    assert others, "no second ansible-core: sanity and unit must run on the oldest supported one too"
    for f in others:
        p = pins(f)
        assert f.name == "controller-%d.%d.txt" % minor(p["ansible-core"]), f.name
        assert minor(p["ansible-core"]) < minor(main["ansible-core"]), "the pinned core is the newest"
        for name, version in p.items():
            if name != "ansible-core":
                assert main.get(name) == version, "%s pins %s==%s, requirements/controller.txt %s" % (
                    f.name, name, version, main.get(name))


def test_requires_ansible_is_the_tested_range():
    spec = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    m = re.fullmatch(r">=(\d+)\.(\d+)\.0,<(\d+)\.(\d+)\.0", spec)
    assert m, "requires_ansible %r: a lower bound and an upper bound, full versions" % spec
    low, high = (int(m.group(1)), int(m.group(2))), (int(m.group(3)), int(m.group(4)))
    tested = sorted(cores())
    assert low == tested[0], "the lower bound is the oldest core tested (%s)" % (tested,)
    assert high == (tested[-1][0], tested[-1][1] + 1), "the upper bound is the one after the newest tested"
    assert [(2, v) for v in range(low[1], high[1])] == tested, "every release in the range is tested"


def test_the_running_core_is_a_tested_one():
    assert minor(running_core) in cores(), running_core
    assert sys.version_info >= (3, 12), "ansible-core 2.20+ runs on Python >= 3.12 on the controller"


def test_every_tested_core_has_its_sanity_ignore_file_each_ignore_with_its_reason():
    have = sorted(p.name for p in (ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    assert have == sorted("ignore-%d.%d.txt" % c for c in cores())
    for n in have:  # ansible-test fails on an ignore a core does not need, so each file is its core's own
        for ln in (ROOT / "tests" / "sanity" / n).read_text().splitlines():
            assert " # " in ln and ln.split(" # ", 1)[1].strip(), "%s: every ignore says why: %r" % (n, ln)


def test_the_example_ci_shows_the_matrix():
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    matrix = ci["jobs"]["sanity-unit"]["strategy"]["matrix"]["core"]
    assert sorted(minor(str(v)) for v in matrix) == sorted(cores())
