"""Helpers shared by the unit tests: the shipped SGLang series as the role loads it, a free port, GPU facts
built from the replayed real captures and a family's merged profile."""
import copy
import json
import socket
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
REPLAYS = ROOT / "tests" / "doubles" / "replays"
SERIES_DIR = ROOT / "roles" / "sglang_patch" / "files" / "series" / "0.5.23"


def series():
    doc = yaml.safe_load((SERIES_DIR / "series.yml").read_text())
    for p in doc["patches"]:
        p["diff"] = (SERIES_DIR / p["file"]).read_text()
    return doc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def facts_of(replay):
    """ansible_facts.nvidia as nvidia_facts builds it from a replay's real captures."""
    from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia
    doc = json.loads((REPLAYS / replay / "gpus.json").read_text())
    topo = nvidia.parse_topo((REPLAYS / replay / "topo-m.txt").read_text())
    return nvidia.build_facts(doc["gpus"], topo, doc["cuda_version"])


def profile(family, **over):
    """profiles/_defaults.yml with profiles/<family>.yml over it (one level deep), then over."""
    base = yaml.safe_load((ROOT / "profiles" / "_defaults.yml").read_text())
    fam = yaml.safe_load((ROOT / "profiles" / (family + ".yml")).read_text())
    merged = copy.deepcopy(base)
    for k, v in fam.items():
        merged[k] = dict(merged.get(k, {}), **v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    merged.update(over)
    return merged


def records(hostvars, hosts=None):
    """The hosts' records (ddtree.fleet.host_records) from hostvars-shaped dicts: a {name: vars} dict with the
    names to take, or a list of vars (each with inventory_hostname)."""
    from ansible_collections.ddtree.fleet.plugins.module_utils import fleet
    if isinstance(hostvars, dict):
        return fleet.records(dict((h, dict(v, inventory_hostname=h)) for h, v in hostvars.items()), hosts)
    return [fleet.record(hv) for hv in hostvars]
