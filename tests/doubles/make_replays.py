"""Build the replay sets the fake nvidia-smi serves, from the real captures.

TEST DOUBLE SUPPORT - never used by a production code path.

Each set under tests/doubles/replays/<name>/ holds:
  gpus.json  - per-GPU records keyed by nvidia-smi --query-gpu field names, with the
               provenance of every field ("capture" = read from the named capture file,
               "derived" = computed from the capture, "nominal" = not in any capture: a
               plausible value for that model, stated as such)
  topo-m.txt - a byte-exact copy of a real `nvidia-smi topo -m` capture (if any)
  q.txt      - a byte-exact copy of a real `nvidia-smi -q` capture of the same machine (if any)
  nvlink-s.txt - a byte-exact copy of a real `nvidia-smi nvlink -s` capture of the same machine (if any)
and replays/health/ holds byte-exact copies of the real degraded `-q`/`nvlink -s` captures of
tests/fixtures/nvidia-smi/health/, which the double serves instead of a set's own when told to
(/etc/nvidia-smi-replay/q), so a test can present a degraded GPU.

Run it after changing captures: python3 tests/doubles/make_replays.py
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAPTURES = HERE.parent / "fixtures" / "nvidia-smi"
OUT = HERE / "replays"


def parse_q(text: str) -> tuple[dict, list[dict]]:
    """Minimal reader of `nvidia-smi -q` for the fields the replays need."""
    head = {}
    for key, field in (("Driver Version", "driver_version"), ("CUDA Version", "cuda_version")):
        m = re.search(rf"^{key}\s*:\s*(\S+)", text, re.M)
        if m:
            head[field] = m.group(1)
    gpus = []
    for block in re.split(r"^GPU (?=[0-9A-F]{8}:)", text, flags=re.M)[1:]:
        def grab(pattern: str) -> str:
            m = re.search(pattern, block, re.M)
            return m.group(1).strip() if m else "[N/A]"
        gpus.append({
            "name": grab(r"^\s{4}Product Name\s*:\s*(.+)$"),
            "uuid": grab(r"^\s{4}GPU UUID\s*:\s*(.+)$"),
            "pci.bus_id": block.splitlines()[0].strip(),
            "memory.total": grab(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB"),
            "mig.mode.current": grab(r"MIG Mode\s*\n\s*Current\s*:\s*(.+)$"),
        })
    return head, gpus


def parse_table(text: str) -> list[dict]:
    """Rows of the default `nvidia-smi` table: index, name, bus id, memory total."""
    rows = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\|\s+(\d+)\s+(NVIDIA .+?)\s{2,}\S+\s+\|\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d)", line)
        if m and i + 1 < len(lines):
            mem = re.search(r"/\s*(\d+)MiB", lines[i + 1])
            rows.append({"index": m.group(1), "name": m.group(2), "pci.bus_id": m.group(3),
                         "memory.total": mem.group(1) if mem else "[N/A]"})
    return rows


def parse_list(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^GPU (\d+): .+ \(UUID: (GPU-[0-9a-f-]+)\)", text, re.M)}


def nominal_uuid(tag: str, i: int) -> str:
    h = hashlib.sha256(f"{tag}-{i}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def write(name: str, description: str, head: dict, gpus: list[dict], provenance: dict,
          topo: str | None, q: str | None = None, nvlink: str | None = None) -> None:
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for i, g in enumerate(gpus):
        g.setdefault("index", str(i))
        g.setdefault("driver_version", head["driver_version"])
    doc = {"description": description, "cuda_version": head.get("cuda_version"),
           "provenance": provenance, "gpus": gpus}
    (d / "gpus.json").write_text(json.dumps(doc, indent=1) + "\n")
    for capture, target in ((topo, "topo-m.txt"), (q, "q.txt"), (nvlink, "nvlink-s.txt")):
        if capture:
            shutil.copyfile(CAPTURES / capture, d / target)


def main() -> None:
    # RTX PRO 6000 Blackwell Server Edition x8 (ASUS ESC8000A-E13P): -q and topo from one machine.
    head, gpus = parse_q((CAPTURES / "rtx_pro_6000_blackwell/q__1.txt").read_text())
    for g in gpus:
        g["compute_cap"] = "12.0"
    write("rtx_pro_6000_8x", "8x RTX PRO 6000 Blackwell Server Edition, PCIe only", head, gpus,
          {"rtx_pro_6000_blackwell/q__1.txt": "name, uuid, pci.bus_id, memory.total, mig.mode.current, driver_version, cuda_version",
           "nominal": "compute_cap 12.0 (sm_120; -q of this driver has no compute capability line)"},
          "rtx_pro_6000_blackwell/topo-m__1.txt", q="rtx_pro_6000_blackwell/q__1.txt")

    # B300 SXM6 x8: name/driver/compute_cap from one capture, topology from another machine. No B300
    # `-q` or `nvlink -s` has been published; the health counters come from the nearest real siblings,
    # byte-exact: `-q` from an 8x H100 SXM5 HGX board (the only healthy 8-GPU NVSwitch `-q` found: the
    # same counters, ECC/remap/PCIe/clock-event/fabric layout of a recent driver, Fabric Completed) and
    # `nvlink -s` from the 8x B200 HGX (NVLink 5, 18 links per GPU, as the B300 topology's NV18). The
    # bus ids are the `-q` capture's, so a health message names the GPU the stand-in describes.
    rows = [r.split(", ") for r in (CAPTURES / "b300/query-gpu-csv__1.txt").read_text().splitlines()[1:]]
    driver, name, cc = rows[0]
    stand_in_q = "h100/h100-sxm-8x_q__1.txt"
    q_gpus = parse_q((CAPTURES / stand_in_q).read_text())[1]
    gpus = [{"name": name, "compute_cap": cc, "uuid": nominal_uuid("b300", i),
             "pci.bus_id": q_gpus[i]["pci.bus_id"], "memory.total": "275040",
             "mig.mode.current": "Disabled"} for i in range(8)]
    write("b300_8x", "8x B300 SXM6 AC, NVLink 18 links per pair, 9 NICs; health from sibling HGX captures",
          {"driver_version": driver, "cuda_version": "13.2"},
          gpus, {"b300/query-gpu-csv__1.txt": "name, driver_version, compute_cap (7 rows captured; the 8th repeats them)",
                 stand_in_q: "pci.bus_id; served as -q (STAND-IN: 8x H100 SXM5 HGX, no B300 -q is published)",
                 "b200/nvlink-s__1.txt": "served as nvlink -s (STAND-IN: 8x B200 HGX, NVLink 5 x 18 links like the B300)",
                 "nominal": "uuid, memory.total (288 GB class), mig.mode.current, cuda_version"},
          "b300/topo-m__2.txt", q=stand_in_q, nvlink="b200/nvlink-s__1.txt")

    # B200 x8 (vast.ai HGX): default table + -L + topo from one file.
    table = parse_table((CAPTURES / "b200/nvidia-smi__1.txt").read_text())
    uuids = parse_list((CAPTURES / "b200/list-L__1.txt").read_text())
    text = (CAPTURES / "b200/nvidia-smi__1.txt").read_text()
    drv = re.search(r"Driver Version:\s*(\S+)", text).group(1)
    cuda = re.search(r"CUDA Version:\s*(\S+)", text).group(1)
    gpus = [dict(r, uuid=uuids[r["index"]], compute_cap="10.0", **{"mig.mode.current": "Disabled"}) for r in table]
    write("b200_8x", "8x B200 HGX, NVLink 18 links per pair", {"driver_version": drv, "cuda_version": cuda}, gpus,
          {"b200/nvidia-smi__1.txt": "index, name, pci.bus_id, memory.total, driver_version, cuda_version",
           "b200/list-L__1.txt": "uuid", "nominal": "compute_cap 10.0, mig.mode.current"},
          "b200/topo-m__1.txt", nvlink="b200/nvlink-s__1.txt")

    # H200 x8: query CSV (index, name, memory, driver) + topo from one node record.
    rows = [r.split(", ") for r in (CAPTURES / "other/h200_query-gpu-csv__1.txt").read_text().splitlines()[1:]]
    gpus = [{"index": r[0], "name": r[1], "memory.total": r[2].split()[0], "compute_cap": "9.0",
             "uuid": nominal_uuid("h200", int(r[0])), "pci.bus_id": f"00000000:{0x19 + 0x20 * int(r[0]):02X}:00.0",
             "mig.mode.current": "Disabled"} for r in rows]
    write("h200_8x", "8x H200 SXM, NVLink, 8 NICs", {"driver_version": rows[0][3], "cuda_version": "12.8"}, gpus,
          {"other/h200_query-gpu-csv__1.txt": "index, name, memory.total, driver_version",
           "nominal": "compute_cap 9.0, uuid, pci.bus_id, mig.mode.current, cuda_version (570 branch = CUDA 12.8)"},
          "other/h200_topo-m__1.txt")

    # H200 x1 (the project's own capture, driver 580.159.04).
    line = [l for l in (CAPTURES / "h200-1gpu/query_gpu.csv").read_text().splitlines() if not l.startswith("#")][0]
    f = line.split(", ")
    gpus = [{"index": f[0], "uuid": f[1], "name": f[2], "pci.bus_id": f[3], "memory.total": f[4],
             "compute_cap": f[6], "mig.mode.current": f[10]}]
    write("h200_1x", "1x H200 (live capture)", {"driver_version": f[5], "cuda_version": "13.0"}, gpus,
          {"h200-1gpu/query_gpu.csv": "every field", "h200-1gpu/version.txt": "cuda_version"},
          "h200-1gpu/topo_m.txt", q="h200-1gpu/q.txt")

    health = OUT / "health"
    if health.exists():
        shutil.rmtree(health)
    health.mkdir()
    for capture in sorted((CAPTURES / "health").glob("*.txt")):
        shutil.copyfile(capture, health / capture.name)


if __name__ == "__main__":
    main()
