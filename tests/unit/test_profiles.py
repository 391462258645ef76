"""Profiles are data: every file parses, names its family, uses only keys the defaults define,
and every family a profile exists for is one nvidia_facts can report."""
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.ddtree.fleet.plugins.module_utils import nvidia

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = yaml.safe_load((ROOT / "profiles" / "_defaults.yml").read_text())
FILES = sorted(p for p in (ROOT / "profiles").glob("*.yml") if not p.name.startswith("_"))
REQUIRED = {"b300", "b200", "gb200", "rtx_pro_6000", "h200", "h100"}


def test_required_families_have_profiles():
    assert REQUIRED <= {p.stem for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_profile_shape(path):
    prof = yaml.safe_load(path.read_text())
    assert prof["name"] == path.stem
    assert path.stem in nvidia.FAMILY_NAMES
    unknown = set(prof) - set(DEFAULTS)
    assert not unknown, "keys not in _defaults.yml (typo?): %s" % unknown
    for key in ("parallelism", "cuda_graph"):
        assert not set(prof.get(key, {})) - set(DEFAULTS[key]), key
    assert set(prof.get("speculative", {})) <= set(DEFAULTS["speculative"]) | {"ddtree_attention_backend", "ddtree_page_size"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_value_names_its_evidence(path):
    """Each value of a family profile (top level and nested, not name/description or workaround
    entries, which carry their own 'why') names its evidence, on its line or in the comment lines
    right above it (docs/profiles.md lists the tags)."""
    lines = path.read_text().splitlines()
    tag = re.compile(r"\[(wheel|issue|doc|community|report|unverified)\b")
    in_workarounds = False
    for i, line in enumerate(lines):
        if not line.startswith(" "):
            in_workarounds = line.startswith("workarounds:")
        m = re.match(r"^\s*([A-Za-z_]+):\s*(\S.*)?$", line)
        if not m or in_workarounds or line.lstrip().startswith("#") or m.group(1) in ("name", "description"):
            continue
        if not (m.group(2) or "").split("#")[0].strip():
            continue  # a mapping key; its entries carry the evidence
        above = line
        j = i - 1
        while j >= 0 and lines[j].lstrip().startswith("#"):
            above += "\n" + lines[j]
            j -= 1
        assert tag.search(above), "%s: %s has no evidence tag" % (path.name, line)
