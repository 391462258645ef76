# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hugging Face Hub file lists and checks: the API's LFS sha256 (weights) and git blob sha1
(small files) - not ETags - are what a downloaded file must hash to."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import subprocess
import time

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2
    from urllib import quote  # type: ignore


class HubError(Exception):
    pass


def api_url(endpoint, repo_id, revision):
    return "%s/api/models/%s/revision/%s?blobs=true" % (endpoint.rstrip("/"), repo_id, quote(revision, safe=""))


def file_url(endpoint, repo_id, sha, path):
    return "%s/%s/resolve/%s/%s" % (endpoint.rstrip("/"), repo_id, sha, quote(path))


def select(paths, include, exclude):
    return [p for p in paths if (not include or any(fnmatch.fnmatch(p, g) for g in include))
            and not any(fnmatch.fnmatch(p, g) for g in exclude or [])]


def manifest_from_api(doc, repo_id, include=None, exclude=None):
    """The API answer -> {repo_id, revision, files: [{path, size, sha256 | None, sha1}]}."""
    sha = doc.get("sha")
    if not sha:
        raise HubError("the hub's answer for %s has no revision sha" % repo_id)
    by = dict((s["rfilename"], s) for s in doc.get("siblings", []))
    files = []
    for path in sorted(select(list(by), include, exclude)):
        s = by[path]
        if "size" not in s:
            raise HubError("the hub lists %s without a size: ask for ?blobs=true" % path)
        lfs = s.get("lfs") or {}
        files.append({"path": path, "size": int(s["size"]), "sha256": lfs.get("sha256"), "sha1": s.get("blobId")})
    if not files:
        raise HubError("no file of %s@%s matches include %s / exclude %s" % (repo_id, sha, include, exclude))
    return {"repo_id": repo_id, "revision": sha, "files": files}


def file_ok(path, entry, chunk=8 << 20):
    """(ok, what it hashed to): sha256 for LFS files, git's blob sha1 otherwise."""
    if entry.get("sha256"):
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(b"blob %d\0" % entry["size"])
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    want = entry.get("sha256") or entry.get("sha1")
    return h.hexdigest() == want, h.hexdigest()


def aria2_input(entries, token=None):
    """aria2c --input-file text: each file's URIs (tab-separated), out=, checksum=, header=.
    Holds the token, so it is written 0600 and removed after the run (never in argv)."""
    lines = []
    for e in entries:
        lines.append("\t".join(e["uris"]))
        lines.append("  out=%s" % e["path"])
        if e.get("sha256"):
            lines.append("  checksum=sha-256=%s" % e["sha256"])
        if token:
            lines.append("  header=Authorization: Bearer %s" % token)
    return "\n".join(lines) + "\n"


def manifest_text(manifest):
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def run_with_progress(argv, tick, interval=1.0):
    """Run argv (output discarded but stderr), calling tick() every interval seconds; (rc, stderr)."""
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE)
        while proc.poll() is None:
            tick()
            time.sleep(interval)
        err = proc.stderr.read().decode("utf-8", "replace")
    return proc.returncode, err
