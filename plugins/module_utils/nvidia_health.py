# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health: what `nvidia-smi -q` and `nvidia-smi nvlink -s` say, and the verdict against a profile.

Parsed from the text nvidia-smi prints (tested on real captures from drivers 535 to 580, see
tests/unit/plugins/module_utils/test_nvidia_health.py). Field names and layouts changed across
driver branches ("Clocks Throttle Reasons" became "Clocks Event Reasons", SRAM uncorrectable
split into Parity and SEC-DED, "Double Bit" ECC counters before Ampere); the readers take each
form they know and return None for what the driver does not report, never a guess.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.ddtree.fleet.plugins.module_utils import xid

# Clock event (throttle) reasons that mean the GPU is held back by hardware or heat. The others
# (Idle, Applications Clocks Setting, SW Power Cap, Sync Boost, Display Clock Setting) are normal
# on a healthy GPU.
BAD_THROTTLE = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")

# Verdict thresholds; a profile's `health:` mapping overrides any of them (profiles/_defaults.yml).
DEFAULT_THRESHOLDS = {
    "ecc_uncorrectable_volatile_max": 0,     # since the last driver load
    "ecc_uncorrectable_aggregate_max": None,  # lifetime; None: reported, not gated
    "remapped_rows_pending": False,          # a pending remap needs a GPU reset first
    "remapped_rows_failure": False,          # a failed remap: the GPU needs service
    "retired_pages_pending": False,
    "throttle_reasons_refused": list(BAD_THROTTLE),
    "pcie_width_below_max": False,           # a link trained narrower than it can
    "pcie_gen_below_max": True,              # idle GPUs drop the link generation to save power
    "nvlink_inactive_max": 0,                # per GPU, on hosts whose links nvlink -s reports
    "fabric_required": False,                # NVSwitch families: CUDA needs the fabric completed
    "persistence_mode_required": False,
    # XIDs in the kernel log since boot (module_utils/xid.py, xid_catalog.yml): per class refuse, warn or
    # ignore over the catalogue's defaults; per XID number over its class; lines an operator acknowledged
    "xid_policy": {},
    "xid_overrides": {},
    "xid_acknowledged": [],
    "kernel_log_unread": "warn",             # a host whose kernel log cannot be read: warn or refuse
}

_GPU_HEAD = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9])\s*$")
_KEY_VALUE = re.compile(r"^(\S.*?)\s+:\s?(.*)$")


def parse_q(text):
    """`nvidia-smi -q` as one nested dict per GPU (section -> key -> value), in order.

    Each dict has `_bus_id`. Indentation gives the nesting; a line without a value opens a
    section. A key repeated at one level keeps its first value.
    """
    gpus = []
    stack = []  # (indent, dict)
    for raw in text.expandtabs(8).splitlines():
        if not raw.strip():
            continue
        head = _GPU_HEAD.match(raw)
        if head:
            gpu = {"_bus_id": head.group(1)}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        if not stack:
            continue  # the header before the first GPU (timestamp, driver version)
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        kv = _KEY_VALUE.match(line)
        if kv and kv.group(2).strip():
            parent.setdefault(kv.group(1).strip(), kv.group(2).strip())
        else:
            name = kv.group(1).strip() if kv else line
            section = parent.setdefault(name, {})
            if not isinstance(section, dict):
                section = {}
            stack.append((indent, section))
    return gpus


def parse_q_header(text):
    """Driver and CUDA version from the lines above the first GPU of `nvidia-smi -q`."""
    out = {}
    for key, field in (("Driver Version", "driver_version"), ("CUDA Version", "cuda_version")):
        m = re.search(r"^%s\s*:\s*(\S+)" % key, text, re.M)
        out[field] = m.group(1) if m else None
    return out


def parse_nvlink_status(text):
    """`nvidia-smi nvlink -s`: {gpu index: {"links": n, "inactive": [link ids], "speeds_gbps": [..]}}."""
    gpus = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^GPU (\d+):", line)
        if m:
            current = gpus.setdefault(int(m.group(1)), {"links": 0, "inactive": [], "speeds_gbps": []})
            continue
        m = re.match(r"^Link (\d+):\s*(.*)$", line)
        if m and current is not None:
            current["links"] += 1
            state = m.group(2).strip()
            speed = re.match(r"^([0-9.]+) GB/s", state)
            if speed:
                current["speeds_gbps"].append(float(speed.group(1)))
            else:
                current["inactive"].append(int(m.group(1)))
    return gpus


def _get(tree, *path):
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


def _first(tree, *paths):
    for path in paths:
        value = _get(tree, *path)
        if value is not None:
            return value
    return None


def _count(value):
    if value is None:
        return None
    m = re.match(r"^(\d+)", str(value).strip())
    return int(m.group(1)) if m else None


def _yes(value):
    if value is None:
        return None
    v = str(value).strip().lower()
    if v in ("yes", "enabled", "active"):
        return True
    if v in ("no", "disabled", "not active"):
        return False
    return None


def _uncorrectable(section):
    """Sum of the uncorrectable ECC counters of one Volatile/Aggregate section, None when unreported."""
    if not isinstance(section, dict):
        return None
    double_bit = section.get("Double Bit")
    if isinstance(double_bit, dict):  # pre-Ampere layout: Double Bit -> Total
        return _count(double_bit.get("Total"))
    values = [_count(v) for k, v in section.items() if "Uncorrectable" in k and not isinstance(v, dict)]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _throttle(gpu):
    section = _first(gpu, ("Clocks Event Reasons",), ("Clocks Throttle Reasons",))
    if not isinstance(section, dict):
        return None
    active = []

    def walk(tree):
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value)
            elif _yes(value):
                active.append(key)
    walk(section)
    return active


def gpu_health(gpu):
    """The health fields of one GPU of parse_q(); None where the driver does not report one."""
    pci_link = _get(gpu, "PCI", "GPU Link Info") or {}
    return {
        "bus_id": gpu.get("_bus_id"),
        "persistence_mode": _yes(gpu.get("Persistence Mode")),
        "ecc_mode": _get(gpu, "ECC Mode", "Current"),
        "ecc_uncorrectable_volatile": _uncorrectable(_get(gpu, "ECC Errors", "Volatile")),
        "ecc_uncorrectable_aggregate": _uncorrectable(_get(gpu, "ECC Errors", "Aggregate")),
        "retired_pages_dbe": _count(_first(gpu, ("Retired Pages", "Double Bit ECC"),
                                           ("Retired Pages", "Double Bit ECC", "Count"))),
        "retired_pages_pending": _yes(_first(gpu, ("Retired Pages", "Pending Page Blacklist"),
                                             ("Retired Pages", "Pending Page Retirement"))),
        "remapped_rows_uncorrectable": _count(_get(gpu, "Remapped Rows", "Uncorrectable Error")),
        "remapped_rows_pending": _yes(_get(gpu, "Remapped Rows", "Pending")),
        "remapped_rows_failure": _yes(_get(gpu, "Remapped Rows", "Remapping Failure Occurred")),
        "pcie_gen_current": _count(_get(pci_link, "PCIe Generation", "Current")),
        "pcie_gen_max": _count(_get(pci_link, "PCIe Generation", "Max")),
        "pcie_width_current": _count(_get(pci_link, "Link Width", "Current")),
        "pcie_width_max": _count(_get(pci_link, "Link Width", "Max")),
        "throttle_active": _throttle(gpu),
        "fabric_state": _na(_get(gpu, "Fabric", "State")),
        "fabric_status": _na(_get(gpu, "Fabric", "Status")),
    }


def _na(value):
    return None if value in (None, "N/A", "[N/A]") else value


def host_health(q_text, nvlink_text=None):
    """Per-GPU health (index order) from `-q` text and, where given, `nvlink -s` text."""
    gpus = [gpu_health(g) for g in parse_q(q_text)]
    links = parse_nvlink_status(nvlink_text) if nvlink_text else {}
    for index, gpu in enumerate(gpus):
        link = links.get(index)
        gpu["nvlink_links"] = link["links"] if link else None
        gpu["nvlink_inactive"] = link["inactive"] if link else None
    return gpus


def _word(flag):
    return {True: "yes", False: "no"}.get(flag, "unknown")


def unread(error, sources=()):
    """nvidia.health of a host whose counters were not read, and why."""
    return {"read": False, "sources": list(sources), "error": error, "gpus": [], "fabric": {}}


def facts_problems(host, nvidia, thresholds):
    """problems() for a host's nvidia facts: the NVLink bond the links are held to is the topology's
    smallest NV# where every GPU pair has NVLink. Then the XIDs of the kernel log the profile refuses."""
    topology = (nvidia or {}).get("topology") or {}
    bond = topology.get("nvlink_min_links") if topology.get("interconnect") == "nvlink" else None
    return (problems(host, (nvidia or {}).get("health"), thresholds, nvlink_links_expected=bond)
            + xid.verdict(host, (nvidia or {}).get("kernel_log"), thresholds_for(thresholds))["refuse"])


def facts_warnings(host, nvidia, thresholds):
    """What the health check lets pass with a warning: the XIDs the profile warns about."""
    return xid.verdict(host, (nvidia or {}).get("kernel_log"), thresholds_for(thresholds))["warn"]


def facts_xids(host, nvidia, thresholds):
    """One entry per XID event of the kernel log, with its class and the profile's action (the fleet report's)."""
    return xid.verdict(host, (nvidia or {}).get("kernel_log"), thresholds_for(thresholds))["seen"]


def thresholds_for(profile_health):
    """DEFAULT_THRESHOLDS with a profile's `health:` overrides."""
    merged = dict(DEFAULT_THRESHOLDS)
    merged.update(profile_health or {})
    return merged


def problems(host, health, thresholds, nvlink_links_expected=None):
    """Health problems as messages that name the host, the GPU, the counter, the value and the threshold.

    `health` is `ansible_facts.nvidia.health` (None or unread: no problems, the caller warns).
    """
    if not health or not health.get("read"):
        return []
    t = thresholds_for(thresholds)
    out = []

    def refuse(gpu, counter, value, limit, fix):
        out.append("%s: GPU %s (%s) %s is %s, the profile allows %s: %s"
                   % (host, gpu["index"], gpu.get("bus_id"), counter, value, limit, fix))

    reset = "drain the host and reset the GPU (nvidia-smi -r) or reboot, then check again"
    service = "the GPU needs service: take the host out of the fleet and open an RMA"
    for gpu in health.get("gpus", []):
        for counter in ("ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate"):
            limit = t.get(counter + "_max")
            if limit is not None and gpu.get(counter) is not None and gpu[counter] > int(limit):
                refuse(gpu, counter, gpu[counter], "%s at most" % limit,
                       reset if counter.endswith("volatile") else service)
        for counter, fix in (("remapped_rows_pending", reset), ("remapped_rows_failure", service),
                             ("retired_pages_pending", reset)):
            if not t.get(counter) and gpu.get(counter):
                refuse(gpu, counter, "yes", "no", fix)
        active = [r for r in gpu.get("throttle_active") or [] if r in (t.get("throttle_reasons_refused") or [])]
        if active:
            refuse(gpu, "clock event reason", " + ".join(active), "none of %s" % ", ".join(t["throttle_reasons_refused"]),
                   "check cooling and power delivery (nvidia-smi -q -d PERFORMANCE); a power brake is asserted by the "
                   "chassis")
        width, width_max = gpu.get("pcie_width_current"), gpu.get("pcie_width_max")
        if not t.get("pcie_width_below_max") and width and width_max and width < width_max:
            refuse(gpu, "PCIe link width", "x%d" % width, "x%d (its maximum)" % width_max,
                   "reseat the GPU or riser and check the slot (nvidia-smi -q -d PCIE)")
        gen, gen_max = gpu.get("pcie_gen_current"), gpu.get("pcie_gen_max")
        if not t.get("pcie_gen_below_max") and gen and gen_max and gen < gen_max:
            refuse(gpu, "PCIe generation", gen, "%d (its maximum)" % gen_max,
                   "check the slot and BIOS link speed (an idle GPU may lower it: measure under load)")
        inactive = gpu.get("nvlink_inactive")
        limit = t.get("nvlink_inactive_max")
        if limit is not None and inactive is not None and len(inactive) > int(limit):
            refuse(gpu, "inactive NVLink links", "%d (links %s)" % (len(inactive), ", ".join(str(i) for i in inactive)),
                   limit, "check the NVLink/NVSwitch fabric (nvidia-smi nvlink -s, nvidia-fabricmanager's log)")
        links = gpu.get("nvlink_links")
        if nvlink_links_expected and links is not None and inactive is not None and links - len(inactive) < int(nvlink_links_expected):
            refuse(gpu, "active NVLink links", links - len(inactive), "%s (the topology's bond)" % nvlink_links_expected,
                   "check the NVLink/NVSwitch fabric (nvidia-smi nvlink -s)")
        if t.get("persistence_mode_required") and gpu.get("persistence_mode") is False:
            refuse(gpu, "persistence mode", "off", "on", "enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)")
    gpus = health.get("gpus", [])
    if t.get("fabric_required") and len(gpus) > 1:
        # a single GPU (a VM slice of an HGX board) has no fabric to wait for; where the driver does
        # not report the state (before 550), an active nvidia-fabricmanager stands in for it
        fabric = health.get("fabric") or {}
        for gpu in gpus:
            state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
            if state is None and fabric.get("manager_active"):
                continue
            if (state or "").lower() != "completed" or (status or "Success") != "Success":
                refuse(gpu, "NVSwitch fabric state", "%s/%s" % (state or "unreported", status or "-"), "Completed/Success",
                       "start nvidia-fabricmanager (installed: %s, active: %s) and wait for the fabric to complete; "
                       "CUDA does not initialise on an NVSwitch system before it does"
                       % (_word(fabric.get("manager_installed")), _word(fabric.get("manager_active"))))
    return out


def dcgm_failures(doc):
    """Failed tests of `dcgmi diag -r N -j` output (parsed JSON), as "category / test: detail" lines.

    The JSON layout changed between DCGM releases (top key "DCGM GPU Diagnostic" or "DCGM
    Diagnostic", results per GPU or per entity), so this walks it: every result whose status is
    Fail counts, with the nearest test and category names and the result's warning or info text.
    """
    out = []

    def text(result):
        for key in ("warnings", "warning", "info"):
            value = result.get(key)
            if isinstance(value, list):
                value = "; ".join(str(v.get("warning", v) if isinstance(v, dict) else v) for v in value)
            if value:
                return str(value)
        return ""

    def walk(node, category=None, test=None):
        if isinstance(node, dict):
            category = node.get("category", category)
            test = node.get("name", test) if "results" in node or "status" not in node else test
            status = node.get("status")
            if isinstance(status, str) and status.lower() == "fail":
                gpu = node.get("gpu_id", node.get("entity_id"))
                out.append("%s / %s%s: %s" % (category or "?", test or "?", (" GPU %s" % gpu) if gpu is not None else "",
                                              text(node) or "failed"))
            for value in node.values():
                walk(value, category, test)
        elif isinstance(node, list):
            for value in node:
                walk(value, category, test)

    walk(doc)
    return out
