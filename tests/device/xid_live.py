"""Live: the XID reader (plugins/module_utils/xid.py) on a real GPU host, the lent H100/H200.

Reads this host's kernel log as nvidia_facts does (journalctl -k -b, else dmesg; capped, with a deadline),
parses it, keys the events to the GPUs nvidia-smi lists, and judges them with the default profile's health
policy. Writes $OUT/xid-live.json: what was read (source, bytes, or why not), every NVRM line of the log
(the driver's own lines, which must parse as no XID unless they are one), the events, the unparsed count and
the verdict. Exit 0 when the run completed (the host may have no XIDs, or a log root cannot read).
    OUT=/some/dir python3 tests/device/xid_live.py
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.ddtree.fleet.plugins.module_utils import xid  # noqa: E402 pylint: disable=wrong-import-position


def main():
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id,name", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False).stdout
    except OSError:
        q = ""  # no GPU here: the log is read all the same
    gpus = [dict(zip(("index", "pci_bus_id", "name"), [x.strip() for x in line.split(",")]))
            for line in q.splitlines() if line.strip()]
    journalctl, dmesg = shutil.which("journalctl"), shutil.which("dmesg")
    raw = xid.read_kernel_log(journalctl, dmesg)
    log = xid.gather(journalctl, dmesg, gpus)
    try:
        import yaml
        with open(os.path.join(ROOT, "profiles", "_defaults.yml")) as f:
            health = (yaml.safe_load(f) or {}).get("health") or {}
        verdict = xid.verdict("device", log, health)
    except Exception as e:  # pylint: disable=broad-except
        verdict = {"error": repr(e)}
    nvrm = [line for line in raw["text"].splitlines() if "NVRM" in line or "nvidia" in line.lower()]
    doc = {"gpus": gpus, "journalctl": journalctl, "dmesg": dmesg, "read": log["read"], "source": log["source"],
           "error": log["error"], "bytes": log["bytes"], "truncated": log["truncated"], "driver_lines": len(nvrm),
           "driver_lines_sample": nvrm[:60], "events": log["events"], "unparsed": log["unparsed"],
           "overflow": log["overflow"], "verdict": verdict}
    out = os.environ.get("OUT") or "."
    with open(os.path.join(out, "xid-live.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: doc[k] for k in ("gpus", "read", "source", "error", "bytes", "driver_lines", "unparsed",
                                          "verdict")}, indent=1)[:6000])
    print("events:", len(doc["events"]))


if __name__ == "__main__":
    main()
