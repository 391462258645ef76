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
import re
import subprocess
import time
from urllib.error import HTTPError
from urllib.parse import quote, urljoin, urlparse

from ansible.module_utils.urls import open_url
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, safe_relpath

REDIRECTS = (301, 302, 303, 307, 308)
_HEX = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "sha1": re.compile(r"^[0-9a-f]{40}$")}


class HubError(Exception):
    pass


def api_url(endpoint, repo_id, revision):
    return "%s/api/models/%s/revision/%s?blobs=true" % (endpoint.rstrip("/"), repo_id, quote(revision, safe=""))


def file_url(endpoint, repo_id, sha, path):
    return "%s/%s/resolve/%s/%s" % (endpoint.rstrip("/"), repo_id, sha, quote(path))


def select(paths, include, exclude):
    return [p for p in paths if (not include or any(fnmatch.fnmatch(p, g) for g in include))
            and not any(fnmatch.fnmatch(p, g) for g in exclude or [])]


def check_manifest(manifest, source):
    """Every file of a manifest (from the API or pinned) before any of it is used: a safe relative
    path, a size, checksums of the right shape, no name twice, no file that is also a directory.
    HubError names the file and the source."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise HubError("%s: not a manifest (no list of files)" % source)
    if not re.match(r"^[0-9A-Za-z._-]{1,128}$", str(manifest.get("revision") or "")):
        raise HubError("%s: the revision %r is not a commit id" % (source, manifest.get("revision")))
    seen = set()
    for e in manifest["files"]:
        name = e.get("path") if isinstance(e, dict) else e
        try:
            safe_relpath(name, "the file name")
        except UnsafePath as err:
            raise HubError("%s lists an unsafe file: %s; nothing was downloaded or published. The hub or mirror "
                           "(model_fetch_endpoint) or the pinned manifest is wrong or hostile: fix or replace it" % (source, err))
        if not isinstance(e.get("size"), int) or isinstance(e.get("size"), bool) or e["size"] < 0:
            raise HubError("%s lists %s with size %r (not a byte count)" % (source, name, e.get("size")))
        for k in ("sha256", "sha1"):
            if e.get(k) is not None and not _HEX[k].match(str(e[k])):
                raise HubError("%s lists %s with %s %r (not a %s digest)" % (source, name, k, e[k], k))
        if not (e.get("sha256") or e.get("sha1")):
            raise HubError("%s lists %s without a checksum (sha256 or git blob sha1): it could not be verified" % (source, name))
        if name in seen:
            raise HubError("%s lists %s twice" % (source, name))
        seen.add(name)
    for name in seen:
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                raise HubError("%s lists %s both as a file and as a directory of %s" % (source, "/".join(parts[:i]), name))
    return manifest


def manifest_from_api(doc, repo_id, include=None, exclude=None, source=None):
    """The API answer -> {repo_id, revision, files: [{path, size, sha256 | None, sha1}]}; every name
    the listing holds is checked (check_manifest), the excluded ones too: a hostile listing fails."""
    source = source or "the hub's listing of %s" % repo_id
    sha = doc.get("sha") if isinstance(doc, dict) else None
    if not sha:
        raise HubError("the hub's answer for %s has no revision sha" % repo_id)
    siblings = doc.get("siblings", [])
    if not isinstance(siblings, list) or not all(isinstance(s, dict) and isinstance(s.get("rfilename"), str) for s in siblings):
        raise HubError("%s: siblings is not a list of files with rfilename" % source)
    for sib in siblings:
        try:
            safe_relpath(sib["rfilename"], "the file name")
        except UnsafePath as err:
            raise HubError("%s lists an unsafe file: %s; nothing was downloaded or published. The hub or mirror "
                           "(model_fetch_endpoint) is wrong or hostile: fix or replace it" % (source, err))
    by = dict((s["rfilename"], s) for s in siblings)
    files = []
    for path in sorted(select(list(by), include, exclude)):
        s = by[path]
        if "size" not in s:
            raise HubError("the hub lists %s without a size: ask for ?blobs=true" % path)
        lfs = s.get("lfs") or {}
        files.append({"path": path, "size": s["size"], "sha256": lfs.get("sha256"), "sha1": s.get("blobId")})
    if not files:
        raise HubError("no file of %s@%s matches include %s / exclude %s" % (repo_id, sha, include, exclude))
    return check_manifest({"repo_id": repo_id, "revision": sha, "files": files}, source)


def origin(url):
    """(scheme, host, port) of a URL: what a credential is scoped to."""
    u = urlparse(url)
    return (u.scheme.lower(), (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme.lower()))


def request(url, endpoint, token=None, method="GET", headers=None, timeout=60, max_hops=10):
    """(status, body, final url) with redirects followed by hand: the token goes only to the
    endpoint's origin (scheme, host, port), never to a host a redirect leads to. (urllib and
    ansible's open_url keep Authorization on a redirect to another host; requests and curl drop it.)"""
    for _hop in range(max_hops):
        h = dict(headers or {})
        if token and origin(url) == origin(endpoint):
            h["Authorization"] = "Bearer %s" % token
        try:
            r = open_url(url, method=method, headers=h, timeout=timeout, validate_certs=True, follow_redirects="none")
            return r.getcode(), r.read(), url
        except HTTPError as e:
            if e.code in REDIRECTS and e.headers.get("Location"):
                url = urljoin(url, e.headers["Location"])
                continue
            try:
                body = e.read()
            except Exception:  # pylint: disable=broad-except
                body = b""
            return e.code, body or str(e.reason).encode(), url
        except Exception as e:  # pylint: disable=broad-except
            return None, str(getattr(e, "reason", e)).encode(), url
    return None, b"more than %d redirects" % max_hops, url


def download_source(url, endpoint, token=None, timeout=60):
    """Where aria2c should download url from, and whether with the token: (url, with_token).
    Redirects are followed by hand while they stay on the endpoint's origin (HEAD, else a one-byte
    GET); at the first hop to another origin that URL is taken, without the token (the hub's LFS
    files redirect to a CDN with a signed URL). Without a token nothing needs resolving."""
    if not token:
        return url, False
    for method, headers in (("HEAD", {}), ("GET", {"Range": "bytes=0-0"})):
        here, code = url, None
        for _hop in range(10):
            try:
                r = open_url(here, method=method, headers={"Authorization": "Bearer %s" % token, **headers},
                             timeout=timeout, validate_certs=True, follow_redirects="none")
                code = r.getcode()
                break
            except HTTPError as e:
                code = e.code
                if e.code in REDIRECTS and e.headers.get("Location"):
                    nxt = urljoin(here, e.headers["Location"])
                    if origin(nxt) != origin(endpoint):
                        return nxt, False
                    here = nxt
                    continue
                break
            except Exception:  # pylint: disable=broad-except
                break
        if code not in (405, 501):  # HEAD refused: try a one-byte GET
            break
    return url, origin(url) == origin(endpoint)


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
    The header only for entries marked `auth` (URIs on the endpoint's origin: aria2c would send
    it to every host a redirect leads to). Holds the token, so it is written 0600 and removed after
    the run (never in argv)."""
    lines = []
    for e in entries:
        lines.append("\t".join(e["uris"]))
        lines.append("  out=%s" % e["path"])
        if e.get("sha256"):
            lines.append("  checksum=sha-256=%s" % e["sha256"])
        if token and e.get("auth"):
            lines.append("  header=Authorization: Bearer %s" % token)
    return "\n".join(lines) + "\n"


def manifest_text(manifest):
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def run_with_progress(argv, tick, interval=1.0):
    """Run argv (output discarded but stderr), calling tick() every interval seconds; (rc, stderr)."""
    with open(os.devnull, "wb") as devnull:
        # not run_command: aria2c runs while progress is printed every second: run_command waits to the end
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE)  # pylint: disable=ansible-bad-function
        while proc.poll() is None:
            tick()
            time.sleep(interval)
        err = proc.stderr.read().decode("utf-8", "replace")
    return proc.returncode, err
