"""The shipped SGLang 0.5.23 series, loaded the way the role loads it (diff text in each patch)."""
from pathlib import Path

import yaml

SERIES_DIR = Path(__file__).resolve().parents[2] / "roles" / "sglang_patch" / "files" / "series" / "0.5.23"


def series():
    doc = yaml.safe_load((SERIES_DIR / "series.yml").read_text())
    for p in doc["patches"]:
        p["diff"] = (SERIES_DIR / p["file"]).read_text()
    return doc
