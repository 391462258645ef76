"""Helpers shared by the unit tests: the shipped SGLang series as the role loads it, a free port."""
import socket
from pathlib import Path

import yaml

SERIES_DIR = Path(__file__).resolve().parents[2] / "roles" / "sglang_patch" / "files" / "series" / "0.5.23"


def series():
    doc = yaml.safe_load((SERIES_DIR / "series.yml").read_text())
    for p in doc["patches"]:
        p["diff"] = (SERIES_DIR / p["file"]).read_text()
    return doc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
