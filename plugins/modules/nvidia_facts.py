#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_facts
short_description: NVIDIA GPU facts - models, compute capability, family, NVLink topology
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi) twice under C(LC_ALL=C) (one C(--query-gpu) call and C(topo -m)) and
    returns C(ansible_facts.nvidia), the collection's description of a GPU host.
  - The driver's CUDA version is read from C(libcuda) (C(cuDriverGetVersion)), with no further
    nvidia-smi call; where the library cannot be loaded it is taken from the driver branch.
  - A driver older than 510 rejects the C(compute_cap) field; the module then queries once more
    without it and takes the compute capability from a table of known models (a warning says so).
  - A failing C(topo -m) keeps the GPU facts and reports the interconnect as C(unknown).
  - With I(health) (the default) it also reads what a health gate needs from one C(nvidia-smi -q)
    call, plus C(nvidia-smi nvlink -s) where the topology shows NVLink. That is ECC uncorrectable counts,
    row remapping and page retirement, PCIe link generation and width against their maximum,
    active clock event (throttle) reasons, persistence mode, the NVSwitch fabric state, and which
    NVLink links are down. Where the NVLink fabric is in play it also says whether
    C(nvidia-fabricmanager) is installed and active. The verdict against the profile's thresholds is
    the C(ddtree.fleet.gpu_preflight) filter's C(health) check.
  - With I(kernel_log) (the default) it also reads the kernel log of this boot (C(journalctl -k -b), else
    C(dmesg)), at most 32 MiB and within I(timeout) seconds, and returns every NVIDIA Xid and NVSwitch SXid
    line (and the driver's "fallen off the bus" message) as events keyed to the GPU by PCI address. What each
    XID means and whether the host is refused is decided on the controller, by the C(health) check against
    the profile's C(health.xid_policy) (plugins/module_utils/xid_catalog.yml has NVIDIA's catalogue facts).
options:
  nvidia_smi_path:
    description: Path of nvidia-smi. By default it is looked up on C(PATH) and the system directories.
    type: path
  required:
    description:
      - Fail when no working NVIDIA driver answers. When false, such a host returns
        C(present=false) with the reason in C(errors).
    type: bool
    default: false
  timeout:
    description: Seconds each nvidia-smi call may take.
    type: int
    default: 30
  health:
    description:
      - Read the GPU health counters (one more nvidia-smi call, two on NVLink hosts). A failure to read
        them is a warning and C(health.read=false), never a failure of the module.
    type: bool
    default: true
  kernel_log:
    description:
      - Read the XIDs of this boot from the kernel log (C(journalctl -k -b), else C(dmesg)). A log that
        cannot be read is a warning and C(kernel_log.read=false), never a failure of the module.
    type: bool
    default: true
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
attributes:
  facts:
    support: full
    description: Returns C(ansible_facts.nvidia).
author:
  - ddtree.fleet developers (@ddtree)
notes:
  - Families are keyed on compute capability; the product name only splits models sharing one
    (H100/H200/GH200, B200/GB200, B300/GB300, RTX PRO 6000/RTX 5090). Unknown models give
    C(family=unknown) and a warning, never a failure.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  ddtree.fleet.nvidia_facts:

- name: Gather GPU facts, fail on hosts without a working driver
  ddtree.fleet.nvidia_facts:
    required: true

- name: Group hosts by GPU family
  ansible.builtin.group_by:
    key: "gpu_{{ ansible_facts.nvidia.family }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(nvidia).
  returned: always
  type: complex
  contains:
    nvidia:
      description: The GPU host.
      returned: always
      type: complex
      contains:
        present:
          description: Whether a working driver reported at least one GPU.
          type: bool
          sample: true
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "580.159.04"
        cuda_version:
          description: Highest CUDA version the driver supports (not the toolkit's). Null when unknown.
          type: str
          sample: "13.0"
        cuda_version_source:
          description:
            - Where cuda_version came from, C(libcuda) or C(driver_branch); C(unknown branch) when the driver's branch
              is newer than the table and libcuda could not be loaded (no warning, the report says so); null without a driver.
          type: str
          sample: libcuda
        gpu_count:
          description: Number of GPUs.
          type: int
          sample: 8
        gpus:
          description: One entry per GPU, ordered by index.
          type: list
          elements: dict
          contains:
            index: {description: nvidia-smi index., type: int}
            name: {description: Product name., type: str, sample: NVIDIA H200}
            uuid: {description: GPU UUID., type: str}
            pci_bus_id: {description: PCI bus id., type: str, sample: "00000000:18:00.0"}
            memory_total_mib: {description: Framebuffer memory in MiB., type: int, sample: 143771}
            compute_capability: {description: Compute capability., type: str, sample: "10.3"}
            sm: {description: CUDA arch name., type: str, sample: sm_103}
            mig_enabled: {description: MIG mode is on., type: bool}
            numa_node: {description: NUMA node of the GPU (null when not reported)., type: int}
            cpu_affinity: {description: "CPUs close to the GPU, as nvidia-smi prints them.", type: str, sample: "0-63,128-191"}
            family: {description: This GPU's family., type: str}
        homogeneous:
          description: All GPUs are the same model.
          type: bool
        compute_capability:
          description: The compute capability all GPUs share; null when they differ.
          type: str
          sample: "9.0"
        family:
          description: >-
            One of b300 gb300 b200 gb200 h200 h100 gh200 a100 l40s l4 rtx_pro_6000 rtx_5090
            rtx_4090 rtx_3090 v100 unknown mixed.
          type: str
          sample: b300
        topology:
          description: How the GPUs are connected.
          type: complex
          contains:
            interconnect:
              description: >-
                nvlink (every GPU pair NV#), nvlink_partial (some pairs), pcie (none),
                single (one GPU), unknown (topology not readable).
              type: str
            nvlink_min_links:
              description: Smallest NV# over GPU pairs (0 where a pair has no NVLink); null for one GPU or unknown.
              type: int
              sample: 18
            matrix:
              description: GPUi to GPUj to link (X, NV18, PIX, PXB, PHB, NODE, SYS).
              type: dict
            numa_nodes:
              description: Sorted distinct NUMA nodes of the GPUs.
              type: list
              elements: int
            nics:
              description:
                - NICs in the topology, with their device names from the NIC legend (C(name), C(device)) and, in
                  C(near_gpus), the GPUs on a PCIe switch with them (PIX or PXB), the GPUDirect RDMA NICs a serving group's
                  NCCL uses.
              type: list
              elements: dict
        health:
          description: What a health gate needs, per GPU (null where the driver does not report a counter).
          type: complex
          contains:
            read: {description: The counters were read (false when I(health=false) or C(-q) failed)., type: bool}
            sources: {description: "The nvidia-smi calls they came from (C(-q), C(nvlink -s)).", type: list, elements: str}
            error: {description: Why they were not read., type: str}
            gpus:
              description: One entry per GPU, in index order.
              type: list
              elements: dict
              contains:
                index: {description: nvidia-smi index., type: int}
                bus_id: {description: PCI bus id from C(-q)., type: str}
                persistence_mode: {description: Persistence mode is on., type: bool}
                ecc_mode: {description: Current ECC mode., type: str, sample: Enabled}
                ecc_uncorrectable_volatile: {description: Uncorrectable ECC errors since the driver loaded (SRAM + DRAM)., type: int}
                ecc_uncorrectable_aggregate: {description: Uncorrectable ECC errors over the GPU's life., type: int}
                retired_pages_dbe: {description: Pages retired for double-bit errors (before Ampere)., type: int}
                retired_pages_pending: {description: A page retirement waits for a reset., type: bool}
                remapped_rows_uncorrectable: {description: Rows remapped for uncorrectable errors (Ampere and later)., type: int}
                remapped_rows_pending: {description: A row remap waits for a GPU reset., type: bool}
                remapped_rows_failure: {description: A row remap failed (the GPU needs service)., type: bool}
                pcie_gen_current: {description: PCIe link generation now (idle GPUs lower it)., type: int}
                pcie_gen_max: {description: Highest PCIe generation of GPU and host., type: int}
                pcie_width_current: {description: PCIe link width now., type: int}
                pcie_width_max: {description: Widest PCIe link of GPU and host., type: int}
                throttle_active: {description: Active clock event (throttle) reasons., type: list, elements: str}
                fabric_state: {description: "NVSwitch fabric state (C(Completed) when ready); null where not applicable.", type: str}
                fabric_status: {description: NVSwitch fabric status (C(Success))., type: str}
                nvlink_links: {description: NVLink links C(nvlink -s) lists; null where it was not run., type: int}
                nvlink_inactive: {description: Ids of the links that are down., type: list, elements: int}
            fabric:
              description: The NVSwitch fabric manager, where the GPUs report a fabric or NVLink.
              type: dict
              contains:
                manager_installed: {description: The nvidia-fabricmanager unit exists; null when not looked for., type: bool}
                manager_active: {description: The unit is active; null when not looked for., type: bool}
        kernel_log:
          description: The XID events of this boot from the kernel log.
          type: complex
          contains:
            read: {description: The kernel log was read (false when I(kernel_log=false) or neither reader answered)., type: bool}
            source: {description: "Where it was read: C(journalctl) or C(dmesg).", type: str}
            error: {description: Why it was not read., type: str}
            truncated: {description: The log was longer than 32 MiB and cut there., type: bool}
            bytes: {description: Bytes read., type: int}
            events:
              description: One entry per XID (or SXid) and PCI address (and MIG instance), in order of first appearance.
              type: list
              elements: dict
              contains:
                kind: {description: "C(xid) (a GPU) or C(sxid) (an NVSwitch).", type: str}
                xid: {description: The XID or SXid number., type: int, sample: 79}
                pci: {description: "PCI address as C(DDDD:BB:DD), null where the line has none that parses.", type: str}
                pci_raw: {description: The device field as the line prints it., type: str, sample: "PCI:0000:3b:00"}
                mig: {description: "MIG instance (C(GPU-I:05), C(GPU-I:05 GPU-CI:01)), null without MIG.", type: str}
                device: {description: The NVSwitch (C(nvidia-nvswitch3)) of an SXid., type: str}
                fatal: {description: "The line says Fatal (true) or Nonfatal (false); null where it does not say.", type: bool}
                recovery_action: {description: "Xid 154: the recovery action it changed to.", type: str}
                lines: {description: Kernel log lines of this event., type: int}
                first: {description: The first line (at most 400 characters)., type: str}
                last: {description: The last line (at most 400 characters)., type: str}
                gpu_index: {description: Index of the GPU at that PCI address; null where nvidia-smi lists none there., type: int}
                gpu_bus_id: {description: That GPU's bus id as nvidia-smi prints it., type: str}
            unparsed:
              description: "Lines that mention an Xid but do not parse: C(count), and up to 5 C(samples)."
              type: dict
            overflow: {description: Events past the first 512 distinct ones (counted only)., type: int}
        nvidia_smi_calls:
          description: >-
            How many times nvidia-smi was run: 2 without I(health), 3 with it, 4 on NVLink hosts (one more on
            drivers before 510).
          type: int
        warnings:
          description: Things that did not stop fact gathering but deserve a look.
          type: list
          elements: str
        errors:
          description: Why the GPU facts are missing or partial.
          type: list
          elements: str
"""

import ctypes
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health
from ansible_collections.ddtree.fleet.plugins.module_utils import xid


class NvidiaSmi:
    """Runs nvidia-smi with a C locale and a timeout; counts calls."""

    def __init__(self, path, timeout):
        self.path = path
        self.timeout = timeout
        self.calls = 0

    def run(self, *args):
        self.calls += 1
        env = dict(os.environ, LC_ALL="C", LANG="C")
        try:
            # not run_command: nvidia-smi with a timeout (a hung GPU must not hang the play): run_command has none
            p = subprocess.run([self.path] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # pylint: disable=ansible-bad-function
                               env=env, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, "nvidia-smi %s timed out after %ss" % (" ".join(args), self.timeout)
        except OSError as e:
            return 127, "cannot run %s: %s" % (self.path, e)
        return p.returncode, p.stdout.decode("utf-8", "replace")

    def query(self, fields):
        return self.run("--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits")


def libcuda_version():
    """The driver's CUDA version from cuDriverGetVersion (needs no cuInit and no GPU access)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
        return "%d.%d" % (version.value // 1000, (version.value % 1000) // 10)
    except (OSError, AttributeError):
        return None


def gather(smi):
    """Everything the module returns, from at most two calls (three on pre-510 drivers)."""
    warnings = []
    rc, out = smi.query(nvidia.QUERY_FIELDS)
    fields, cc_from_table = nvidia.QUERY_FIELDS, False
    if rc != 0 and nvidia.classify_error(out)[0] == "invalid_field" and "compute_cap" in out:
        warnings.append("this driver does not report compute_cap; it was taken from the model name")
        fields, cc_from_table = nvidia.QUERY_FIELDS_NO_CC, True
        rc, out = smi.query(fields)
    if rc != 0:
        return None, nvidia.classify_error(out)[1]
    try:
        rows = nvidia.parse_query(out, fields)
    except nvidia.NvidiaSmiError as e:
        return None, "cannot read nvidia-smi --query-gpu output: %s" % e
    if not rows:
        return None, nvidia.classify_error("No devices were found")[1]

    topo = None
    trc, tout = smi.run("topo", "-m")
    if trc == 0:
        try:
            topo = nvidia.parse_topo(tout)
            warnings.extend(topo.get("warnings", []))
        except nvidia.NvidiaSmiError as e:
            warnings.append("cannot read nvidia-smi topo -m: %s" % e)
    else:
        warnings.append("nvidia-smi topo -m failed: %s" % nvidia.classify_error(tout)[1])

    cuda, source = libcuda_version(), "libcuda"
    if cuda is None:
        cuda, source = nvidia.cuda_for_driver(rows[0].get("driver_version")), "driver_branch"
    facts = nvidia.build_facts(rows, topo, cuda, cc_from_table=cc_from_table, warnings=warnings)
    # a driver branch newer than the table (and no loadable libcuda) is a fact, not a problem: said in the
    # source, so the report shows it, without a warning on every run
    facts["cuda_version_source"] = source if cuda else ("unknown branch" if facts.get("driver_version") else None)
    return facts, None


FABRIC_MANAGER_UNITS = ("/etc/systemd/system/nvidia-fabricmanager.service",
                        "/lib/systemd/system/nvidia-fabricmanager.service",
                        "/usr/lib/systemd/system/nvidia-fabricmanager.service")


def fabric_manager(systemctl):
    """Whether nvidia-fabricmanager is installed and active (one systemctl call where installed)."""
    installed = any(os.path.exists(p) for p in FABRIC_MANAGER_UNITS)
    active = None
    if installed and systemctl:
        p = subprocess.run([systemctl, "is-active", "--quiet", "nvidia-fabricmanager.service"], check=False,  # pylint: disable=ansible-bad-function
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        active = p.returncode == 0
    return {"manager_installed": installed, "manager_active": active if installed else False}


def gather_health(smi, facts, systemctl=None):
    """nvidia.health: one `-q` call, plus `nvlink -s` where the topology shows NVLink."""
    rc, out = smi.run("-q")
    if rc != 0:
        return nvidia_health.unread("nvidia-smi -q failed: %s" % nvidia.classify_error(out)[1])
    sources = ["-q"]
    nvlink_text = None
    if facts["topology"]["interconnect"] in ("nvlink", "nvlink_partial"):
        lrc, lout = smi.run("nvlink", "-s")
        if lrc == 0:
            nvlink_text = lout
            sources.append("nvlink -s")
        else:
            facts["warnings"].append("nvidia-smi nvlink -s failed: %s" % nvidia.classify_error(lout)[1])
    gpus = nvidia_health.host_health(out, nvlink_text)
    if len(gpus) != facts["gpu_count"]:
        return nvidia_health.unread("nvidia-smi -q listed %d GPU(s), --query-gpu %d" % (len(gpus), facts["gpu_count"]),
                                    sources)
    for index, gpu in enumerate(gpus):
        gpu["index"] = facts["gpus"][index]["index"]
    fabric = {}
    if nvlink_text or any(g["fabric_state"] for g in gpus):
        fabric = fabric_manager(systemctl)
    return {"read": True, "sources": sources, "error": None, "gpus": gpus, "fabric": fabric}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="path"),
            required=dict(type="bool", default=False),
            timeout=dict(type="int", default=30),
            health=dict(type="bool", default=True),
            kernel_log=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    calls = 0
    if not path or not os.access(path, os.X_OK):
        facts, error = None, "nvidia-smi not found (%s): install the NVIDIA driver" % (path or "not on PATH")
    else:
        smi = NvidiaSmi(path, module.params["timeout"])
        facts, error = gather(smi)
        if facts is not None:
            if module.params["health"]:
                facts["health"] = gather_health(smi, facts, module.get_bin_path("systemctl"))
                if facts["health"]["error"]:
                    facts["warnings"].append("GPU health not read: %s" % facts["health"]["error"])
            else:
                facts["health"] = nvidia_health.unread("not asked (health=false)")
            if module.params["kernel_log"]:
                facts["kernel_log"] = xid.gather(module.get_bin_path("journalctl"), module.get_bin_path("dmesg"),
                                                 facts["gpus"], timeout=module.params["timeout"])
                if not facts["kernel_log"]["read"]:
                    facts["warnings"].append("kernel log not read, XIDs unknown: %s" % facts["kernel_log"]["error"])
            else:
                facts["kernel_log"] = xid.unread("not asked (kernel_log=false)")
        calls = smi.calls
    if facts is None:
        if module.params["required"]:
            module.fail_json(msg="%s: no usable NVIDIA GPU: %s" % (os.uname()[1], error))
        facts = nvidia.absent_facts([error])
        facts["cuda_version_source"] = None
        facts["health"] = nvidia_health.unread(error)
        facts["kernel_log"] = xid.unread(error)
    facts["nvidia_smi_calls"] = calls
    for warning in facts["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"nvidia": facts})


if __name__ == "__main__":
    main()
