# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""XIDs: the NVIDIA driver's GPU error reports in the kernel log, and the verdict against a profile.

On the host (the nvidia_facts module): read the kernel log since boot (journalctl, else dmesg) with a
byte cap and a deadline, parse every `NVRM: Xid (...)` and `nvidia-nvswitchN: SXid (...)` line and the
driver's "GPU ... has fallen off the bus" message, and key each to its GPU by PCI address. The kernel log
is input: lines are capped, bytes decoded with replacement, the number of events kept is bounded, and a
line that mentions an Xid but does not parse is counted and sampled, never dropped silently.

On the controller (the preflight's health check, the fleet report): classify each event with the table in
xid_catalog.yml beside this file (NVIDIA's catalogue facts) and decide refuse / warn / ignore by the
profile's `health:` policy. Tested on real lines: tests/unit/plugins/module_utils/test_xid.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.ddtree.fleet.plugins.module_utils import capped

MAX_BYTES = 32 * 1024 * 1024   # read at most this much of the kernel log
MAX_LINE = 4096                # a kernel record is at most about 1 KiB; longer lines are cut
MAX_JOINED = 8                 # continuation lines joined to one message
MAX_EVENTS = 512               # distinct (kind, xid, device) keys kept; more are counted in `overflow`
MAX_SAMPLES = 5                # unparsed lines sampled
SAMPLE = 400                   # characters of a line kept as a sample
JOURNAL_LINES = 200000         # journalctl -n: the last records of this boot

ACTIONS = ("refuse", "warn", "ignore")

_PCI = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_XID = re.compile(r"\bXid \(([^()]{0,80})\):\s*(\d{1,6})\b(.*)$")
_SXID = re.compile(r"\b(nvidia-nvswitch\d{1,4}): SXid \(([^()]{0,80})\):\s*(\d{1,6})\b(.*)$")
_ATTR = re.compile(r"^(?:PCI:)?(%s)(?:\s+(GPU-I:\d{1,3}(?:\s+GPU-CI:\d{1,3})?))?\s*$" % _PCI)
_FALLEN = re.compile(r"\bGPU (?:at )?(?:PCI:)?(%s)\b.{0,300}?fallen off the bus" % _PCI)
_MENTION = re.compile(r"\bS?Xid\b", re.I)
_SEVERITY = re.compile(r"^[\s,]*(?:\S+\s+)?(Fatal|Nonfatal|Non-fatal)\b")
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x[0-9a-fA-F]+ \(([^)]{1,40})\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def pci_key(text):
    """A PCI address as DDDD:BB:DD (lowercase, 4-digit domain, no function), or None.

    Takes the Xid form (`PCI:0000:3b:00`, old `0000:3b:00`), nvidia-smi's (`00000000:3B:00.0`) and the
    kernel's (`0000:3b:00.0`); a GPU is function 0, so the function is dropped.
    """
    if not isinstance(text, str):
        return None
    m = re.match(r"^(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?$", text.strip())
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    if domain > 0xFFFF:
        return None
    return "%04x:%s:%s" % (domain, m.group(2).lower(), m.group(3).lower())


def _clean(line):
    return _CONTROL.sub("?", line)[:SAMPLE]


def logical_lines(text):
    """Physical lines joined into messages: a line that starts with white space continues the one before
    (dmesg and journalctl indent the rest of a multi-line record). Lines are cut at MAX_LINE."""
    current, joined = None, 0
    for raw in text.splitlines():
        line = raw[:MAX_LINE]
        if current is not None and line[:1] in (" ", "\t") and line.strip() and joined < MAX_JOINED:
            current = (current + " " + line.strip())[:MAX_LINE]
            joined += 1
            continue
        if current is not None:
            yield current
        current, joined = line, 0
    if current is not None:
        yield current


def _fatal(rest):
    m = _SEVERITY.match(rest[:60])
    if not m:
        return None
    return m.group(1) == "Fatal"


def parse_line(line):
    """One message as an event dict, or None. Keys: kind (xid, sxid), xid (int), pci_raw, pci (pci_key),
    mig, device (the nvswitch), fatal (True, False or None where the line does not say), recovery_action."""
    m = _SXID.search(line)
    if m:
        return {"kind": "sxid", "xid": int(m.group(3)), "pci_raw": m.group(2), "pci": pci_key(m.group(2)), "mig": None,
                "device": m.group(1), "fatal": _fatal(m.group(4)), "recovery_action": None}
    m = _XID.search(line)
    if m:
        attr = _ATTR.match(m.group(1))
        rest = m.group(3)
        recovery = _RECOVERY.search(rest)
        return {"kind": "xid", "xid": int(m.group(2)), "pci_raw": m.group(1),
                "pci": pci_key(attr.group(1)) if attr else None, "mig": attr.group(2) if attr else None,
                "device": None, "fatal": _fatal(rest), "recovery_action": recovery.group(1) if recovery else None}
    m = _FALLEN.search(line)
    if m:
        # the driver's own message, with or without an Xid 79 line (a GPU lost at probe time prints none)
        return {"kind": "xid", "xid": 79, "pci_raw": m.group(1), "pci": pci_key(m.group(1)), "mig": None,
                "device": None, "fatal": None, "recovery_action": None}
    return None


def parse(text):
    """The kernel log's XID events: {events: [...], unparsed: {count, samples}, overflow}.

    Events with the same kind, XID, PCI address, MIG instance and device are one entry with the number of
    lines, the first and last line (cut to SAMPLE characters) and whether any line said Fatal.
    """
    events, order = {}, []
    unparsed, samples, overflow = 0, [], 0
    for line in logical_lines(text if isinstance(text, str) else ""):
        event = parse_line(line)
        if event is None:
            if _MENTION.search(line):
                unparsed += 1
                if len(samples) < MAX_SAMPLES:
                    samples.append(_clean(line))
            continue
        key = (event["kind"], event["xid"], event["pci"] or event["pci_raw"], event["mig"], event["device"])
        seen = events.get(key)
        if seen is None:
            if len(order) >= MAX_EVENTS:
                overflow += 1
                continue
            event.update(lines=1, first=_clean(line), last=_clean(line))
            events[key] = event
            order.append(key)
            continue
        seen["lines"] += 1
        seen["last"] = _clean(line)
        if event["fatal"] is not None:
            seen["fatal"] = bool(seen["fatal"]) or event["fatal"]
        if event["recovery_action"]:
            seen["recovery_action"] = event["recovery_action"]
    return {"events": [events[k] for k in order], "unparsed": {"count": unparsed, "samples": samples},
            "overflow": overflow}


def key_to_gpus(events, gpus):
    """Each event with the index and nvidia-smi bus id of the GPU at its PCI address (None where none is)."""
    by_pci = dict((pci_key(g.get("pci_bus_id")), g) for g in gpus or [] if pci_key(g.get("pci_bus_id")))
    for event in events:
        gpu = by_pci.get(event.get("pci")) if event.get("kind") == "xid" else None
        event["gpu_index"] = gpu.get("index") if gpu else None
        event["gpu_bus_id"] = gpu.get("pci_bus_id") if gpu else None
    return events


# --- reading, on the host ---

def read_kernel_log(journalctl, dmesg, timeout=30, max_bytes=MAX_BYTES):
    """The kernel messages of this boot: {read, source, text, error, truncated}.

    journalctl -k -b where it is installed and answers; dmesg (the ring buffer, since boot unless it
    wrapped) otherwise. Neither: read false with both reasons.
    """
    errors = []
    tries = []
    if journalctl:
        tries.append(("journalctl", [journalctl, "-k", "-b", "-o", "short-precise", "--no-pager", "-q",
                                     "-n", str(JOURNAL_LINES)]))
    else:
        errors.append("journalctl: not installed")
    if dmesg:
        tries.append(("dmesg", [dmesg]))
    else:
        errors.append("dmesg: not installed")
    for source, argv in tries:
        try:
            # not run_command: the kernel log is input of unbounded size and journalctl may hang on a broken journal
            r = capped.run(argv, max_bytes, timeout, env=dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", PAGER="cat"))
        except OSError as e:
            errors.append("%s: %s" % (source, e))
            continue
        rc, text, err, truncated = r["rc"], r["out"].decode("utf-8", "replace"), r["err"].strip(), r["over"]
        if r["timed_out"]:
            errors.append("%s: no answer within %ss" % (source, timeout))
        elif source == "journalctl" and rc == 0 and not text.strip():
            # every boot logs kernel messages: an empty answer is a journal that keeps none (a container's own
            # journald, Storage=none), not a clean boot - dmesg still has them
            errors.append("journalctl: no kernel messages of this boot (journald keeps none here)")
        elif truncated or (rc == 0 and "No journal files were found" not in err):
            return {"read": True, "source": source, "text": text, "error": None, "truncated": truncated}
        else:
            errors.append("%s: exit %s%s" % (source, rc, (": " + _clean(err.splitlines()[0])) if err else ""))
    return {"read": False, "source": None, "text": "", "error": "; ".join(errors), "truncated": False}


def gather(journalctl, dmesg, gpus, timeout=30, max_bytes=MAX_BYTES):
    """nvidia.kernel_log: the XID events of this boot keyed to the GPUs."""
    log = read_kernel_log(journalctl, dmesg, timeout, max_bytes)
    parsed = parse(log["text"])
    return {"read": log["read"], "source": log["source"], "error": log["error"], "truncated": log["truncated"],
            "bytes": len(log["text"].encode("utf-8", "replace")) if log["read"] else 0,
            "events": key_to_gpus(parsed["events"], gpus), "unparsed": parsed["unparsed"],
            "overflow": parsed["overflow"]}


def unread(error):
    """nvidia.kernel_log of a host whose kernel log was not read, and why."""
    return {"read": False, "source": None, "error": error, "truncated": False, "bytes": 0, "events": [],
            "unparsed": {"count": 0, "samples": []}, "overflow": 0}


# --- the verdict, on the controller ---

_CATALOG = {}


def catalog():
    """xid_catalog.yml beside this file: {classes: {...}, xids: {int: {...}}} (read once)."""
    if not _CATALOG:
        import yaml  # the controller's; the module side never calls this
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xid_catalog.yml")) as f:
            doc = yaml.safe_load(f)
        _CATALOG.update(classes=doc["classes"], xids=dict((int(k), v) for k, v in doc["xids"].items()))
    return _CATALOG


def classify(event):
    """(class, catalogue entry or None) of one event."""
    cat = catalog()
    if event.get("kind") == "sxid":
        return "sxid", None
    entry = cat["xids"].get(event.get("xid"))
    if entry is None:
        return "unknown", None
    cls = entry["class"]
    if entry.get("nvlink5") and event.get("fatal") is False:
        cls = "nvlink_nonfatal"
    if entry.get("recovery_action") and (event.get("recovery_action") or "").strip().lower() == "none":
        cls = "informational"
    return cls, entry


def _action(policy, overrides, cls, xid):
    for table, key in ((overrides, str(xid)), (overrides, xid), (policy, cls)):
        value = (table or {}).get(key)
        if value in ACTIONS:
            return value
    return catalog()["classes"].get(cls, {}).get("action", "warn")


def actions_by_xid(policy=None, overrides=None):
    """{xid: action} under a profile's policy for every XID of the table and of `overrides` - what the alert rules
    watch for in DCGM's last-XID gauge, where there is no line to read (an XID is taken by its table class)."""
    out = dict((x, _action(policy, overrides, e["class"], x)) for x, e in catalog()["xids"].items())
    for key in overrides or {}:
        try:
            xid = int(key)
        except (TypeError, ValueError):
            continue
        out.setdefault(xid, _action(policy, overrides, "unknown", xid))
    return dict(sorted(out.items()))


def _acknowledged(event, acknowledged):
    """Lines of this event an operator acknowledged (nvidia_facts_xid_acknowledged): an entry {xid, pci,
    lines} covers up to `lines` lines (all when left out) of that XID on that PCI address."""
    for entry in acknowledged or []:
        if not isinstance(entry, dict):
            continue
        try:
            xid = int(entry.get("xid"))
        except (TypeError, ValueError):
            continue
        if xid == event.get("xid") and pci_key(str(entry.get("pci", ""))) == event.get("pci"):
            limit = entry.get("lines")
            return event["lines"] if limit is None else min(int(limit), event["lines"])
    return 0


def _where(event):
    if event.get("kind") == "sxid":
        return "NVSwitch %s (%s)" % (event.get("device"), event.get("pci_raw"))
    mig = (" %s" % event["mig"]) if event.get("mig") else ""
    if event.get("gpu_index") is not None:
        return "GPU %s (%s)%s" % (event["gpu_index"], event.get("gpu_bus_id"), mig)
    return "PCI %s%s (no GPU of nvidia-smi's list there)" % (event.get("pci") or event.get("pci_raw"), mig)


def verdict(host, kernel_log, thresholds):
    """{refuse: [...], warn: [...], seen: [...]} for a host's nvidia.kernel_log under the profile's health:
    policy (xid_policy per class, xid_overrides per XID, xid_acknowledged, kernel_log_unread).

    Each refusal and warning names the host, the GPU (index and bus id), the XID, its meaning, the
    catalogue's action and how to clear it. `seen` is one entry per event for the report: kind, xid, gpu_index,
    pci, mig, device, lines, class, action (the policy's), acknowledged (lines)."""
    t = thresholds or {}
    out = {"refuse": [], "warn": [], "seen": []}
    log = kernel_log or {}
    if not log:
        return out
    if not log.get("read"):
        if t.get("kernel_log_unread", "warn") == "refuse":
            out["refuse"].append("%s: the kernel log was not read (%s), and the profile refuses a host whose XIDs "
                                 "cannot be read (health.kernel_log_unread: refuse): make journalctl -k or dmesg "
                                 "readable to root" % (host, log.get("error")))
        return out
    cat = catalog()
    for event in log.get("events") or []:
        cls, entry = classify(event)
        action = _action(t.get("xid_policy"), t.get("xid_overrides"), cls, event.get("xid"))
        acked = _acknowledged(event, t.get("xid_acknowledged"))
        name = "SXid" if event.get("kind") == "sxid" else "Xid"
        meaning = ("%s: %s" % (entry["mnemonic"], entry["description"]) if entry.get("mnemonic") else entry["description"]) \
            if entry else ("NVSwitch error%s" % ({True: ", Fatal", False: ", Non-fatal"}.get(event.get("fatal"), ""))
                           if cls == "sxid" else "not in the catalogue table")
        out["seen"].append({"kind": event.get("kind"), "xid": event.get("xid"), "gpu_index": event.get("gpu_index"),
                            "pci": event.get("pci") or event.get("pci_raw"), "mig": event.get("mig"),
                            "device": event.get("device"), "lines": event.get("lines", 1), "class": cls,
                            "action": action, "acknowledged": acked})
        if action == "ignore" or acked >= event.get("lines", 1):
            continue
        ack = "{xid: %s, pci: '%s', lines: %d}" % (event.get("xid"), event.get("pci") or event.get("pci_raw"),
                                                   event.get("lines", 1))
        text = ("%s: %s %s %s (%s) in the kernel log since boot (%s, %d line%s; last: %s); NVIDIA's catalogue: "
                "%s; class %s, the profile says %s: %s%s"
                % (host, _where(event), name, event.get("xid"), meaning, log.get("source"), event.get("lines", 1),
                   "" if event.get("lines", 1) == 1 else "s", event.get("last"),
                   ("immediate action %s, investigatory %s" % (entry["immediate"], entry["investigatory"]))
                   if entry else "no action on record",
                   cls, action, cat["classes"].get(cls, {}).get("clear", ""),
                   "; once cleared without a reboot, acknowledge it in host_vars: nvidia_facts_xid_acknowledged: [%s]" % ack
                   if action == "refuse" else ""))
        out[action].append(text)
    if log.get("unparsed", {}).get("count"):
        out["warn"].append("%s: %d kernel log line(s) mention an Xid that could not be read, e.g. %s"
                           % (host, log["unparsed"]["count"], log["unparsed"]["samples"][:1]))
    if log.get("overflow"):
        out["warn"].append("%s: more than %d distinct XID events in the kernel log; %d more were counted, not kept"
                           % (host, MAX_EVENTS, log["overflow"]))
    if log.get("truncated"):
        out["warn"].append("%s: the kernel log was cut at %d bytes; later lines were not read" % (host, MAX_BYTES))
    return out
