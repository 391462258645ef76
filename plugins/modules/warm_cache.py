#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: warm_cache
short_description: Warm-start caches of a serving release - key, restore from a peer, pack
version_added: 0.1.0
description:
  - The JIT and compile caches an SGLang server writes (Triton, Inductor, FlashInfer, DeepGEMM, SGLang's own;
    all under one C(SGLANG_CACHE_DIR)) are only valid for what they were built for. This module keys them by
    GPU arch, driver branch, CUDA toolkit, the venv's content and the patch stamp, packs them as a
    content-addressed artefact once a server passed its admission gate, and restores a matching artefact on a
    host before its first start. docs/warm_start.md.
  - C(state=key) computes the key on this host (it reads the venv's distribution records and patch stamp) and
    says whether this host holds an artefact for it. It changes nothing.
  - C(state=restore) makes the key's cache directory ready before a start. A non-empty directory is used as it
    is. Otherwise the artefact is taken from this host's own store, else from the first source that has one for
    exactly this key (over ssh, as the fleet's venvs and models travel), then checked (the index's key, the
    artefact's size and sha256, its manifest's key and every file's sha256) and unpacked into a temporary
    directory that is renamed into place. Any refusal or failure is not an error - the result is cold, with the
    reason, and the server compiles as it would have.
  - C(state=pack) packs the key's cache directory when its content differs from the artefact on record, writes
    the index, and prunes keys beyond O(keep).
extends_documentation_fragment:
  - ddtree.fleet.peer_ssh
author:
  - ddtree.fleet developers (@ddtree)
options:
  state:
    description: What to do.
    type: str
    choices: [key, restore, pack]
    required: true
  root:
    description: The warm-start store (caches/, artifacts/, keys/), C(<prefix>/warm).
    type: path
    required: true
  arch:
    description: GPU arch of the host (C(sm_90); several joined with C(+)); empty for a host without GPUs, whose
      arch is then its CPU (machine and ISA flags). For O(state=key).
    type: str
    default: ""
  driver:
    description: NVIDIA driver version (its branch, the part before the first dot, is the key's). For O(state=key).
    type: str
    default: ""
  cuda:
    description: CUDA toolkit version (nvcc) the server's JIT compilers use. For O(state=key).
    type: str
    default: ""
  venv:
    description: The serving venv. For O(state=key).
    type: path
  patch_stamp:
    description: The patch stamp's path inside the venv.
    type: str
    default: .ddtree/sglang-patch.json
  key:
    description: The key O(state=key) returned. For O(state=restore) and O(state=pack).
    type: dict
  sources:
    description: Hosts to ask for the artefact, in order (C(name), C(address)). For O(state=restore).
    type: list
    elements: dict
    default: []
  peer_root:
    description: The store's path on the sources (default O(root)).
    type: path
  connect_timeout:
    description: Seconds each source gets to answer.
    type: int
    default: 10
  transfer_timeout:
    description: Seconds one artefact may take to arrive.
    type: int
    default: 1800
  max_bytes:
    description: Largest unpacked size accepted (bytes).
    type: int
    default: 107374182400
  owner:
    description: Owner of the cache directory (the service user, which writes it).
    type: str
    default: ddtree
  group:
    description: Its group.
    type: str
    default: ddtree
  keep:
    description: Keys kept in the store (the live one and the newest others). For O(state=pack).
    type: int
    default: 3
  host:
    description: This host's name, recorded in the index (where the artefact came from). For O(state=pack).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: state=key and state=pack report without writing; state=restore says what it would fetch without asking the sources.
  diff_mode:
    support: none
    description: No diff is shown.
"""

EXAMPLES = r"""
- name: The warm-start key of this host's serving venv
  ddtree.fleet.warm_cache:
    state: key
    root: /opt/ddtree/warm
    arch: sm_103
    driver: "580.95.05"
    cuda: "12.9"
    venv: /opt/ddtree/venv
  register: warm

- name: Before the first start - restore the cache from a peer with the same key
  ddtree.fleet.warm_cache:
    state: restore
    root: /opt/ddtree/warm
    key: "{{ warm.key }}"
    sources: [{name: b300-1, address: 10.0.0.11}]

- name: After the admission gate - pack what the server compiled
  ddtree.fleet.warm_cache:
    state: pack
    root: /opt/ddtree/warm
    key: "{{ warm.key }}"
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
key:
  description: The key (version, arch, driver_branch, cuda, python, venv, patch).
  returned: always
  type: dict
key_id:
  description: Its digest, the name of its cache directory and index.
  returned: always
  type: str
  sample: 3f9c0d2a81b4e6c7
cache_dir:
  description: The directory the servers of this key write (their C(SGLANG_CACHE_DIR)).
  returned: always
  type: str
held:
  description: This host holds an artefact for the key (its index and the artefact it names). state=key.
  returned: always
  type: bool
cache_files:
  description: Files in the cache directory now.
  returned: always
  type: int
warm:
  description: The start will find the key's cache. state=restore.
  returned: state=restore
  type: bool
verdict:
  description: What the report says - C(warm (key ID, from HOST)) or C(cold (why)).
  returned: state=restore
  type: str
source:
  description: Where the cache came from (this host, a source's name), or null.
  returned: state=restore
  type: str
tried:
  description: Each source asked, with its answer.
  returned: state=restore
  type: list
  elements: str
seconds:
  description: Time the restore took.
  returned: state=restore
  type: float
artifact:
  description: The artefact on record after packing (sha256, size, files, tree).
  returned: state=pack
  type: dict
removed:
  description: What the pruning removed (keys/, caches/, artifacts/ entries).
  returned: state=pack
  type: list
  elements: str
"""

import grp
import json
import os
import pwd
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ddtree.fleet.plugins.module_utils import peer_ssh
from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc


class Warm(object):
    def __init__(self, module):
        self.m, self.p = module, module.params
        self.root = self.p["root"]

    def paths(self, kid):
        return os.path.join(self.root, "caches", kid), os.path.join(self.root, "keys", kid + ".json")

    def held(self, kid):
        index = wc.read_index(self.root, kid)
        return bool(index and os.path.exists(os.path.join(self.root, "artifacts", "%s.tar.gz" % index.get("sha256"))))

    def base(self, key):
        kid = wc.key_id(key)
        cache = self.paths(kid)[0]
        return dict(key=key, key_id=kid, cache_dir=cache, held=self.held(kid), cache_files=wc.file_count(cache))

    def ids(self):
        try:
            return pwd.getpwnam(self.p["owner"]).pw_uid, grp.getgrnam(self.p["group"]).gr_gid
        except KeyError as exc:
            self.m.fail_json(msg="the cache owner %s:%s does not exist on this host (%s): run the base role, or set "
                                 "owner and group to the service user" % (self.p["owner"], self.p["group"], exc))

    # state=key
    def key(self):
        if not self.p["venv"]:
            self.m.fail_json(msg="state=key needs venv")
        try:
            python, venv = wc.venv_digest(self.p["venv"])
            patch = wc.patch_digest(self.p["venv"], self.p["patch_stamp"])
        except (ValueError, IOError, OSError) as exc:
            self.m.fail_json(msg="cannot key the warm-start cache of venv %s: %s" % (self.p["venv"], exc))
        arch = self.p["arch"] or wc.cpu_arch()
        key = wc.make_key(arch, wc.driver_branch(self.p["driver"]), self.p["cuda"], python, venv, patch)
        self.m.exit_json(changed=False, **self.base(key))

    def want_key(self):
        key = self.p["key"]
        if not isinstance(key, dict) or key.get("version") != wc.KEY_VERSION or any(not key.get(k) for k in wc.KEY_FIELDS):
            self.m.fail_json(msg="key must be the key that state=key returned (fields version, %s); got %r"
                                 % (", ".join(wc.KEY_FIELDS), key))
        return key

    def ssh(self, address, *remote):
        return peer_ssh.ssh_argv(self.p, address, remote, connect_timeout=self.p["connect_timeout"])

    def fetch(self, src, kid, key, incoming):
        """The artefact of key from src into incoming; returns its index. Raises wc.Refused."""
        peer_root = self.p["peer_root"] or self.root
        rc, out, err = self.m.run_command(self.ssh(src["address"], "cat", os.path.join(peer_root, "keys", kid + ".json")))
        if rc != 0:
            raise wc.Refused("no artefact for this key" if "No such file" in err else "unreachable (%s)" % (err.strip().splitlines() or ["rc %d" % rc])[-1])
        try:
            index = json.loads(out)
        except ValueError:
            raise wc.Refused("its index is not JSON")
        wc.check_index(index, key)  # before the transfer: an index for another key costs no artefact
        wc.fetch_to(self.ssh(src["address"], "cat", os.path.join(peer_root, "artifacts", index["sha256"] + ".tar.gz")),
                    incoming, self.p["transfer_timeout"])
        return index

    def make_dir(self, cache):
        """The key's (empty) cache directory for a cold start, owned by the service user."""
        if os.path.isdir(cache):
            return False
        uid, gid = self.ids()
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        os.mkdir(cache, 0o755)
        os.chown(cache, uid, gid)
        return True

    # state=restore
    def restore(self):
        key = self.want_key()
        kid = wc.key_id(key)
        cache = self.paths(kid)[0]
        start = time.time()
        res = dict(self.base(key), tried=[], source=None)
        ident = "key %s" % kid
        if res["cache_files"] > 0:
            res.update(source="this host")
            self.m.exit_json(changed=False, warm=True, verdict="warm (%s, kept on this host)" % ident, seconds=0.0, **res)
        if self.m.check_mode:
            if res["held"]:
                self.m.exit_json(changed=True, warm=True, verdict="warm (%s, would unpack this host's artefact)" % ident, seconds=0.0, **res)
            names = [s.get("name") for s in self.p["sources"]]
            self.m.exit_json(changed=True, warm=False, seconds=0.0,
                             verdict="cold (%s: would ask %s)" % (ident, ", ".join(names) or "no source"), **res)
        os.makedirs(os.path.join(self.root, "artifacts"), exist_ok=True)
        reasons = []
        if res["held"]:
            index = wc.read_index(self.root, kid)
            art = os.path.join(self.root, "artifacts", index["sha256"] + ".tar.gz")
            try:
                files = wc.install(art, index, key, cache, self.p["max_bytes"], self.ids())
                res.update(source="this host", cache_files=files)
                self.m.exit_json(changed=True, warm=True, verdict="warm (%s, from the store on this host, %d files)" % (ident, files),
                                 seconds=round(time.time() - start, 1), **res)
            except wc.Refused as exc:
                reasons.append("this host: %s" % exc)
                os.unlink(art)  # a store that fails its own check is not served to peers either
                os.unlink(self.paths(kid)[1])
        for src in self.p["sources"]:
            if not src.get("address"):
                continue
            incoming = os.path.join(self.root, "artifacts", ".incoming-%d.tar.gz" % os.getpid())
            try:
                index = self.fetch(src, kid, key, incoming)
                files = wc.install(incoming, index, key, cache, self.p["max_bytes"], self.ids())
            except wc.Refused as exc:
                reasons.append("%s: %s" % (src.get("name") or src["address"], exc))
                res["tried"].append(reasons[-1])
                if os.path.exists(incoming):
                    os.unlink(incoming)
                continue
            # this host now serves it to the next ones (the way weights fan out)
            os.replace(incoming, os.path.join(self.root, "artifacts", index["sha256"] + ".tar.gz"))
            os.chmod(os.path.join(self.root, "artifacts", index["sha256"] + ".tar.gz"), 0o644)
            wc.write_index(self.root, dict(index, fetched_from=src.get("name"), fetched_at=wc.now()))
            res["tried"].append("%s: warm" % (src.get("name") or src["address"]))
            res.update(source=src.get("name"), held=True, cache_files=files)
            self.m.exit_json(changed=True, warm=True, verdict="warm (%s, from %s, %d files)" % (ident, src.get("name"), files),
                             seconds=round(time.time() - start, 1), **res)
        made = self.make_dir(cache)
        why = "; ".join(reasons) if reasons else "no artefact for this key on this host and no source to ask"
        self.m.exit_json(changed=made, warm=False, verdict="cold (%s: %s)" % (ident, why), seconds=round(time.time() - start, 1), **res)

    # state=pack
    def pack(self):
        key = self.want_key()
        kid = wc.key_id(key)
        cache, _index_path = self.paths(kid)
        res = self.base(key)
        if res["cache_files"] == 0:
            self.m.exit_json(changed=False, artifact=None, removed=[], msg="nothing to pack: %s is empty" % cache, **res)
        index = wc.read_index(self.root, kid)
        entries = wc.tree(cache)
        current = wc.tree_digest(entries)
        art = os.path.join(self.root, "artifacts", "%s.tar.gz" % (index or {}).get("sha256"))
        # the artefact on record is served to peers as it is: one that no longer matches its index is packed again
        if index and index.get("tree") == current and res["held"] and wc.sha256_file(art) == index.get("sha256"):
            self.m.exit_json(changed=False, artifact=index, removed=[], **res)
        if self.m.check_mode:
            self.m.exit_json(changed=True, artifact=None, removed=[], **res)
        packed = wc.pack(self.root, cache, key, entries)
        packed.update(packed_at=wc.now(), packed_by=self.p["host"])
        wc.write_index(self.root, packed)
        removed = wc.prune(self.root, self.p["keep"], kid)
        self.m.exit_json(changed=True, artifact=packed, removed=removed, **dict(res, held=True))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["key", "restore", "pack"], required=True),
            root=dict(type="path", required=True),
            arch=dict(type="str", default=""),
            driver=dict(type="str", default=""),
            cuda=dict(type="str", default=""),
            venv=dict(type="path"),
            patch_stamp=dict(type="str", default=".ddtree/sglang-patch.json"),
            key=dict(type="dict", no_log=False),
            sources=dict(type="list", elements="dict", default=[]),
            peer_root=dict(type="path"),
            connect_timeout=dict(type="int", default=10),
            transfer_timeout=dict(type="int", default=1800),
            max_bytes=dict(type="int", default=100 * 2 ** 30),
            owner=dict(type="str", default="ddtree"),
            group=dict(type="str", default="ddtree"),
            keep=dict(type="int", default=3),
            host=dict(type="str", default=""),
            **peer_ssh.ARGUMENT_SPEC
        ),
        required_if=[("state", "key", ["venv"]), ("state", "restore", ["key"]), ("state", "pack", ["key"])],
        supports_check_mode=True,
    )
    w = Warm(module)
    getattr(w, module.params["state"])()


if __name__ == "__main__":
    main()
