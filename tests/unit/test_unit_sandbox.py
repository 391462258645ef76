"""The service unit's device allow-list against what CUDA opened on a real GPU host.

tests/device/unit_sandbox.sh ran a CUDA probe on the lent H200 (driver 580) and recorded the
device nodes it opened (with their majors) and the host's /proc/devices names. Under
DevicePolicy=closed every one of them must be allowed by path or by its major's name
(DeviceAllow=char-NAME), or the server cannot open the GPU."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles" / "ddtree_service" / "templates" / "sglang@.service.j2"
RECORDED = sorted((ROOT / "tests" / "device" / "recorded").glob("unit_sandbox-*.txt"))


def allowed():
    paths, groups = set(), set()
    for line in TEMPLATE.read_text().splitlines():
        m = re.match(r"DeviceAllow=(\S+) r?w?", line)
        if m:
            (groups if m.group(1).startswith("char-") else paths).add(m.group(1).replace("char-", "", 1))
    return paths, groups


def test_every_device_cuda_opened_is_allowed():
    assert RECORDED, "no recorded run of tests/device/unit_sandbox.sh"
    paths, groups = allowed()
    for report in RECORDED:
        text = report.read_text()
        names = {}
        for major, name in re.findall(r"^(\d+) (\S+)$", text, re.M):
            names.setdefault(int(major), set()).add(name)
        opened = set(re.findall(r"^opened (\S+) \(char (\d+):\d+\)$", text, re.M))
        assert opened, report
        for node, major in opened:
            ok = node in paths or names.get(int(major), set()) & groups
            assert ok, "%s: %s (major %s: %s) is not allowed by %s" % (report.name, node, major, names.get(int(major)), TEMPLATE.name)


def test_the_probe_ran_under_the_units_syscall_filter():
    for report in RECORDED:
        text = report.read_text()
        assert text.count("ok: 1 GPU(s)") == 2, report  # bare and under the filter
