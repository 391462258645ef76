"""XIDs from the kernel log (module_utils/xid.py) on real lines: every row of lines.tsv and every excerpt of
tests/fixtures/kernel-log/ (copied byte for byte from ../shared, SOURCES.md), classified as NVIDIA's
catalogue (catalog.md there) says, keyed to the GPUs of real nvidia-smi captures; hostile input; the readers
(journalctl, dmesg, neither) through the kernel-log replay double; the verdict under a profile's policy."""
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.ddtree.fleet.plugins.filter import gpu, report
from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia_health, xid
from helpers import facts_of, profile, records

ROOT = Path(__file__).resolve().parents[4]
KLOG = ROOT / "tests" / "fixtures" / "kernel-log"
DOUBLE = ROOT / "tests" / "doubles" / "journalctl"
SHARED = ROOT.parent / "shared" / "fixtures" / "kernel-log"
ROWS = [r.split("\t") for r in (KLOG / "lines.tsv").read_text(encoding="utf-8").split("\n")[1:] if r]
DOC = re.compile(r"DOC TEMPLATE")


def catalog_md():
    """The Immediate column of catalog.md's table, per Xid (the fixture, not the collection's table)."""
    out = {}
    for line in (KLOG / "catalog.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 5 and cells[1].isdigit():
            out[int(cells[1])] = {"mnemonic": cells[2], "description": cells[3], "immediate": cells[4]}
    return out


def body(name):
    """An excerpt as a log: its first line is the `# source:` note, not part of the log."""
    text = (KLOG / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def test_fixtures_are_byte_exact_copies_of_shared():
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside this checkout")
    for path in SHARED.iterdir():
        mine = KLOG / ("SOURCES.md" if path.name == "README.md" else path.name)
        assert mine.read_bytes() == path.read_bytes(), path.name


# --- the table against the catalogue ---

# what each immediate bucket of the catalogue means for a host about to serve (docs/gates.md "XIDs")
REFUSED_BUCKETS = {"RESTART_BM", "RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "XID_154"}


def test_the_table_is_the_catalogue():
    md, cat = catalog_md(), xid.catalog()
    assert set(md) <= set(cat["xids"]), "catalogue rows without a table entry: %s" % (set(md) - set(cat["xids"]))
    for number, row in md.items():
        entry = cat["xids"][number]
        assert entry["immediate"] == row["immediate"], number
        assert entry["description"] == row["description"].split(" – ")[0], number
        assert entry["mnemonic"] == row["mnemonic"].split(" / ")[0], number
        action = cat["classes"][entry["class"]]["action"]
        if row["immediate"] in REFUSED_BUCKETS:
            assert action == "refuse", number
        elif row["immediate"] in ("RESTART_APP", "IGNORE", "CONTACT_SUPPORT", "WORKFLOW_XID_45") and number != 94:
            assert action in ("warn", "ignore"), number
    # the XIDs the issue names: refused by default
    for number in (79, 48, 94, 95, 63 + 1, 74, 119, 120):
        assert cat["classes"][cat["xids"][number]["class"]]["action"] == "refuse", number
    for number in (13, 31, 43):
        assert cat["classes"][cat["xids"][number]["class"]]["action"] in ("warn", "ignore"), number
    assert cat["classes"]["informational"]["action"] == "ignore" and cat["xids"][63]["class"] == "informational"


# --- every real line ---

@pytest.mark.parametrize("row", ROWS, ids=["%d-%s" % (i, r[0]) for i, r in enumerate(ROWS)])
def test_every_real_line(row):
    label, source, _gpu, line = row
    parsed = xid.parse(line)
    events = parsed["events"]
    if label.isdigit() and DOC.search(source):
        # NVIDIA's page templates ("XID 48 An uncorrectable ...") are not log lines: counted, never dropped
        assert events == [] and parsed["unparsed"]["count"] == 1 and parsed["unparsed"]["samples"] == [line]
        return
    if label.isdigit():
        assert len(events) == 1, line
        e = events[0]
        assert (e["kind"], e["xid"], e["lines"], e["first"]) == ("xid", int(label), 1, line[:xid.SAMPLE])
        cls, entry = xid.classify(e)
        md = catalog_md().get(int(label))
        if md:
            assert entry["immediate"] == md["immediate"]
        else:  # 14 and 32 have no row in the catalogue notes: reported as unknown, warned about
            assert (cls, entry) == ("unknown", None)
            v = xid.verdict("h", {"read": True, "source": "dmesg", "events": events}, {})
            assert v["refuse"] == [] and len(v["warn"]) == 1 and "not in the catalogue table" in v["warn"][0]
        if "(PCI:...)" in line:
            assert e["pci"] is None and e["pci_raw"] == "PCI:..."
        else:
            assert re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$", e["pci"]), e
    elif label.startswith("SXid-"):
        assert [(e["kind"], e["xid"], e["device"]) for e in events] == [
            ("sxid", int(label[5:]), re.search(r"(nvidia-nvswitch\d+)", line).group(1))]
        assert xid.classify(events[0])[0] == "sxid"
    elif label == "79-nonxid":
        fallen = "fallen off the bus" in line
        assert [(e["xid"], e["pci"]) for e in events] == ([(79, "0000:2b:00")] if fallen else [])
    else:  # the GPU UUID and serial lines before a first Xid
        assert label == "GPU-at" and events == [] and parsed["unparsed"]["count"] == 0


@pytest.mark.parametrize("line,cls", [
    ("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
     "0x00000000 0x00100000 0x00000004)", "nvlink_nonfatal"),
    ("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 "
     "0x00000000 0x00000000)", "nvlink"),
    ("Mar 27 17:40:36 kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
     "(GPU Reset Required)", "reset_required"),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No", "memory"),
])
def test_classes_that_read_the_line(line, cls):
    assert line in [r[3] for r in ROWS]
    assert xid.classify(xid.parse(line)["events"][0])[0] == cls


def test_recovery_action_to_none_is_informational():
    # the format of the real 154 lines, with the action NVIDIA lists first ("None")
    e = xid.parse("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to "
                  "0x0 (None)")["events"][0]
    assert (e["recovery_action"], xid.classify(e)[0]) == ("None", "informational")


# --- excerpts, byte exact ---

EXCERPTS = {
    "excerpt-1.txt": [(48, "0000:07:00", 1), (64, "0000:07:00", 1)],
    "excerpt-2.txt": [(31, "0000:0a:00", 1), (62, "0000:0a:00", 1), (45, "0000:0a:00", 8)],
    "excerpt-4.txt": [(45, "0000:61:00", 6)],
    "excerpt-5.txt": [(119, "0000:61:00", 7)],
    "excerpt-7.txt": [(120, "0000:02:00", 1)],
    "excerpt-9.txt": [(32, "0000:01:00", 1), (69, "0000:01:00", 2), (62, "0000:01:00", 1)],
    # a GPU lost at probe time: no Xid line, the driver's message over three physical lines
    "excerpt-11.txt": [(79, "0000:b3:00", 1)],
    "excerpt-12.txt": [(62, "0000:01:00", 1), (154, "0000:01:00", 1), (45, "0000:01:00", 1)],
}


def test_every_excerpt_is_covered():
    assert sorted(p.name for p in KLOG.glob("excerpt-*.txt")) == sorted(EXCERPTS)


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_excerpts(name):
    parsed = xid.parse(body(name))
    assert [(e["xid"], e["pci"], e["lines"]) for e in parsed["events"]] == EXCERPTS[name]
    assert parsed["unparsed"]["count"] == 0 and parsed["overflow"] == 0


def test_multi_line_message_is_joined():
    parsed = xid.parse(body("excerpt-11.txt"))
    first = parsed["events"][0]["first"]
    assert first.startswith("[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: (PCI ID: 10de:26b5)")
    assert first.endswith("fallen off the bus and is not responding to commands.")
    # alone, the first physical line says nothing about the bus
    assert xid.parse(body("excerpt-11.txt").splitlines()[0])["events"] == []


def test_excerpt_verdict_names_gpu_xid_meaning_action_and_clear():
    # excerpt-1: Xid 48 + 64 at PCI:0000:07:00; the real 8x RTX PRO 6000 capture has a GPU there (index 1)
    nvidia = facts_of("rtx_pro_6000_8x")
    events = xid.key_to_gpus(xid.parse(body("excerpt-1.txt"))["events"], nvidia["gpus"])
    assert [(e["gpu_index"], e["gpu_bus_id"]) for e in events] == [(1, "00000000:07:00.0")] * 2
    nvidia["kernel_log"] = {"read": True, "source": "journalctl", "events": events}
    fails = gpu.gpu_preflight("rtx-1", nvidia, profile("rtx_pro_6000"), checks={"disk": False, "ram": False})
    assert len(fails) == 2
    assert fails[0].startswith(
        "rtx-1: GPU 1 (00000000:07:00.0) Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE: Double Bit ECC Error) in the kernel log "
        "since boot (journalctl, 1 line; last: Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): "
        "48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)")
    assert "NVIDIA's catalogue: immediate action WORKFLOW_XID_48, investigatory WORKFLOW_XID_48; class memory, the " \
           "profile says refuse: drain the host and reset the GPU (nvidia-smi -r) or reboot" in fails[0]
    assert "nvidia_facts_xid_acknowledged: [{xid: 48, pci: '0000:07:00', lines: 1}]" in fails[0]
    assert "Xid 64 (INFOROM_DRAM_RETIREMENT_FAILURE: GPU memory remapping failure)" in fails[1]
    # the report: health FAILED with both, an XIDs entry each
    rows = report.fleet_rows(records({"r": {"ansible_facts": {"nvidia": nvidia}, "nvidia_facts_profile": profile("rtx_pro_6000"),
                                            "group_names": ["fleet"]}}, ["r"]))
    assert rows[0]["health"]["verdict"] == "FAILED" and rows[0]["health"]["problems"][0].startswith("r: GPU 1 ")
    assert [(x["xid"], x["gpu_index"], x["class"], x["action"]) for x in rows[0]["xids"]] == [
        (48, 1, "memory", "refuse"), (64, 1, "memory", "refuse")]


# --- PCI addresses ---

@pytest.mark.parametrize("text,key", [
    ("PCI:0000:3b:00", "0000:3b:00"), ("0000:3b:00", "0000:3b:00"), ("00000000:3B:00.0", "0000:3b:00"),
    ("0000:3b:00.0", "0000:3b:00"), ("PCI:0000:84:00.0", "0000:84:00"), ("00000018:01:00.0", "0018:01:00"),
    ("PCI:0019:01:00", "0019:01:00"), ("3b:00.0", "0000:3b:00"), ("PCI:...", None), ("0009:00", None),
    ("100000000:3b:00.0", None), ("", None), (None, None), ("PCI:0000:3b:00; rm -rf /", None),
])
def test_pci_key(text, key):
    assert xid.pci_key(text) == key


def test_domains_and_mig_are_keyed_to_the_gpu_list():
    gpus = [{"index": 0, "pci_bus_id": "00000018:01:00.0"}, {"index": 1, "pci_bus_id": "00000019:01:00.0"},
            {"index": 2, "pci_bus_id": "00000000:01:00.0"}]
    lines = [r[3] for r in ROWS if r[0] in ("145", "149", "94")]
    events = xid.key_to_gpus(xid.parse("\n".join(lines))["events"], gpus)
    got = [(e["xid"], e["pci"], e["mig"], e["gpu_index"]) for e in events]
    assert (145, "0018:01:00", None, 0) in got and (149, "0019:01:00", None, 1) in got
    assert (94, "0000:01:00", "GPU-I:05", 2) in got  # a MIG instance of GPU 2
    assert (145, None, None, None) in got  # "(PCI:...)": the author anonymised it
    # an SXid names a switch, never a GPU, even at a GPU's address
    sx = xid.key_to_gpus(xid.parse([r[3] for r in ROWS if r[0] == "SXid-12028"][0])["events"],
                         [{"index": 0, "pci_bus_id": "00000000:84:00.0"}])
    assert sx[0]["gpu_index"] is None


def test_real_mig_capture_bus_id_matches_its_xid_form():
    # the real H100 MIG capture's -q names its GPU by nvidia-smi's 8-digit domain
    q = (ROOT / "tests" / "fixtures" / "nvidia-smi" / "mig").glob("h100-mig-1gpu-vm_*q*")
    bus = [g["_bus_id"] for p in q for g in nvidia_health.parse_q(p.read_text())]
    assert bus and all(xid.pci_key(b) for b in bus)
    line = "NVRM: Xid (PCI:%s GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No" % (
        xid.pci_key(bus[0]))
    e = xid.key_to_gpus(xid.parse(line)["events"], [{"index": 0, "pci_bus_id": bus[0]}])[0]
    assert (e["gpu_index"], e["mig"]) == (0, "GPU-I:05")


# --- hostile input ---

def test_hostile_input_is_bounded():
    xid79 = [r[3] for r in ROWS if r[0] == "79"][0]
    cases = [
        xid79 + "A" * (10 * 1024 * 1024),                                # a 10 MiB line
        "\x00\x01\xff\ufffd" * 100000 + "\n" + xid79,                    # binary, then a real line
        "NVRM: Xid (PCI:0000:3b",                                        # truncated
        "NVRM: Xid (PCI:0000:3b:00): ",                                  # truncated after the address
        "NVRM: Xid (" + "(" * 100000 + "): 79",                          # nesting
        xid79 + "\n" + (" continued\n" * 100000),                        # endless continuation
        "NVRM: Xid (PCI:0000:3b:00): 99999999999999999999, x",           # a number too long
    ]
    for text in cases:
        start = time.monotonic()
        parsed = xid.parse(text)
        assert time.monotonic() - start < 10
        for e in parsed["events"]:
            assert len(e["first"]) <= xid.SAMPLE and len(e["last"]) <= xid.SAMPLE
            assert not re.search(r"[\x00-\x08\x0b-\x1f]", e["first"])
        assert all(len(s) <= xid.SAMPLE for s in parsed["unparsed"]["samples"])
    assert [e["xid"] for e in xid.parse(cases[0])["events"]] == [79]
    assert [e["xid"] for e in xid.parse(cases[1])["events"]] == [79]
    assert xid.parse(cases[2]) == {"events": [], "unparsed": {"count": 1, "samples": [cases[2]]}, "overflow": 0}
    assert xid.parse(cases[6])["events"] == [] and xid.parse(cases[6])["unparsed"]["count"] == 1
    assert xid.parse(None)["events"] == [] and xid.parse(b"bytes")["events"] == []


def test_many_distinct_events_are_counted_past_the_cap():
    text = "\n".join("NVRM: Xid (PCI:%04x:%02x:00): 13, x" % (d, b) for d in range(4) for b in range(256))
    parsed = xid.parse(text)
    assert len(parsed["events"]) == xid.MAX_EVENTS and parsed["overflow"] == 4 * 256 - xid.MAX_EVENTS
    v = xid.verdict("h", dict(parsed, read=True, source="dmesg"), {})
    assert any("were counted, not kept" in w for w in v["warn"])


# --- readers, through the kernel-log replay double ---

@pytest.fixture
def double(tmp_path, monkeypatch):
    etc, bins = tmp_path / "etc", tmp_path / "bin"
    etc.mkdir()
    bins.mkdir()
    for name in ("journalctl", "dmesg"):
        (bins / name).symlink_to(DOUBLE)
    (etc / "set").write_text("b200_8x\n")
    monkeypatch.setenv("KERNEL_LOG_REPLAY_ETC", str(etc))
    monkeypatch.setenv("KERNEL_LOG_REPLAY_DATA", str(KLOG))
    monkeypatch.setenv("NVIDIA_SMI_REPLAY_ETC", str(etc))
    monkeypatch.setenv("NVIDIA_SMI_REPLAY_DATA", str(ROOT / "tests" / "doubles" / "replays"))
    return etc, str(bins / "journalctl"), str(bins / "dmesg")


def test_journal_is_read_and_keyed_to_the_gpus(double):
    etc, journalctl, dmesg = double
    (etc / "xid").write_text("79@3\n")
    log = xid.gather(journalctl, dmesg, facts_of("b200_8x")["gpus"])
    assert (log["read"], log["source"], log["error"], log["truncated"]) == (True, "journalctl", None, False)
    assert [(e["xid"], e["gpu_index"], e["gpu_bus_id"]) for e in log["events"]] == [(79, 3, "00000000:63:00.0")]
    # the replayed line is the published one with GPU 3's address in place of the author's
    assert log["events"][0]["first"] == "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:63:00): 79, GPU has fallen off the bus."


def test_clean_boot(double):
    _etc, journalctl, dmesg = double
    log = xid.gather(journalctl, dmesg, facts_of("b200_8x")["gpus"])
    assert (log["read"], log["events"], log["bytes"]) == (True, [], 0)
    assert xid.verdict("h", log, {}) == {"refuse": [], "warn": [], "seen": []}


def test_no_journalctl_falls_back_to_dmesg(double):
    etc, _journalctl, dmesg = double
    (etc / "log").write_text("excerpt-9.txt\n")
    log = xid.gather(None, dmesg, [])
    assert (log["read"], log["source"]) == (True, "dmesg")
    assert [e["xid"] for e in log["events"]] == [32, 69, 62]


def test_journal_without_files_falls_back_to_dmesg(double):
    etc, journalctl, dmesg = double
    (etc / "fault").write_text("no_journal\n")
    (etc / "log").write_text("excerpt-5.txt\n")
    log = xid.read_kernel_log(journalctl, dmesg)
    assert (log["read"], log["source"]) == (True, "dmesg")


def test_an_empty_journal_falls_back_to_dmesg(double, tmp_path):
    # as in a container, or this test machine: journalctl -k -b answers 0 lines while dmesg holds the boot's
    etc, _journalctl, dmesg = double
    empty = tmp_path / "journalctl-empty"
    empty.write_text("#!/bin/sh\nexit 0\n")
    empty.chmod(0o755)
    (etc / "log").write_text("excerpt-9.txt\n")
    log = xid.gather(str(empty), dmesg, [])
    assert (log["read"], log["source"]) == (True, "dmesg") and [e["xid"] for e in log["events"]] == [32, 69, 62]
    (etc / "fault").write_text("unreadable\n")  # and where dmesg is refused too, both reasons are said
    log = xid.gather(str(empty), dmesg, [])
    assert log["read"] is False and log["error"].startswith(
        "journalctl: no kernel messages of this boot (journald keeps none here); dmesg: exit 1")


def test_neither_readable_is_a_warning_that_policy_may_turn_into_a_refusal(double, tmp_path):
    etc, _journalctl, dmesg = double
    (etc / "fault").write_text("unreadable\n")
    log = xid.gather(None, dmesg, [])
    assert log["read"] is False
    assert log["error"] == ("journalctl: not installed; dmesg: exit 1: dmesg: read kernel buffer failed: "
                            "Operation not permitted")
    assert xid.verdict("h", log, {}) == {"refuse": [], "warn": [], "seen": []}  # the module warned
    refused = xid.verdict("h", log, {"kernel_log_unread": "refuse"})["refuse"]
    assert refused and refused[0].startswith("h: the kernel log was not read (journalctl: not installed;")
    assert xid.gather(None, None, [])["error"] == "journalctl: not installed; dmesg: not installed"


def test_reads_are_capped_and_have_a_deadline(tmp_path):
    big = tmp_path / "big"
    big.write_text("#!/bin/sh\nexec yes 'NVRM: Xid (PCI:0000:3b:00): 13, x'\n")
    big.chmod(0o755)
    log = xid.read_kernel_log(str(big), None, timeout=30, max_bytes=1 << 20)
    assert (log["read"], log["truncated"], len(log["text"])) == (True, True, 1 << 20)
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    start = time.monotonic()
    log = xid.read_kernel_log(str(slow), None, timeout=1)
    assert time.monotonic() - start < 10
    assert log["read"] is False and "journalctl: no answer within 1s" in log["error"]


# --- the policy ---

def kernel_log(*numbers, gpus=None):
    lines = [[r[3] for r in ROWS if r[0] == str(n) and not DOC.search(r[1])][0] for n in numbers]
    events = xid.key_to_gpus(xid.parse("\n".join(lines))["events"], gpus or [])
    return {"read": True, "source": "journalctl", "events": events, "unparsed": {"count": 0, "samples": []}}


def nums(messages):
    return sorted(int(re.search(r" Xid (\d+) ", m).group(1)) for m in messages)


def test_default_policy():
    v = xid.verdict("h", kernel_log(79, 13, 63, 74, 119, 120, 94, 64, 48, 32), {})
    assert nums(v["refuse"]) == [48, 64, 74, 79, 94, 119, 120] and nums(v["warn"]) == [13, 32]
    assert [s["xid"] for s in v["seen"] if s["action"] == "ignore"] == [63]


def test_profile_policy_overrides_and_acknowledgements():
    t = nvidia_health.thresholds_for({"xid_policy": {"application": "refuse", "fallen_off_bus": "warn"},
                                      "xid_overrides": {"13": "ignore"}})
    v = xid.verdict("h", kernel_log(79, 13, 31), t)
    assert nums(v["refuse"]) == [31] and nums(v["warn"]) == [79]
    gpus = [{"index": 0, "pci_bus_id": "00000000:2B:00.0"}]
    log = kernel_log(79, gpus=gpus)
    ack = {"xid_acknowledged": [{"xid": 79, "pci": "00000000:2B:00.0", "lines": 1}]}
    assert xid.verdict("h", log, ack)["refuse"] == []
    assert xid.verdict("h", log, ack)["seen"][0]["acknowledged"] == 1
    # one more line than acknowledged: refused again
    log["events"][0]["lines"] = 2
    assert len(xid.verdict("h", log, ack)["refuse"]) == 1
    assert xid.verdict("h", log, {"xid_acknowledged": [{"xid": 79, "pci": "0000:2b:00"}]})["refuse"] == []
    assert len(xid.verdict("h", log, {"xid_acknowledged": [{"xid": 79, "pci": "0000:2c:00"}, "junk", {"xid": "x"}]})["refuse"]) == 1


def test_preflight_warnings_filter_and_switch():
    nvidia = dict(facts_of("b200_8x"), kernel_log=kernel_log(13, 79))
    prof = profile("b200")
    assert len(gpu.gpu_preflight_warnings("h", nvidia, prof)) == 1
    assert gpu.gpu_preflight_warnings("h", nvidia, prof, checks={"health": False}) == []
    fails = gpu.gpu_preflight("h", nvidia, prof, checks={"disk": False, "ram": False, "gpu_memory": False})
    assert [f for f in fails if "Xid 79" in f]
    assert not [f for f in gpu.gpu_preflight("h", nvidia, prof, checks={"health": False}) if "Xid" in f]


def test_profile_defaults_name_only_known_classes():
    health = yaml.safe_load((ROOT / "profiles" / "_defaults.yml").read_text())["health"]
    assert set(health["xid_policy"]) <= set(xid.catalog()["classes"])
    assert health["kernel_log_unread"] in xid.ACTIONS


def test_nvidia_facts_module_reads_it(run_module, tmp_path, monkeypatch):
    # the module end to end on localhost: the replay doubles as nvidia-smi and journalctl
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "set").write_text("rtx_pro_6000_8x\n")
    (etc / "xid").write_text("13@2\n")
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "journalctl").symlink_to(DOUBLE)
    for k, v in (("KERNEL_LOG_REPLAY_ETC", etc), ("KERNEL_LOG_REPLAY_DATA", KLOG), ("NVIDIA_SMI_REPLAY_ETC", etc),
                 ("NVIDIA_SMI_REPLAY_DATA", ROOT / "tests" / "doubles" / "replays")):
        monkeypatch.setenv(k, str(v))
    monkeypatch.setenv("PATH", "%s:%s" % (bins, os.environ["PATH"]))
    r = run_module("nvidia_facts", nvidia_smi_path=str(ROOT / "tests" / "doubles" / "nvidia-smi"), health=False)
    log = r["ansible_facts"]["nvidia"]["kernel_log"]
    assert (log["read"], log["source"]) == (True, "journalctl")
    assert [(e["xid"], e["gpu_index"], e["gpu_bus_id"]) for e in log["events"]] == [(13, 2, "00000000:75:00.0")]
    r = run_module("nvidia_facts", nvidia_smi_path=str(ROOT / "tests" / "doubles" / "nvidia-smi"), health=False,
                   kernel_log=False)
    assert r["ansible_facts"]["nvidia"]["kernel_log"]["read"] is False
