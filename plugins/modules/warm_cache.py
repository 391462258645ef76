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
  - ddtree.fleet.fanout
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
    description:
      - Hosts to ask for the artefact, in order (C(name), C(address), C(wait)); M(ddtree.fleet.warm_sources) gives
        them as the fan-out tree orders them (docs/scale.md). For O(state=restore).
      - A source with C(wait=true) restores in the same run (this host's parent in the tree). It is waited for while
        it fetches, and passed over when it has no copy and fetches none within O(wait_grace) seconds, or when its
        transfer stalls for O(wait_stall) seconds.
      - A connection a source's sshd resets or refuses at the start is tried again with exponential backoff before
        the next source is asked.
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

from ansible_collections.ddtree.fleet.plugins.module_utils import fanout
from ansible_collections.ddtree.fleet.plugins.module_utils import peer_ssh
from ansible_collections.ddtree.fleet.plugins.module_utils import warm_cache as wc


class Warm(object):
    def __init__(self, module):
        self.m, self.p = module, module.params
        self.root = self.p["root"]
        # the compressed artefact: the unpacked bytes, tar headers and the manifest, with room to spare
        self.max_artifact = self.p["max_bytes"] + self.p["max_bytes"] // 8 + 2 ** 30

    def paths(self, kid):
        return os.path.join(self.root, "caches", kid), os.path.join(self.root, "keys", kid + ".json")

    def artifact(self, sha):
        return os.path.join(self.root, "artifacts", sha + ".tar.gz")

    def own_index(self, key, kid):
        """This host's index of the key, checked as a peer's would be; None when missing or unusable."""
        try:
            return wc.check_index(wc.read_index(self.root, kid), key, self.max_artifact)
        except wc.Refused:
            return None

    def held(self, key, kid):
        index = self.own_index(key, kid)
        return bool(index) and os.path.isfile(self.artifact(index["sha256"])) and not os.path.islink(self.artifact(index["sha256"]))

    def base(self, key):
        kid = wc.key_id(key)
        cache = self.paths(kid)[0]
        return dict(key=key, key_id=kid, cache_dir=cache, held=self.held(key, kid), cache_files=wc.file_count(cache))

    def ids(self):
        try:
            return pwd.getpwnam(self.p["owner"]).pw_uid, grp.getgrnam(self.p["group"]).gr_gid
        except KeyError as exc:
            self.m.fail_json(msg="the cache owner %s:%s does not exist on this host (%s): run the base role, or set "
                                 "owner and group to the service user" % (self.p["owner"], self.p["group"], exc))

    def prepare(self):
        """The store as only root can change it (wc.prepare); a store root cannot trust is a cold start with
        the reason, never a failure: returns the reason or None."""
        try:
            wc.prepare(self.root, write=not self.m.check_mode)
        except (wc.StoreError, OSError) as exc:
            return "this host's store is not usable: %s" % exc
        return None

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
        if (not isinstance(key, dict) or key.get("version") != wc.KEY_VERSION
                or any(not isinstance(key.get(k), str) or not key.get(k) for k in wc.KEY_FIELDS)):
            self.m.fail_json(msg="key must be the key that state=key returned (fields version, %s); got %r"
                                 % (", ".join(wc.KEY_FIELDS), key))
        return key

    def ssh(self, address, *remote):
        return peer_ssh.ssh_argv(self.p, address, remote, connect_timeout=self.p["connect_timeout"])

    def check_ssh(self):
        """The ssh settings are inventory values: checked before anything is asked of any source."""
        try:
            self.ssh("localhost", "true")
        except ValueError as exc:
            self.m.fail_json(msg="warm_cache on %s: %s" % (self.p["host"] or "this host", exc))

    def remote(self, *parts):
        """A path of the source's store (the same layout under peer_root)."""
        return os.path.join(self.p["peer_root"] or self.root, *parts)

    def wait_for(self, src, kid):
        """A source that restores in this run too (wait: true, the fan-out's parent): wait while it fetches,
        until its index is there. Raises wc.Refused when it has no copy and fetches none, or stalls."""
        argv = self.ssh(src["address"], "sh", "-c", fanout.PROBE, "probe",
                        self.remote("keys", kid + ".json"),
                        self.remote("artifacts", wc.incoming_name(kid)))

        def probe():
            try:
                out = wc.fetch(argv, self.p["connect_timeout"] + 30, 256).decode("ascii", "replace").split()
            except wc.Refused as exc:
                if fanout.transient(str(exc)):
                    return "absent", None
                raise wc.Refused("unreachable (%s)" % exc)
            if out[:1] == ["progress"] and len(out) == 2 and out[1].isdigit():
                return "progress", int(out[1])
            return ("ready", None) if out[:1] == ["ready"] else ("absent", None)
        ok, why = fanout.wait_ready(probe, timeout=self.p["transfer_timeout"], grace=self.p["wait_grace"],
                                    stall=self.p["wait_stall"])
        if not ok:
            raise wc.Refused("not waited for: %s" % why)

    def fetch(self, src, kid, key, incoming):
        """The artefact of key from src into the file incoming; returns its checked index. A connection the
        other side resets at the start (its sshd's MaxStartups) is tried again with backoff. Raises wc.Refused."""
        try:
            argv = self.ssh(src["address"], "cat", self.remote("keys", kid + ".json"))
        except ValueError as exc:
            raise wc.Refused("not asked: %s" % exc)
        if src.get("wait"):
            self.wait_for(src, kid)
        try:
            data = fanout.retry(lambda: wc.fetch(argv, self.p["connect_timeout"] + 30, wc.MAX_INDEX_BYTES))[0]
        except wc.Missing:
            raise wc.Refused("no artefact for this key")
        except wc.Refused as exc:
            raise wc.Refused("unreachable (%s)" % exc)
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise wc.Refused("its index is not JSON")
        index = wc.check_index(doc, key, self.max_artifact)  # before the transfer: another key costs no artefact
        art = self.ssh(src["address"], "cat", self.remote("artifacts", index["sha256"] + ".tar.gz"))

        def transfer():
            # no more than the index's size is taken: a peer that sends more is cut off at once
            with open(incoming, "wb") as f:
                return wc.fetch(art, self.p["transfer_timeout"], index["size"], dest=f)
        fanout.retry(transfer)
        wc.verify_artifact(incoming, index)
        return index

    def make_dir(self, cache):
        """The key's (empty) cache directory for a cold start, owned by the service user."""
        if os.path.isdir(cache) and not os.path.islink(cache):
            return False
        uid, gid = self.ids()
        wc.set_aside(self.root, cache)
        os.mkdir(cache, 0o755)
        os.chown(cache, uid, gid)
        return True

    # state=restore
    def restore(self):
        key = self.want_key()
        self.check_ssh()
        ids = self.ids()
        kid = wc.key_id(key)
        cache = self.paths(kid)[0]
        if self.m.check_mode:
            return self.restore_in(key, kid, cache, ids)
        with wc.Lock(self.root):  # one run at a time: the next one's prepare() clears what a killed one left
            self.restore_in(key, kid, cache, ids)

    def restore_in(self, key, kid, cache, ids):
        start = time.time()
        ident = "key %s" % kid
        broken = self.prepare()
        res = dict(self.base(key), tried=[], source=None)
        if broken:
            self.m.exit_json(changed=False, warm=False, verdict="cold (%s: %s)" % (ident, broken), seconds=0.0, **res)
        if res["cache_files"] > 0:
            res.update(source="this host")
            self.m.exit_json(changed=False, warm=True, verdict="warm (%s, kept on this host)" % ident, seconds=0.0, **res)
        if self.m.check_mode:
            if res["held"]:
                self.m.exit_json(changed=True, warm=True, verdict="warm (%s, would unpack this host's artefact)" % ident, seconds=0.0, **res)
            names = [wc.show(s.get("name")) for s in self.p["sources"]]
            self.m.exit_json(changed=True, warm=False, seconds=0.0,
                             verdict="cold (%s: would ask %s)" % (ident, ", ".join(names) or "no source"), **res)
        self.restore_locked(key, kid, cache, ids, start, ident, res)

    def restore_locked(self, key, kid, cache, ids, start, ident, res):
        reasons = []
        index = self.own_index(key, kid)
        if index:
            try:
                art = self.artifact(index["sha256"])
                wc.verify_artifact(art, index)
                files = self.installed(wc.install(art, index, key, cache, self.p["max_bytes"], ids))
                res.update(source="this host", cache_files=files)
                self.m.exit_json(changed=True, warm=True, verdict="warm (%s, from the store on this host, %d files)" % (ident, files),
                                 seconds=round(time.time() - start, 1), **res)
            except (wc.Refused, OSError) as exc:
                reasons.append("this host: %s" % exc)
                # a store that fails its own check is not served to peers either
                wc.remove(self.artifact(index["sha256"]))
                wc.remove(self.paths(kid)[1])
                res["held"] = False
        for src in self.p["sources"]:
            name = src.get("name") if isinstance(src.get("name"), str) and src.get("name") else src.get("address")
            if not isinstance(src.get("address"), str) or not src.get("address"):
                continue
            # beside the artefacts, root's (0600): the hosts that pull from this one see it grow (fanout.PROBE)
            incoming = os.path.join(self.root, "artifacts", wc.incoming_name(kid))
            try:
                index = self.fetch(src, kid, key, incoming)
                entries = wc.install(incoming, index, key, cache, self.p["max_bytes"], ids)
            except (wc.Refused, OSError) as exc:
                reasons.append("%s: %s" % (wc.show(name), exc))
                res["tried"].append(reasons[-1])
                wc.remove(incoming)
                continue
            # this host now serves it to the next ones (the way weights fan out); its index is written from the
            # checked fields alone, under this host's own key id
            os.replace(incoming, self.artifact(index["sha256"]))
            wc.write_index(self.root, kid, dict(index, key=key, key_id=kid, tree=wc.tree_digest(entries),
                                                files=self.installed(entries), fetched_from=wc.show(name), fetched_at=wc.now()))
            res["tried"].append("%s: warm" % wc.show(name))
            res.update(source=wc.show(name), held=True, cache_files=self.installed(entries))
            self.m.exit_json(changed=True, warm=True, verdict="warm (%s, from %s, %d files)" % (ident, wc.show(name), res["cache_files"]),
                             seconds=round(time.time() - start, 1), **res)
        made = self.make_dir(cache)
        why = "; ".join(reasons) if reasons else "no artefact for this key on this host and no source to ask"
        self.m.exit_json(changed=made, warm=False, verdict="cold (%s: %s)" % (ident, why), seconds=round(time.time() - start, 1), **res)

    @staticmethod
    def installed(entries):
        return sum(1 for e in entries if e["type"] == "file")

    # state=pack
    def pack(self):
        key = self.want_key()
        uid = self.ids()[0]
        kid = wc.key_id(key)
        cache = self.paths(kid)[0]
        if self.m.check_mode:
            return self.pack_in(key, kid, cache, uid)
        with wc.Lock(self.root):
            self.pack_in(key, kid, cache, uid)

    def pack_in(self, key, kid, cache, uid):
        broken = self.prepare()
        res = self.base(key)
        if broken:
            self.m.exit_json(changed=False, artifact=None, removed=[], msg="not packed: %s" % broken, **res)
        if res["cache_files"] == 0:
            self.m.exit_json(changed=False, artifact=None, removed=[], msg="nothing to pack: %s is empty" % cache, **res)
        self.pack_locked(key, kid, cache, uid, res)

    def pack_locked(self, key, kid, cache, uid, res):
        try:
            entries = wc.tree(cache, uid=uid, max_bytes=self.p["max_bytes"], ids=True)
        except wc.Refused as exc:
            self.m.exit_json(changed=False, artifact=None, removed=[], msg="not packed: %s" % exc, **res)
        index = self.own_index(key, kid)
        record = wc.read_index(self.root, kid) if index else None
        # the artefact on record is served to peers as it is: one that no longer matches its index is packed again
        if (index and record.get("tree") == wc.tree_digest(entries) and res["held"]
                and wc.sha256_file(self.artifact(index["sha256"])) == index["sha256"]):
            self.m.exit_json(changed=False, artifact=record, removed=[], **res)
        if self.m.check_mode:
            self.m.exit_json(changed=True, artifact=None, removed=[], **res)
        try:
            packed = wc.pack(self.root, cache, key, entries, uid=uid)
        except wc.Refused as exc:
            self.m.exit_json(changed=False, artifact=None, removed=[], msg="not packed: %s" % exc, **res)
        packed.update(packed_at=wc.now(), packed_by=self.p["host"])
        wc.write_index(self.root, kid, packed)
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
            **dict(peer_ssh.ARGUMENT_SPEC, **fanout.ARGUMENT_SPEC)
        ),
        required_if=[("state", "key", ["venv"]), ("state", "restore", ["key"]), ("state", "pack", ["key"])],
        supports_check_mode=True,
    )
    w = Warm(module)
    getattr(w, module.params["state"])()


if __name__ == "__main__":
    main()
