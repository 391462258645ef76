#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Download a Hugging Face model with aria2c, verified against the hub's checksums, published atomically
version_added: "0.1.0"
description:
  - Resolves the file list with sizes and checksums from the hub's API (LFS sha256 for weights,
    git blob sha1 for small files; not ETags), or from a pinned manifest.
  - A published model whose manifest matches is left alone (O(verify=full) re-hashes it).
  - Otherwise checks free space for the bytes still missing, downloads into C(<dest>.partial) with
    aria2c (several connections per file, several files at once, resume, sha-256 check, retries, a
    lowest-speed limit), verifies every file (a mismatch is fetched once more, then fails naming the
    file), writes C(.ddtree-manifest.json) and renames the directory into O(dest). A previous model
    at O(dest) is kept as C(<dest>.previous).
  - An interrupted run leaves C(<dest>.partial); the next run keeps its verified files and resumes
    the partial ones.
  - The directory above O(dest) (and every one above it) must be root's and writable only by root, or the
    task refuses before it writes (root renames and writes there). Peers are sources of bytes only; names
    come from the hub's listing or the pinned manifest, and every file from a peer is checked against its
    checksum.
  - The token reaches aria2c in a 0600 input file, never in argv, and only for URLs on the endpoint's
    origin. A redirect to another host (the hub's CDN) is resolved first and downloaded without it.
    Peers never get it.
  - Every file name of the listing or pinned manifest must be a safe relative path (no C(..), absolute,
    backslash or control characters) that stays inside the staging directory after symbolic links;
    otherwise the run fails before any byte is written.
options:
  repo_id:
    description: Repository on the hub, e.g. C(moonshotai/Kimi-K2.6).
    type: str
    required: true
  revision:
    description: Branch, tag or commit (a commit is recommended; the resolved commit is recorded).
    type: str
    default: main
  endpoint:
    description: The hub, or a mirror with the same API and download paths.
    type: str
    default: https://huggingface.co
  token:
    description: Hub token for gated or private repositories.
    type: str
  dest:
    description: Directory the model is published to.
    type: path
    required: true
  include:
    description: Glob patterns of files to fetch (all when empty).
    type: list
    elements: str
    default: []
  exclude:
    description: Glob patterns of files to leave out.
    type: list
    elements: str
    default: []
  manifest:
    description: A pinned manifest (JSON, as written beside a model) instead of asking the API.
    type: path
  peers:
    description:
      - Base URLs of peers that serve a verified copy of this model (file URL = peer + / + path).
      - Files are fetched from the peers first; what they cannot serve (or serve wrong) comes from the origin.
    type: list
    elements: str
    default: []
  connections:
    description: Connections per file (aria2c -x/-s).
    type: int
    default: 8
  concurrent:
    description: Files downloaded at once (aria2c -j).
    type: int
    default: 4
  max_tries:
    description: Tries per file (aria2c --max-tries).
    type: int
    default: 10
  lowest_speed:
    description:
      - Drop a connection to the origin slower than this (aria2c --lowest-speed-limit, e.g. C(100K)).
      - Peers are not held to it; only a dead peer sends a file to the origin.
    type: str
    default: 100K
  margin_gib:
    description: Free space kept beyond the missing bytes.
    type: float
    default: 5
  verify:
    description: C(quick) trusts a matching manifest and file sizes; C(full) re-hashes a published model.
    type: str
    choices: [quick, full]
    default: quick
  progress_file:
    description:
      - Where to write progress (bytes, total, rate, ETA) while downloading.
      - Reset at the start of a run and marked C(finished) when the module ends, whether it failed or not,
        so a caller following it can stop waiting at once.
    type: path
author:
  - ddtree.fleet developers (@ddtree)
attributes:
  check_mode:
    support: full
    description: Resolves and compares; reports whether a download would happen.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Kimi K2.6 INT4
  ddtree.fleet.model_fetch:
    repo_id: moonshotai/Kimi-K2.6
    revision: 2755962d0c5ad4fdf0a1b6bfa4e1bce1f9e0c2a1
    dest: /opt/ddtree/models/target
    token: "{{ hf_token }}"
"""

RETURN = r"""
needed:
  description: Whether the published model was missing or did not match (a download was or would be needed).
  returned: always
  type: bool
revision:
  description: The commit that was fetched.
  returned: always
  type: str
files:
  description: Number of files.
  returned: always
  type: int
bytes:
  description: Size of the model.
  returned: always
  type: int
downloaded_bytes:
  description: Bytes aria2c fetched in this run.
  returned: always
  type: int
from_peers:
  description: Files that came from the peers (when peers were given).
  returned: when peers were given
  type: list
  elements: str
refetched:
  description: Files that failed verification once and were fetched again.
  returned: always
  type: list
  elements: str
"""

import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import hub
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, inside, nearest_existing, require_tools, write_progress
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import root_only

MANIFEST = ".ddtree-manifest.json"


class Fetch:
    def __init__(self, module):
        self.m, self.p = module, module.params
        self.dest = self.p["dest"].rstrip("/")
        self.staging = self.dest + ".partial"

    def get(self, url, first_byte=False):
        """(status, body): redirects followed by hand, the token only ever sent to the endpoint's origin."""
        code, body, _url = hub.request(url, self.p["endpoint"], self.p["token"],
                                       headers={"Range": "bytes=0-0"} if first_byte else None)
        return code, body

    def resolve(self):
        p = self.p
        if p["manifest"]:
            try:
                with open(p["manifest"]) as f:
                    return hub.check_manifest(json.load(f), "the pinned manifest %s" % p["manifest"])
            except (OSError, ValueError) as e:
                self.m.fail_json(msg="%s: cannot read the pinned manifest %s: %s" % (p["repo_id"], p["manifest"], e))
            except hub.HubError as e:
                self.m.fail_json(msg=str(e))
        code, body = self.get(hub.api_url(p["endpoint"], p["repo_id"], p["revision"]))
        if code in (401, 403):
            self.m.fail_json(msg="%s@%s: the hub answered %s: the token is %s (set model_fetch_token, and accept the "
                                 "repository's terms on the hub)" % (p["repo_id"], p["revision"], code,
                                                                     "invalid or lacks access" if p["token"] else "missing"))
        if code == 404:
            self.m.fail_json(msg="%s@%s: not found on %s (check model_fetch_repo_id and model_fetch_revision)"
                                 % (p["repo_id"], p["revision"], p["endpoint"]))
        if code != 200:
            self.m.fail_json(msg="%s: the hub API at %s answered %s: %s" % (p["repo_id"], p["endpoint"], code, body[:200]))
        try:
            return hub.manifest_from_api(json.loads(body), p["repo_id"], p["include"], p["exclude"],
                                         source="the listing of %s@%s at %s" % (p["repo_id"], p["revision"], p["endpoint"]))
        except (hub.HubError, ValueError) as e:
            self.m.fail_json(msg=str(e))

    @staticmethod
    def read_manifest(d):
        try:
            with open(os.path.join(d, MANIFEST)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def published_ok(self, manifest):
        if self.read_manifest(self.dest) != manifest:
            return False
        for e in manifest["files"]:
            path = os.path.join(self.dest, e["path"])
            if not os.path.isfile(path) or os.path.getsize(path) != e["size"]:
                return False
            if self.p["verify"] == "full" and not hub.file_ok(path, e)[0]:
                return False
        return True

    def done_in_staging(self, manifest):
        """Files already complete and verified in the staging directory (kept across runs)."""
        state = os.path.join(self.staging, ".ddtree-verified.json")
        try:
            with open(state) as f:
                verified = json.load(f)
        except (OSError, ValueError):
            verified = {}
        done = {}
        for e in manifest["files"]:
            path = os.path.join(self.staging, e["path"])
            if os.path.isfile(path) and not os.path.exists(path + ".aria2") and os.path.getsize(path) == e["size"]:
                key = e.get("sha256") or e.get("sha1")
                if verified.get(e["path"]) == key or hub.file_ok(path, e)[0]:
                    done[e["path"]] = key
        atomic_write(state, json.dumps(done))
        return done

    def on_disk(self, entries):
        total = 0
        for e in entries:
            try:
                total += os.path.getsize(os.path.join(self.staging, e["path"]))
            except OSError:
                pass
        return total

    def progress(self, done, total, start, base):
        secs = max(time.time() - start, 1e-6)
        write_progress(self.p["progress_file"], done, total, secs, rate=(done - base) / secs)

    def aria2(self, manifest, entries, from_peers=False):
        """One aria2c run over entries, from the origin or (from_peers) only from the peers; (rc, stderr)."""
        p = self.p
        for e in entries:
            if from_peers:  # peers never get the token
                e["uris"], e["auth"] = ["%s/%s" % (peer.rstrip("/"), e["path"]) for peer in p["peers"]], False
            else:
                url = hub.file_url(p["endpoint"], manifest["repo_id"], manifest["revision"], e["path"])
                src, e["auth"] = hub.download_source(url, p["endpoint"], p["token"])
                e["uris"], e["redirected"] = [src], src != url
        inp = os.path.join(self.staging, ".aria2-input")
        fd = os.open(inp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(hub.aria2_input(entries, p["token"]))
        log = os.path.join(self.staging, ".aria2.log")
        if os.path.exists(log):
            os.unlink(log)  # the checks read below are this run's
        argv = ["aria2c", "--input-file", inp, "--dir", self.staging, "-x", str(p["connections"]), "-s", str(p["connections"]),
                "-k", "1M", "-j", str(p["concurrent"]), "--continue=true", "--auto-file-renaming=false",
                "--allow-overwrite=true", "--file-allocation=none", "--retry-wait=2",
                # peers are the fleet's own hosts: a transfer slowed by a busy seed is still cheaper than the
                # origin, so only a dead peer (aria2c's --timeout) sends a file to the origin
                "--max-tries", str(5 if from_peers else p["max_tries"]),
                "--lowest-speed-limit", "0" if from_peers else p["lowest_speed"], "--max-file-not-found=1", "--remote-time=false",
                "--console-log-level=error", "--summary-interval=0", "--download-result=hide",
                "--log", log, "--log-level=notice", "--uri-selector=adaptive"]
        total = sum(e["size"] for e in manifest["files"])
        base_done = total - sum(e["size"] for e in entries) + self.on_disk(entries)
        start = time.time()
        rc, err = hub.run_with_progress(
            argv, lambda: self.progress(total - sum(e["size"] for e in entries) + self.on_disk(entries), total, start, base_done))
        os.unlink(inp)
        return rc, err

    def checked(self, entries):
        """What this aria2c run's own sha-256 check (checksum= in the input file) said, from its log:
        (files it verified, files whose content did not match). aria2c hashes each file as soon as it
        completes, while the others still download, so these need no second hash here."""
        ok, bad = set(), set()
        try:
            with open(os.path.join(self.staging, ".aria2.log"), errors="replace") as f:
                for line in f:
                    for marker, into in (("Verification finished successfully. file=", ok), ("Checksum error detected. file=", bad)):
                        if marker in line:
                            into.add(os.path.relpath(line.split(marker, 1)[1].strip(), self.staging))
        except OSError:
            pass
        with_sha = {e["path"] for e in entries if e.get("sha256")}
        return ok & with_sha - bad, bad & with_sha

    def verify(self, entries):
        """[(entry, what it hashed to)] for the complete files of entries that do not match; files aria2c
        found corrupt lose their control file, so they count as complete (and wrong), not as unfinished."""
        ok, corrupt = self.checked(entries)
        bad = []
        for e in entries:
            path = os.path.join(self.staging, e["path"])
            if e["path"] in corrupt:
                if os.path.exists(path + ".aria2"):
                    os.unlink(path + ".aria2")
                bad.append((e, "something else (aria2c's sha-256 check failed)"))
            elif e["path"] not in ok and not self.incomplete([e]):
                good, got = hub.file_ok(path, e)
                if not good:
                    bad.append((e, got))
        return bad

    def classify(self, manifest, entries):
        """Why files are missing after a failed run: ask the origin for each (status per file)."""
        out = []
        for e in entries:
            path = os.path.join(self.staging, e["path"])
            if os.path.isfile(path) and not os.path.exists(path + ".aria2") and os.path.getsize(path) != e["size"]:
                out.append("%s: the server sent %d bytes, the listing says %d (wrong size: the mirror is inconsistent)"
                           % (e["path"], os.path.getsize(path), e["size"]))
                continue
            url = hub.file_url(self.p["endpoint"], manifest["repo_id"], manifest["revision"], e["path"])
            code, _body = self.get(url, first_byte=True)
            if code in (401, 403):
                out.append("%s: HTTP %s (the token is %s)" % (e["path"], code, "invalid or lacks access" if self.p["token"] else "missing"))
            elif code == 404:
                out.append("%s: HTTP 404 (not in %s@%s)" % (e["path"], manifest["repo_id"], manifest["revision"]))
            else:
                out.append("%s: incomplete (HTTP %s)" % (e["path"], code))
        return out

    def run(self):
        p = self.p
        manifest = self.resolve()
        total = sum(e["size"] for e in manifest["files"])
        result = dict(changed=False, needed=False, revision=manifest["revision"], files=len(manifest["files"]), bytes=total,
                      downloaded_bytes=0, refetched=[], dest=self.dest)
        if self.published_ok(manifest):
            return result
        result["changed"] = result["needed"] = True
        try:  # root writes the staging copy, renames it and the previous one here: no one else may plant a link
            root_only(os.path.dirname(self.dest), "the models directory")
        except UnsafePath as e:
            self.m.fail_json(msg="%s: %s; nothing was downloaded or published" % (manifest["repo_id"], e), **result)
        if self.m.check_mode:
            return result
        require_tools(self.m, "aria2c")
        os.makedirs(self.staging, exist_ok=True)
        for e in manifest["files"]:  # names were checked; now no link in staging may lead out of it
            try:
                inside(self.staging, e["path"], "the file name")
            except UnsafePath as err:
                self.m.fail_json(msg="%s: %s; nothing was downloaded or published" % (manifest["repo_id"], err), **result)
        done = self.done_in_staging(manifest)
        todo = [dict(e) for e in manifest["files"] if e["path"] not in done]
        missing = sum(e["size"] for e in todo) - self.on_disk(todo)
        st = os.statvfs(nearest_existing(self.staging))
        free = st.f_bavail * st.f_frsize
        need = missing + int(p["margin_gib"] * 2 ** 30)
        if free < need:
            msg = "%s needs %.1f GiB more (%.1f GiB missing + %.1f GiB margin) but %s has %.1f GiB free: free space or lower " \
                  "model_fetch_margin_gib" % (manifest["repo_id"], need / 2 ** 30, missing / 2 ** 30, p["margin_gib"],
                                              self.staging, free / 2 ** 30)
            self.m.fail_json(msg=msg, **result)
        before = self.on_disk(todo)
        start = time.time()
        if p["peers"] and todo:
            # peers first; what they cannot serve (or serve wrong) comes from the origin below
            self.aria2(manifest, todo, from_peers=True)
            for e, _got in self.verify(todo):
                os.unlink(os.path.join(self.staging, e["path"]))
            result["from_peers"] = [e["path"] for e in todo if not self.incomplete([e])]
            todo = self.incomplete(todo)
        for attempt in (1, 2):
            if not todo:
                break
            rc, err = self.aria2(manifest, todo)
            bad = self.verify(todo)
            incomplete = self.incomplete(todo)
            if incomplete and any(e.get("redirected") for e in incomplete):
                # signed redirect targets (the hub's CDN URLs) expire: resolve them again, once
                rc, err = self.aria2(manifest, incomplete)
                bad = self.verify(todo)
                incomplete = self.incomplete(todo)
            if incomplete:
                self.m.fail_json(msg="%s: aria2c (rc %s) did not complete %d file(s): %s; completed files are kept in %s "
                                     "and the next run resumes" % (manifest["repo_id"], rc, len(incomplete),
                                                                   "; ".join(self.classify(manifest, incomplete)), self.staging), **result)
            if bad and attempt == 2:
                self.m.fail_json(msg="%s: checksum mismatch after fetching again: %s" % (manifest["repo_id"], "; ".join(
                    "%s is %s, the hub says %s" % (e["path"], got, e.get("sha256") or e.get("sha1")) for e, got in bad)), **result)
            for e, _got in bad:
                os.unlink(os.path.join(self.staging, e["path"]))
                result["refetched"].append(e["path"])
            todo = [e for e, _got in bad]
        result["downloaded_bytes"] = self.downloaded(manifest, done, before)
        atomic_write(os.path.join(self.staging, MANIFEST), hub.manifest_text(manifest))
        for name in (".ddtree-verified.json", ".aria2.log"):
            if os.path.exists(os.path.join(self.staging, name)):
                os.unlink(os.path.join(self.staging, name))
        if os.path.lexists(self.dest):
            prev = self.dest + ".previous"
            if os.path.lexists(prev):
                shutil.rmtree(prev)
            os.rename(self.dest, prev)
            result["previous"] = prev
        os.rename(self.staging, self.dest)
        result["seconds"] = round(time.time() - start, 1)
        if p["progress_file"]:
            atomic_write(p["progress_file"], json.dumps({"bytes": total, "total": total, "seconds": result["seconds"],
                                                         "rate_bps": 0, "eta_s": 0, "finished": True}))
        return result

    def incomplete(self, entries):
        return [e for e in entries if not os.path.isfile(os.path.join(self.staging, e["path"]))
                or os.path.exists(os.path.join(self.staging, e["path"]) + ".aria2")
                or os.path.getsize(os.path.join(self.staging, e["path"])) != e["size"]]

    @staticmethod
    def downloaded(manifest, done, before):
        return sum(e["size"] for e in manifest["files"] if e["path"] not in done) - before


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            endpoint=dict(type="str", default="https://huggingface.co"),
            token=dict(type="str", no_log=True),
            dest=dict(type="path", required=True),
            include=dict(type="list", elements="str", default=[]),
            exclude=dict(type="list", elements="str", default=[]),
            manifest=dict(type="path"),
            peers=dict(type="list", elements="str", default=[]),
            connections=dict(type="int", default=8),
            concurrent=dict(type="int", default=4),
            max_tries=dict(type="int", default=10),
            lowest_speed=dict(type="str", default="100K"),
            margin_gib=dict(type="float", default=5),
            verify=dict(type="str", choices=["quick", "full"], default="quick"),
            progress_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    progress = module.params["progress_file"]
    if progress and not module.check_mode:
        # a finished mark from an earlier run must not end this run's wait early
        atomic_write(progress, json.dumps({"bytes": 0, "total": 0, "seconds": 0, "rate_bps": 0, "eta_s": 0, "finished": False}))
    try:
        result = Fetch(module).run()
    finally:
        # success or failure: whoever waits on the file (the role's progress loop) may stop waiting now
        if progress and not module.check_mode:
            try:
                with open(progress) as f:
                    state = json.load(f)
            except (OSError, ValueError):
                state = {}
            state["finished"] = True
            atomic_write(progress, json.dumps(state))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
