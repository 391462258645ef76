# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU knowledge for ddtree.fleet, in one place: parsing nvidia-smi output, mapping GPUs to
families, reading the NVLink topology. Pure functions over text, so unit tests feed them real
captures; the nvidia_facts module only runs the two commands and calls build_facts()."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.ddtree.fleet.plugins.module_utils.versions import version_tuple

# The one --query-gpu call. Order matters only for parsing; names are nvidia-smi's.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    "mig.mode.current",
)
# Drivers before 510 reject compute_cap; the name table below supplies it then.
QUERY_FIELDS_NO_CC = tuple(f for f in QUERY_FIELDS if f != "compute_cap")

# family, compute capability, product-name pattern. Keyed on compute capability; the name only
# splits models that share one. More specific names first (GH200 before H200, GB200 before B200).
FAMILIES = (
    ("gb300", "10.3", r"\bGB300\b"),
    ("b300", "10.3", r"\bB300\b"),
    ("gb200", "10.0", r"\bGB200\b"),
    ("b200", "10.0", r"\bB200\b"),
    ("gh200", "9.0", r"\bGH200\b"),
    ("h200", "9.0", r"\bH200\b"),
    ("h100", "9.0", r"\bH100\b"),
    ("rtx_pro_6000", "12.0", r"\bRTX PRO 6000\b"),
    ("rtx_5090", "12.0", r"\bRTX 5090\b"),
    ("l40s", "8.9", r"\bL40S\b"),
    ("l4", "8.9", r"\bL4\b"),
    ("rtx_4090", "8.9", r"\bRTX 4090\b"),
    ("a100", "8.0", r"\bA100\b"),
    ("rtx_3090", "8.6", r"\bRTX 3090\b"),
    ("v100", "7.0", r"\bV100\b"),
)
FAMILY_NAMES = tuple(f[0] for f in FAMILIES) + ("unknown", "mixed")

# CUDA version a driver branch supports (what nvidia-smi prints as "CUDA Version"), from
# NVIDIA's CUDA release notes (toolkit vs. minimum driver). Used only when libcuda cannot be
# asked directly (cuDriverGetVersion), e.g. on a host whose driver library is broken.
DRIVER_BRANCH_CUDA = (
    (595, "13.2"),
    (590, "13.1"),
    (580, "13.0"),
    (575, "12.9"),
    (570, "12.8"),
    (565, "12.7"),
    (560, "12.6"),
    (555, "12.5"),
    (550, "12.4"),
    (545, "12.3"),
    (535, "12.2"),
    (530, "12.1"),
    (525, "12.0"),
    (520, "11.8"),
    (515, "11.7"),
    (510, "11.6"),
)

# First CUDA toolkit whose nvcc/ptxas generate code for a compute capability (NVIDIA's CUDA
# features archive: 12.8 added sm_100/sm_101/sm_120, 12.9 sm_103/sm_121; 13.0 renamed sm_101 to
# sm_110). The cuda_toolkit role refuses a toolkit below this for any GPU on the host.
ARCH_MIN_CUDA = {
    "7.0": "9.0",
    "8.0": "11.0",
    "8.6": "11.1",
    "8.9": "11.8",
    "9.0": "11.8",
    "10.0": "12.8",
    "10.3": "12.9",
    "11.0": "13.0",
    "12.0": "12.8",
    "12.1": "12.9",
}


def toolkit_problems(version, compute_caps, driver_cuda, floor=None):
    """Why a CUDA toolkit version cannot serve a host: too old for an arch or the profile's floor,
    or newer than the driver supports. Empty when it can."""
    out = []
    want = version_tuple(version)
    for cc in sorted(set(compute_caps)):
        need = ARCH_MIN_CUDA.get(cc)
        if need is None:
            out.append("compute capability %s is not in the toolkit table (module_utils/nvidia.py ARCH_MIN_CUDA)" % cc)
        elif want < version_tuple(need):
            out.append("CUDA %s cannot compile for sm_%s (needs >= %s)" % (version, cc.replace(".", ""), need))
    if floor and want < version_tuple(floor):
        out.append("CUDA %s is below the profile's cuda_toolkit_min %s" % (version, floor))
    if driver_cuda and want[:2] > version_tuple(driver_cuda)[:2]:
        out.append("CUDA %s is newer than the driver supports (CUDA %s): JIT-compiled kernels would not load" % (version, driver_cuda))
    return out


_ANSI = re.compile(r"(?:\x1b)?\[[0-9;]*m")  # ESC[4m, or "[4m" where the ESC byte was lost
_TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NA = ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported")
_LINK_ALT = r"X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC|N/A"
_LINK = re.compile(r"^(?:%s)$" % _LINK_ALT)
_LINK_PART = re.compile(_LINK_ALT)
_LINKS = re.compile(r"^(?:%s)+$" % _LINK_ALT)  # links glued together
_AFFINITY = re.compile(r"^\d[\d,\-]*$")


class NvidiaSmiError(Exception):
    """nvidia-smi answered, but not with what was asked for."""


def classify_error(output):
    """Turn nvidia-smi's failure text into (kind, message) for facts and error messages."""
    text = (output or "").strip()
    if "Driver/library version mismatch" in text:
        return "driver_mismatch", ("NVIDIA driver/library version mismatch (a driver was upgraded "
                                   "without reloading the kernel module): reboot the host or reload nvidia.ko")
    if "Failed to initialize NVML" in text:
        return "nvml", "NVML failed to initialize: " + text.splitlines()[0]
    if "No devices were found" in text:
        return "no_devices", "the NVIDIA driver sees no GPU (No devices were found)"
    if "couldn't communicate with the NVIDIA driver" in text:
        return "no_driver", "the NVIDIA driver is not loaded: " + text.splitlines()[0]
    m = re.search(r'Field "([^"]+)" is not a valid field to query', text)
    if m:
        return "invalid_field", 'this nvidia-smi does not know the field "%s"' % m.group(1)
    return "other", text.splitlines()[0] if text else "nvidia-smi failed with no output"


def _na(value):
    value = (value or "").strip()
    return None if value in _NA else value


def parse_query(text, fields):
    """Rows of `--query-gpu=FIELDS --format=csv,noheader,nounits` as dicts keyed by field."""
    rows = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise NvidiaSmiError("expected %d comma-separated values, got %d in %r" % (len(fields), len(values), line))
        rows.append(dict(zip(fields, values)))
    return rows


def family_for(name, compute_capability):
    """Family of one GPU; compute capability decides, the name splits models sharing one.
    A capability we know with a name we don't know is 'unknown', never a guess."""
    name = name or ""
    for family, cc, pattern in FAMILIES:
        if re.search(pattern, name, re.I) and (compute_capability is None or compute_capability == cc):
            return family
    return "unknown"


def cc_from_name(name):
    for family, cc, pattern in FAMILIES:
        if re.search(pattern, name or "", re.I):
            return cc
    return None


def cuda_for_driver(driver_version):
    try:
        branch = int(str(driver_version).split(".", maxsplit=1)[0])
    except (TypeError, ValueError):
        return None
    if branch > DRIVER_BRANCH_CUDA[0][0] + 4:
        return None  # newer than this table knows: do not guess
    for first, cuda in DRIVER_BRANCH_CUDA:
        if branch >= first:
            return cuda
    return None


def _header_tokens(line):
    tokens = _ANSI.sub("", line).split()
    out, i = [], 0
    while i < len(tokens):
        for col in _TRAILING_COLUMNS:
            words = col.split()
            if tokens[i:i + len(words)] == words:
                out.append(col)
                i += len(words)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def parse_topo(text):
    """Parse `nvidia-smi topo -m`. Returns {devices, matrix, gpus: {GPUi: {cpu_affinity, numa}},
    nics: [{name, device}], warnings}. A row whose columns lost a separator is split again (NV18SYS,
    SYS0-103) with a warning; a row that still does not fit keeps its readable links and warns,
    instead of dropping the whole matrix. Tolerates ESC codes (or their remains) in the header, tabs or
    spaces, a header without its leading tab, NIC rows without trailing columns, legacy mlx5_N
    columns, and a missing legend. Raises NvidiaSmiError when no matrix is found."""
    lines = [_ANSI.sub("", l).rstrip("\n") for l in (text or "").splitlines()]
    header_at = next((i for i, l in enumerate(lines) if re.match(r"^\s*GPU0\b", l)), None)
    if header_at is None:
        raise NvidiaSmiError("no GPU0 header line in topo -m output")
    header = _header_tokens(lines[header_at])
    devices = [h for h in header if h not in _TRAILING_COLUMNS]
    trailing = [h for h in header if h in _TRAILING_COLUMNS]
    matrix, gpus, warnings = {}, {}, []
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or tokens[0].rstrip(":") in ("Legend", "NIC"):
            break
        label = tokens[0]
        if label not in devices:
            continue
        cells, merged = _unmerge(tokens[1:])
        links = cells[:len(devices)]
        if merged:
            warnings.append("topo -m row %s: %s had no separator between two columns; read as %s"
                            % (label, ", ".join(merged), " ".join(cells)))
        if len(links) != len(devices) or not all(_LINK.match(x) for x in links):
            # keep what can be read: the leading cells that are links, for the devices they stand under
            good = []
            for x in links:
                if not _LINK.match(x):
                    break
                good.append(x)
            warnings.append("topo -m row %s: %d of %d link columns readable (%s); the rest of the row is left out"
                            % (label, len(good), len(devices), " ".join(tokens[1:])))
            matrix[label] = dict(zip(devices, good))
            continue
        matrix[label] = dict(zip(devices, links))
        if label.startswith("GPU"):
            rest = dict(zip(trailing, cells[len(devices):]))
            gpus[label] = {"cpu_affinity": _na(rest.get("CPU Affinity")),
                           "numa": _na(rest.get("NUMA Affinity"))}
    legend = dict(re.findall(r"^\s+(NIC\d+):\s*(\S+)\s*$", "\n".join(lines), re.M))
    nics = [{"name": d, "device": legend.get(d, d)} for d in devices if not d.startswith("GPU")]
    return {"devices": devices, "matrix": matrix, "gpus": gpus, "nics": nics, "warnings": warnings}


def _unmerge(cells):
    """Split cells where nvidia-smi (or a copy of its output) lost the separator between two columns:
    two links (NV18SYS), or the last link and the CPU affinity (SYS0-103, NV1848-95). Where the split
    is ambiguous (NV1848-95: NV18 + 48-95 or NV184 + 8-95) the links the row shows elsewhere win.
    Returns (cells, the merged ones)."""
    known = set(c for c in cells if _LINK.match(c))
    out, merged = [], []
    for c in cells:
        if _LINK.match(c):
            out.append(c)
            continue
        best = None
        for i in range(len(c), 0, -1):
            left, right = c[:i], c[i:]
            if not _LINKS.match(left) or (right and not _AFFINITY.match(right)):
                continue
            parts = _LINK_PART.findall(left)
            score = (all(x in known for x in parts), len(left))
            if best is None or score > best[0]:
                best = (score, parts + ([right] if right else []))
        if best is None:
            out.append(c)
        else:
            out.extend(best[1])
            merged.append(c)
    return out, merged


def _nv_links(link):
    m = re.match(r"^NV(\d+)$", link or "")
    return int(m.group(1)) if m else 0


def links_between(matrix, names):
    """(interconnect, smallest NVLink bond) between the GPUs `names` (GPU0, GPU1, ...) of a topology matrix:
    single, nvlink (every pair), nvlink_partial, pcie, or unknown (a pair not read). Each pair is read in
    both directions; the worse one counts (a degraded link shows either way)."""
    pairs = [((matrix.get(a) or {}).get(b), (matrix.get(b) or {}).get(a)) for i, a in enumerate(names) for b in names[i + 1:]]
    links = [min(_nv_links(ab), _nv_links(ba)) for ab, ba in pairs]
    if len(names) == 1:
        interconnect = "single"
    elif any(n not in matrix for n in names) or any(None in p for p in pairs):
        interconnect = "unknown"
    elif all(links):
        interconnect = "nvlink"
    elif any(links):
        interconnect = "nvlink_partial"
    else:
        interconnect = "pcie"
    return interconnect, (min(links) if links and interconnect != "unknown" else None)


def summarize_topology(topo, gpu_count):
    """interconnect, nvlink_min_links and the GPU-to-GPU matrix from parse_topo()'s result."""
    if topo is None:
        return {"interconnect": "unknown", "nvlink_min_links": None, "matrix": {}, "nics": []}
    names = ["GPU%d" % i for i in range(gpu_count)]
    matrix = {a: {b: topo["matrix"].get(a, {}).get(b) for b in names if b != a} for a in names if a in topo["matrix"]}
    interconnect, min_links = links_between(matrix, names)
    return {
        "interconnect": interconnect,
        "nvlink_min_links": min_links,
        "matrix": matrix,
        # the GPUDirect RDMA NICs: on a PCIe switch with a GPU (PIX, PXB); a frontend or bonded NIC across the
        # CPU (NODE, SYS) is not one (multi-node serving groups take NCCL_IB_HCA from these)
        "nics": [dict(n, near_gpus=[g for g in names if topo["matrix"].get(g, {}).get(n["name"]) in ("PIX", "PXB")])
                 for n in topo["nics"]],
    }


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def build_facts(rows, topo=None, cuda_version=None, cc_from_table=False, warnings=None, errors=None):
    """The public `ansible_facts.nvidia` dictionary from parsed query rows and topology."""
    warnings = list(warnings or [])
    errors = list(errors or [])
    gpus = []
    for row in rows:
        name = row.get("name")
        cc = _na(row.get("compute_cap")) if not cc_from_table else cc_from_name(name)
        if cc_from_table and cc is None:
            warnings.append("GPU %s (%s): compute capability unknown (old driver, name not in the table)" % (row.get("index"), name))
        label = "GPU%s" % row.get("index")
        place = (topo or {}).get("gpus", {}).get(label, {})
        numa = place.get("numa")
        gpus.append({
            "index": _int(row.get("index")),
            "name": name,
            "uuid": _na(row.get("uuid")),
            "pci_bus_id": _na(row.get("pci.bus_id")),
            "memory_total_mib": _int(row.get("memory.total")),
            "compute_capability": cc,
            "sm": "sm_" + cc.replace(".", "") if cc else None,
            "mig_enabled": (row.get("mig.mode.current") or "").strip() == "Enabled",
            "numa_node": _int(numa) if numa and "-" not in numa else None,
            "cpu_affinity": place.get("cpu_affinity"),
            "family": family_for(name, cc),
        })
    models = sorted(set(g["name"] for g in gpus))
    ccs = sorted(set(g["compute_capability"] for g in gpus))
    fams = sorted(set(g["family"] for g in gpus))
    family = fams[0] if len(fams) == 1 else ("mixed" if fams else "unknown")
    if family == "unknown" and gpus:
        warnings.append("GPU model %s (compute capability %s) is not a known family; add it to "
                        "plugins/module_utils/nvidia.py FAMILIES and give it a profile" % (", ".join(models), ", ".join(str(c) for c in ccs)))
    if any(g["mig_enabled"] for g in gpus):
        warnings.append("MIG is enabled on GPU(s) %s: SGLang needs whole GPUs" % ", ".join(str(g["index"]) for g in gpus if g["mig_enabled"]))
    topology = summarize_topology(topo, len(gpus)) if gpus else summarize_topology(None, 0)
    if gpus and topo is None:
        warnings.append("GPU topology not readable: interconnect unknown")
    driver = _na(rows[0].get("driver_version")) if rows else None
    topology["numa_nodes"] = sorted(set(g["numa_node"] for g in gpus if g["numa_node"] is not None))
    return {
        "present": bool(gpus),
        "driver_version": driver,
        "cuda_version": cuda_version,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "homogeneous": len(models) == 1,
        "compute_capability": ccs[0] if len(ccs) == 1 else None,
        "family": family,
        "topology": topology,
        "warnings": warnings,
        "errors": errors,
    }


def absent_facts(errors, warnings=None):
    """Facts of a host without a working NVIDIA driver."""
    facts = build_facts([], None, None, warnings=warnings, errors=errors)
    facts["family"] = "unknown"
    return facts
