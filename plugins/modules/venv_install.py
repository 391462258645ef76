#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: venv_install
short_description: Install a venv artifact at its source path, verified, and switch to it atomically
version_added: "0.1.0"
description:
  - Streams a venv artifact (made by M(ddtree.fleet.venv_artifact)) from the source host over ssh
    (or reads it from a file), unpacks it into a staging directory under C(<prefix>/venvs), checks
    every file against the manifest, moves it to the venv's absolute path from the source and points
    the symlink C(<prefix>/venv) at it with one atomic rename. C(<prefix>/venv.previous) keeps the
    one before; O(state=rollback) swaps back.
  - Until the switch, the live venv is untouched; a transfer that breaks leaves it live, and the
    next run removes the staging leftovers.
  - The source is input, not truth. The manifest is capped in size before it is read, every field is
    checked for type and form, and it must hash to O(artifact_id) (the id the source's module returned);
    the stream is capped at O(artifact_bytes) (or what the manifest lists) and unpacks as root's files
    into a C(0700) staging directory; O(prefix) and C(venvs) must be root's and writable only by root,
    or the task refuses before anything changes. Inventory values that reach ssh are checked (the
    doc fragment says how).
  - After the switch the modules in O(import_check) must import with the venv's python, else the
    previous venv is switched back and the task fails.
  - Fan-out (docs/scale.md). With O(transfer=ssh), a target that verified the artifact keeps it and serves it to the
    next hosts. While it streams, the compressed bytes also go to C(<artifact_dir>/.incoming-<id>.part) (root's,
    C(0600)), which the hosts that pull from this one watch grow. Once every file is verified, that file becomes
    C(<artifact_dir>/<id>.tar.zst) (C(0644)) and the manifest C(<id>.manifest.json) is written last. A readable
    manifest means ready. The copy is pruned with its venv (O(keep)), so a target holds one compressed artifact
    beside each venv it keeps.
  - O(sources) are asked in order. A source with C(wait=true) (this host's parent, which installs in the same run)
    is waited for while it fetches; it is passed over when it has no copy and fetches none within O(wait_grace)
    seconds, or when its transfer stands still for O(wait_stall) seconds. An ssh connection that a source's sshd
    resets or refuses at the start (MaxStartups) is tried again with backoff, then the next source is asked. The
    manifest from any source must hash to O(artifact_id). The result names the source that served and what each
    source tried answered.
options:
  state:
    description: C(present) installs and switches to O(artifact_id); C(rollback) switches back to the previous venv.
    type: str
    choices: [present, rollback]
    default: present
  prefix:
    description: Holds C(venvs/), the C(venv) symlink and C(venv.previous).
    type: path
    default: /opt/ddtree
  artifact_id:
    description: The artifact to install (required for O(state=present)).
    type: str
  artifact_bytes:
    description: Size of the artifact, for progress.
    type: int
    default: 0
  transfer:
    description: C(ssh) pulls from O(ssh_host); C(file) reads O(artifact_file) and O(manifest_file) on this host.
    type: str
    choices: [ssh, file]
    default: ssh
  ssh_host:
    description: Source host for O(transfer=ssh), when O(sources) is not given (the same as one source).
    type: str
  sources:
    description:
      - Hosts to pull from with O(transfer=ssh), in order; M(ddtree.fleet.fanout_sources) gives this host's chain in
        the fan-out tree. When given, O(ssh_host) is not used.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The host's name, for the result and progress (default O(sources[].address)).
        type: str
      address:
        description: Its address (a hostname or IP; checked like O(ssh_host)).
        type: str
        required: true
      wait:
        description: It installs in the same run (this host's parent in the tree) - wait while it fetches.
        type: bool
        default: false
  check_sources:
    description:
      - In check mode with O(transfer=ssh), read the manifest from a source to report the venv's path and check that it
        fits and can run here. C(false) answers from this host's state alone and asks no source (a dry run on
        every target at once before the real run, where the same checks run before anything is written).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for one C(wait=true) source at most.
    type: int
    default: 3600
  connect_timeout:
    description: Seconds an ssh connection to a source may take to open.
    type: int
    default: 10
  artifact_dir:
    description:
      - Directory of the artifacts on the sources. With O(transfer=ssh) also where this host keeps the artifact it
        installed and serves it (root's, C(0755)).
    type: path
    default: /var/cache/ddtree/venv-artifacts
  artifact_file:
    description: The artifact on this host, for O(transfer=file).
    type: path
  manifest_file:
    description: The manifest on this host, for O(transfer=file).
    type: path
  import_check:
    description: Modules that must import with the new venv's python after the switch.
    type: list
    elements: str
    default: []
  keep:
    description:
      - Venvs to keep under C(<prefix>/venvs); the live and the previous one always stay. The artifact copy this
        module kept for a venv is removed with it.
    type: int
    default: 3
  progress_file:
    description: Where transfer progress is written as JSON (bytes, rate) while it runs.
    type: path
attributes:
  check_mode:
    support: full
    description: Reports what would be installed or switched; transfers nothing.
  diff_mode:
    support: full
    description: Shows the symlink target before and after.
extends_documentation_fragment:
  - ddtree.fleet.peer_ssh
  - ddtree.fleet.fanout
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Pull the venv from the source and switch to it
  ddtree.fleet.venv_install:
    artifact_id: "{{ artifact.id }}"
    ssh_host: src
    import_check: [sglang]

- name: Back to the previous venv
  ddtree.fleet.venv_install:
    state: rollback
"""

RETURN = r"""
needed:
  description:
    - Whether the task had (or in check mode would have) anything to do; the same as C(changed), but it
      keeps its value when a caller overrides C(changed_when), as a dry run before a background job does.
  returned: always
  type: bool
path:
  description: The live venv after the task.
  returned: always
  type: str
previous:
  description: The venv C(venv.previous) points at after the task.
  returned: always
  type: str
transferred_bytes:
  description: Compressed bytes received.
  returned: when a transfer ran
  type: int
seconds:
  description: Transfer, unpack and verification time.
  returned: when a transfer ran
  type: float
cleaned:
  description: Leftovers of interrupted runs that were removed.
  returned: always
  type: list
  elements: str
source:
  description: The source that served the artifact (its name), or null.
  returned: when a transfer ran over ssh
  type: str
tried:
  description: Each source asked, with its answer (C(NAME - served) for the one that served).
  returned: with O(transfer=ssh) when the artifact was needed
  type: list
  elements: str
serving:
  description: This host kept the verified artifact and serves it to the next hosts.
  returned: when a transfer ran over ssh
  type: bool
"""

import json
import os
import platform
import re
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import fanout
from ansible_collections.ddtree.fleet.plugins.module_utils import peer_ssh
from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, nearest_existing, require_tools, root_only
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import switch_link, write_progress


MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
INCOMING = re.compile(r"^\.incoming-[0-9a-f]{16}\.part$")
PROBE_MAX_BYTES = 256


class Refused(Exception):
    """A source that does not serve: the message is its answer in the result's tried list."""


def show(text, limit=200):
    """The last line of another host's text, fit for a message: printable ASCII, cut short."""
    lines = [x for x in str(text or "").splitlines() if x.strip()]
    text = "".join(c if 32 <= ord(c) < 127 else "?" for c in (lines[-1].strip() if lines else ""))
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Installer:
    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.prefix = self.p["prefix"]
        self.venvs = os.path.join(self.prefix, "venvs")
        self.link = os.path.join(self.prefix, "venv")
        self.prev_link = os.path.join(self.prefix, "venv.previous")
        self.state_file = os.path.join(self.venvs, ".installed.json")

    # state -------------------------------------------------------------
    def target_of(self, link):
        return os.path.realpath(link) if os.path.islink(link) else None

    def installed(self):
        """{artifact id: {path, installed}} this module wrote; an entry of another form is dropped."""
        try:
            with open(self.state_file) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return dict((k, v) for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("path"), str)
                    and isinstance(v.get("installed", 0), (int, float)))

    def save_installed(self, data):
        atomic_write(self.state_file, json.dumps(data, sort_keys=True, indent=1))

    def point(self, link, target):
        switch_link(link, target)

    def clean_leftovers(self):
        """Remove the staging directories of killed runs (a link among them is removed, never followed)."""
        cleaned = []
        if os.path.isdir(self.venvs):
            for name in sorted(os.listdir(self.venvs)):
                if name.startswith(".staging-"):
                    if not self.m.check_mode:
                        p = os.path.join(self.venvs, name)
                        if stat.S_ISDIR(os.lstat(p).st_mode):
                            shutil.rmtree(p)
                        else:
                            os.unlink(p)
                    cleaned.append(name)
        adir = self.p["artifact_dir"]
        if self.p["transfer"] == "ssh" and os.path.isdir(adir) and not os.path.islink(adir):
            for name in sorted(os.listdir(adir)):
                if INCOMING.match(name):  # a killed run's copy (root's own name in root's directory)
                    if not self.m.check_mode:
                        os.unlink(os.path.join(adir, name))
                    cleaned.append(name)
        return cleaned

    def check_values(self, aid=None):
        """Every value that becomes a path, an ssh argument or code, and the directories root works in: a
        refusal names the value and the fix, before anything changes."""
        if aid is not None and not va.ID.match(aid):
            self.m.fail_json(msg="artifact_id %r is not an artifact id (16 hex digits, as venv_artifact returns it); "
                                 "nothing was changed" % (aid,))
        if aid is not None and self.p["transfer"] == "ssh":
            try:
                if self.p["sources"]:
                    for n, src in enumerate(self.p["sources"]):
                        peer_ssh.check(self.p, src["address"], "sources[%d].address" % n)
                        if src["name"] is not None and (not src["name"] or any(ord(c) < 32 or ord(c) == 127 for c in src["name"])):
                            raise peer_ssh.BadValue("sources[%d].name %r is empty or holds a control character: set it "
                                                    "to the host's inventory name" % (n, src["name"]))
                else:
                    peer_ssh.check(self.p, self.p["ssh_host"])
            except peer_ssh.BadValue as e:
                self.m.fail_json(msg="cannot pull artifact %s from the source: %s; nothing was changed" % (aid, e))
            try:
                root_only(self.p["artifact_dir"], "the artifact directory (this host keeps and serves the artifact there)")
            except UnsafePath as e:
                self.m.fail_json(msg="%s; nothing was changed" % e)
        for mod in self.p["import_check"]:
            if not isinstance(mod, str) or not MODULE_NAME.match(mod):
                self.m.fail_json(msg="import_check item %r is not a module name (dotted identifiers, as in "
                                     "'import sglang'); nothing was changed" % (mod,))
        try:
            root_only(self.venvs, "the venvs directory")
        except UnsafePath as e:
            self.m.fail_json(msg="%s; nothing was changed" % e)

    # source (transfer=file) --------------------------------------------
    def read_manifest(self):
        """The manifest of the artifact file, its size capped before it is read and every field checked before use
        (va.check_manifest), and hashing to the artifact id the source's module returned."""
        aid = self.p["artifact_id"]
        where = "the manifest of artifact %s from %s" % (aid, self.p["manifest_file"])
        try:
            data = va.read_file_capped(self.p["manifest_file"])
        except OSError as e:
            self.m.fail_json(msg="cannot read %s: %s; nothing was changed" % (where, e))
        if data is None:
            self.m.fail_json(msg="%s is not a regular file of at most %d bytes; nothing was changed: bring the "
                                 "source's manifest again" % (where, va.MANIFEST_MAX_BYTES))
        try:
            manifest = va.parse_manifest(data, where)
        except va.BadManifest as e:
            self.m.fail_json(msg="%s; the source's artifact is corrupt or hostile: remove it there and run again; "
                                 "nothing was changed" % e)
        if va.manifest_id(manifest) != aid:
            self.m.fail_json(msg="manifest of artifact %s does not hash to its id (%s): the source's artifact is corrupt; "
                                 "remove it there and run again" % (aid, va.manifest_id(manifest)))
        return manifest

    def target_facts(self, manifest):
        base = manifest["python"]["base_interpreter"]
        version = None
        if os.path.exists(base):
            # the manifest names it: run only an interpreter that only root can change
            real = os.path.realpath(base)
            st = os.stat(real)
            try:
                root_only(os.path.dirname(real), "the base interpreter's directory")
                if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                    raise UnsafePath("the base interpreter %s is not a file of root's that only root can write" % real)
            except UnsafePath as e:
                self.m.fail_json(msg="venv %s (artifact %s): %s; it was not run, nothing was changed"
                                     % (manifest["venv_path"], self.p["artifact_id"], e))
            rc, out, _err = self.m.run_command([base, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
            version = out.strip() if rc == 0 else None
        st = os.statvfs(nearest_existing(self.prefix))
        return {"base_interpreter_version": version, "machine": platform.machine(), "glibc": va.glibc_version(),
                "free_bytes": st.f_bavail * st.f_frsize}

    def stream(self, staging, manifest):
        """The artifact file -> zstd -d -> tar -x into staging; progress into progress_file."""
        return va.stream_unpack(["cat", self.p["artifact_file"]], staging, self.progress,
                                limits=va.stream_limits(manifest, self.p["artifact_bytes"]))

    def progress(self, done, secs, finished=False):
        write_progress(self.p["progress_file"], done, self.p["artifact_bytes"] or 0, secs, finished=finished)

    # actions -----------------------------------------------------------
    def import_check(self, venv):
        for mod in self.p["import_check"]:
            rc, _out, err = self.m.run_command([os.path.join(venv, "bin", "python"), "-c", "import %s" % mod])
            if rc != 0:
                return "import %s failed: %s" % (mod, err.strip().splitlines()[-1] if err.strip() else "rc %d" % rc)
        return None

    def present(self):
        aid = self.p["artifact_id"]
        if not aid:
            self.m.fail_json(msg="artifact_id is required for state=present")
        need = (["ssh_host"] if not self.p["sources"] else []) if self.p["transfer"] == "ssh" else ["artifact_file", "manifest_file"]
        missing = [k for k in need if not self.p[k]]
        if missing:
            self.m.fail_json(msg="transfer=%s needs %s%s" % (self.p["transfer"], ", ".join(missing),
                                                             " or sources" if self.p["transfer"] == "ssh" else ""))
        self.check_values(aid)
        installed = self.installed()
        live = self.target_of(self.link)
        cleaned = self.clean_leftovers()
        if live and installed.get(aid, {}).get("path") == live:
            return dict(changed=bool(cleaned), path=live, previous=self.target_of(self.prev_link), cleaned=cleaned)
        if self.p["transfer"] == "ssh":
            return self.present_ssh(aid, installed, live, cleaned)

        manifest = self.read_manifest()
        path = self.check_artifact(manifest, live, installed)
        diff = {"before": {"venv": live}, "after": {"venv": path}}
        already = installed.get(aid, {}).get("path") == path and os.path.isdir(path)
        if self.m.check_mode:
            return dict(changed=True, path=path, previous=live, cleaned=cleaned, diff=diff)

        result = dict(changed=True, path=path, cleaned=cleaned, diff=diff)
        if not already:
            require_tools(self.m, "zstd", "tar")
        os.makedirs(self.venvs, mode=0o755, exist_ok=True)
        self.check_values()  # venvs as it is now, made by root or found
        if not already:
            # root's own directory (0700) in a directory only root can write: nothing in it can be swapped or
            # reached until the verified tree is renamed into place
            staging = os.path.join(self.venvs, ".staging-" + aid)
            os.mkdir(staging, 0o700)
            done, secs, rcs, err = self.stream(staging, manifest)
            if any(rcs):
                shutil.rmtree(staging)
                self.m.fail_json(msg="transfer of artifact %s failed (source rc %s, zstd rc %s, tar rc %s): %s; the live "
                                     "venv %s is untouched" % (aid, rcs[0], rcs[1], rcs[2], err or "-", live or "(none)"))
            problems = self.unpacked_problems(staging, manifest)
            if problems:
                shutil.rmtree(staging)
                self.m.fail_json(msg="artifact %s does not match its manifest: %s; the live venv %s is untouched"
                                     % (aid, "; ".join(problems), live or "(none)"))
            self.move_into_place(staging, path)
            result.update(transferred_bytes=done, seconds=round(secs, 2))
        return self.switch(aid, path, live, installed, result)

    def check_artifact(self, manifest, live, installed, extra_bytes=0):
        """The venv's path when the artifact (its checked manifest, which hashes to the id: the same from every
        source) can run here; else the task fails naming why, before anything changes."""
        aid = self.p["artifact_id"]
        path = manifest["venv_path"]
        if os.path.dirname(path) != self.venvs:
            self.m.fail_json(msg="the source venv %s is not directly under %s: build serving venvs at %s/<name> on the "
                                 "source (they run at the same absolute path on every target)" % (path, self.venvs, self.venvs))
        facts = self.target_facts(manifest)
        fails = va.preflight(manifest, facts)
        if extra_bytes and not fails:
            # the copy this host keeps to serve the next hosts (docs/scale.md): beside the venv when on its disk
            adir = nearest_existing(self.p["artifact_dir"])
            st = os.statvfs(adir)
            same = os.stat(adir).st_dev == os.stat(nearest_existing(self.prefix)).st_dev
            need = extra_bytes + (int(manifest["total_size"] * 1.1) if same else 0)
            if st.f_bavail * st.f_frsize < need:
                fails.append("%.1f GiB free under %s, the venv%s and the copy of the artifact this host keeps to serve the "
                             "next hosts need %.1f GiB: free space" % (st.f_bavail * st.f_frsize / 2.0 ** 30,
                                                                       self.p["artifact_dir"], "" if same else " is elsewhere",
                                                                       need / 2.0 ** 30))
        if fails:
            self.m.fail_json(msg="venv %s (artifact %s) cannot run here: %s" % (path, aid, "; ".join(fails)))
        if path == live:
            self.m.fail_json(msg="%s is live with another artifact (%s): the source venv was changed in place; build "
                                 "the new venv at a new path under %s and stream that" % (path, self.installed_id(installed, path), self.venvs))
        return path

    def unpacked_problems(self, staging, manifest):
        path = manifest["venv_path"]
        unpacked = os.path.join(staging, os.path.relpath(path, "/"))
        problems = ["unexpected member %s outside the venv's path" % x for x in va.outside_members(staging, unpacked)]
        if not os.path.isdir(unpacked) or os.path.islink(unpacked):
            problems.append("nothing unpacked at %s" % path)
        elif not problems:
            problems = va.verify_tree(unpacked, manifest)
        return problems

    def move_into_place(self, staging, path):
        unpacked = os.path.join(staging, os.path.relpath(path, "/"))
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.lexists(path):
            shutil.rmtree(path)  # an old, not live copy of this path
        os.rename(unpacked, path)
        shutil.rmtree(staging)

    def switch(self, aid, path, live, installed, result, served=False):
        self.point(self.link, path)
        if live and live != path:
            self.point(self.prev_link, live)
        bad = self.import_check(path)
        if bad:
            if live:
                self.point(self.link, live)
            self.m.fail_json(msg="venv %s: %s; switched back to %s" % (path, bad, live), **result)
        installed[aid] = dict(installed.get(aid, {}), path=path, installed=time.time())
        if served:
            installed[aid]["served"] = True
        self.save_installed(self.prune(installed, path))
        result["previous"] = self.target_of(self.prev_link)
        return result

    # sources (transfer=ssh) -------------------------------------------
    def sources(self):
        if self.p["sources"]:
            return [{"name": s["name"] or s["address"], "address": s["address"], "wait": bool(s["wait"])}
                    for s in self.p["sources"]]
        return [{"name": self.p["ssh_host"], "address": self.p["ssh_host"], "wait": False}]

    def ssh_to(self, address, *remote):
        return peer_ssh.ssh_argv(self.p, address, remote, connect_timeout=self.p["connect_timeout"])

    def artifact_paths(self):
        """(artifact, manifest, incoming) in artifact_dir: the same names on every host."""
        adir, aid = self.p["artifact_dir"], self.p["artifact_id"]
        return (os.path.join(adir, aid + ".tar.zst"), os.path.join(adir, aid + ".manifest.json"),
                os.path.join(adir, ".incoming-%s.part" % aid))

    def manifest_from(self, src):
        """The checked manifest from src, hashing to the artifact id; a reset at the connection's start is tried
        again (fanout.retry). Raises Refused."""
        aid = self.p["artifact_id"]
        argv = self.ssh_to(src["address"], "cat", self.artifact_paths()[1])

        def read():
            rc, data, err = va.run_capped(argv, timeout=self.p["connect_timeout"] + 300)
            if data is None:
                raise Refused("it sent more than %d bytes as the manifest, more than any manifest" % va.MANIFEST_MAX_BYTES)
            if rc != 0:
                raise Refused("cannot read its manifest: %s" % (show(err) or "rc %d" % rc))
            return data
        data = fanout.retry(read)[0]
        try:
            manifest = va.parse_manifest(data, "its manifest")
        except va.BadManifest as e:
            raise Refused("%s: it is corrupt or hostile" % e)
        if va.manifest_id(manifest) != aid:
            raise Refused("its manifest does not hash to the artifact id (%s): it is corrupt or hostile" % va.manifest_id(manifest))
        return manifest

    def wait_for(self, src, part):
        """A source that installs in this run too (wait: true, the fan-out's parent): wait while it fetches, until its
        manifest is readable. While waiting, this host's own incoming copy shows the parent's progress (a sparse file
        of that size, no bytes), so the hosts that wait for this one keep waiting while the chain above fetches.
        Raises Refused when it has no copy and fetches none past wait_grace, or stalls past wait_stall."""
        _art, man, incoming = self.artifact_paths()
        argv = self.ssh_to(src["address"], "sh", "-c", fanout.PROBE, "probe", man, incoming)
        start = time.time()

        def probe():
            rc, out, err = va.run_capped(argv, limit=PROBE_MAX_BYTES, timeout=self.p["connect_timeout"] + 30)
            if out is None:
                raise Refused("its readiness probe answered more than %d bytes" % PROBE_MAX_BYTES)
            if rc != 0:
                if fanout.transient(err):
                    return "absent", None
                raise Refused("unreachable (%s)" % (show(err) or "rc %d" % rc))
            words = out.decode("ascii", "replace").split()
            if words == ["ready"]:
                return "ready", None
            if len(words) == 2 and words[0] == "progress" and words[1].isdigit():
                return "progress", int(words[1])
            return "absent", None

        def report(state, got):
            got = got if state == "progress" else 0
            if part is not None and got is not None:
                part.truncate(got)
            if self.p["progress_file"]:
                atomic_write(self.p["progress_file"], json.dumps({
                    "bytes": got or 0, "total": self.p["artifact_bytes"] or 0, "seconds": round(time.time() - start, 1),
                    "rate_bps": 0, "eta_s": 0, "finished": False, "waiting_for": src["name"], "state": state}))
        ok, why = fanout.wait_ready(probe, timeout=self.p["wait_timeout"], grace=self.p["wait_grace"],
                                    stall=self.p["wait_stall"], report=report)
        if not ok:
            raise Refused("not waited for: %s" % why)

    def stream_from(self, src, manifest, staging, part):
        """The artifact from src unpacked into staging (0700, made anew for each try) and copied into part, then
        verified against the manifest. A reset at the connection's start (nothing received) is tried again with
        backoff; any other failure raises Refused. Returns (bytes, seconds)."""
        aid = self.p["artifact_id"]
        argv = self.ssh_to(src["address"], "cat", self.artifact_paths()[0])

        def attempt():
            if os.path.lexists(staging):
                shutil.rmtree(staging)
            os.mkdir(staging, 0o700)
            part.seek(0)
            part.truncate(0)
            done, secs, rcs, err = va.stream_unpack(argv, staging, self.progress, keep=part,
                                                    limits=va.stream_limits(manifest, self.p["artifact_bytes"]))
            if any(rcs) and done == 0 and fanout.transient(err):
                raise Refused("cannot connect: %s" % show(err))  # at the start: tried again (fanout.retry)
            return done, secs, rcs, err
        try:
            done, secs, rcs, err = fanout.retry(attempt)[0]
        except Refused:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if any(rcs):
            shutil.rmtree(staging)
            raise Refused("transfer of artifact %s failed (source rc %s, zstd rc %s, tar rc %s): %s"
                          % (aid, rcs[0], rcs[1], rcs[2], show(err) or "-"))
        problems = self.unpacked_problems(staging, manifest)
        if problems:
            shutil.rmtree(staging)
            raise Refused("artifact %s does not match its manifest: %s" % (aid, "; ".join(problems)))
        return done, secs

    def publish(self, part, manifest):
        """The verified copy becomes <id>.tar.zst (0644) and the manifest is written last: readable means ready."""
        art, man, incoming = self.artifact_paths()
        part.flush()
        os.fsync(part.fileno())
        part.close()
        os.chmod(incoming, 0o644)
        os.replace(incoming, art)
        atomic_write(man, json.dumps(manifest, sort_keys=True), mode=0o644)

    def present_ssh(self, aid, installed, live, cleaned):
        srcs = self.sources()
        tried = []
        known = installed.get(aid, {}).get("path")
        if known and os.path.dirname(known) == self.venvs and os.path.isdir(known) and not os.path.islink(known):
            # installed and verified by an earlier run (then rolled back from): switched to, nothing fetched
            diff = {"before": {"venv": live}, "after": {"venv": known}}
            if self.m.check_mode:
                return dict(changed=True, path=known, previous=live, cleaned=cleaned, diff=diff)
            self.check_values()
            return self.switch(aid, known, live, installed, dict(changed=True, path=known, cleaned=cleaned, diff=diff))
        if self.m.check_mode and not self.p["check_sources"]:
            # the answer is 'needed' from this host's state alone: no source is asked (the role's dry run before a
            # real run, on every target at once, would be that many connections to the source's sshd)
            return dict(changed=True, previous=live, cleaned=cleaned, tried=tried,
                        diff={"before": {"venv": live}, "after": {"venv": "(artifact %s)" % aid}})
        if self.m.check_mode:
            # a dry run waits for nobody: the sources that hold the artifact now first
            for src in [s for s in srcs if not s["wait"]] + [s for s in srcs if s["wait"]]:
                try:
                    manifest = self.manifest_from(src)
                except Refused as e:
                    tried.append("%s: %s" % (src["name"], e))
                    continue
                path = self.check_artifact(manifest, live, installed)
                tried.append("%s: has it" % src["name"])
                return dict(changed=True, path=path, previous=live, cleaned=cleaned, tried=tried,
                            diff={"before": {"venv": live}, "after": {"venv": path}})
            self.m.fail_json(msg="cannot read the manifest of artifact %s from any source (host-to-host ssh comes from the "
                                 "base role): %s" % (aid, "; ".join(tried)), tried=tried)

        require_tools(self.m, "zstd", "tar", "ssh")
        os.makedirs(self.venvs, mode=0o755, exist_ok=True)
        os.makedirs(self.p["artifact_dir"], mode=0o755, exist_ok=True)
        self.check_values()  # venvs and the artifact directory as they are now, made by root or found
        try:
            root_only(self.p["artifact_dir"], "the artifact directory")
        except UnsafePath as e:
            self.m.fail_json(msg="%s; nothing was changed" % e)
        incoming = self.artifact_paths()[2]
        staging = os.path.join(self.venvs, ".staging-" + aid)
        # root's (0600) in root's directory, from the start: the hosts that wait for this one see it (fanout.PROBE)
        fd = os.open(incoming, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        part = os.fdopen(fd, "wb")
        manifest = served = None
        try:
            for src in srcs:
                try:
                    if src["wait"]:
                        self.wait_for(src, part)
                    got = self.manifest_from(src)
                    if manifest is None:
                        self.check_artifact(got, live, installed, extra_bytes=self.p["artifact_bytes"])
                    manifest = got
                    done, secs = self.stream_from(src, manifest, staging, part)
                except Refused as e:
                    tried.append("%s: %s" % (src["name"], e))
                    continue
                tried.append("%s: served" % src["name"])
                served = src["name"]
                break
            if served is None:
                self.m.fail_json(msg="artifact %s: no source could serve it (%s); the live venv %s is untouched"
                                     % (aid, "; ".join(tried) or "no sources", live or "(none)"), tried=tried)
            path = manifest["venv_path"]
            self.move_into_place(staging, path)
            self.publish(part, manifest)
        finally:
            if not part.closed:
                part.close()
                if os.path.lexists(incoming):
                    os.unlink(incoming)
        result = dict(changed=True, path=path, cleaned=cleaned, diff={"before": {"venv": live}, "after": {"venv": path}},
                      transferred_bytes=done, seconds=round(secs, 2), source=served, tried=tried, serving=True)
        return self.switch(aid, path, live, installed, result, served=True)

    @staticmethod
    def installed_id(installed, path):
        return next((k for k, v in installed.items() if v.get("path") == path), "unknown")

    def prune(self, installed, live):
        keep = {live, self.target_of(self.prev_link)}
        ordered = sorted(installed.items(), key=lambda kv: kv[1].get("installed", 0), reverse=True)
        out = {}
        for n, (aid, info) in enumerate(ordered):
            if info["path"] in keep or n < self.p["keep"]:
                out[aid] = info
            else:
                if os.path.dirname(info["path"]) == self.venvs and os.path.isdir(info["path"]) and not os.path.islink(info["path"]):
                    shutil.rmtree(info["path"])
                if info.get("served") and va.ID.match(aid):
                    # the copy this module kept: the manifest first (no longer ready), then the artifact
                    for suffix in (".manifest.json", ".tar.zst"):
                        p = os.path.join(self.p["artifact_dir"], aid + suffix)
                        if os.path.lexists(p):
                            os.unlink(p)
        return out

    def rollback(self):
        self.check_values()
        live, prev = self.target_of(self.link), self.target_of(self.prev_link)
        if not prev or not os.path.isdir(prev):
            self.m.fail_json(msg="no previous venv to roll back to (%s does not point at a venv)" % self.prev_link)
        diff = {"before": {"venv": live}, "after": {"venv": prev}}
        if self.m.check_mode:
            return dict(changed=True, path=prev, previous=live, cleaned=[], diff=diff)
        self.point(self.link, prev)
        if live:
            self.point(self.prev_link, live)
        bad = self.import_check(prev)
        if bad:
            self.m.fail_json(msg="rolled back to %s, but %s" % (prev, bad))
        return dict(changed=True, path=prev, previous=live, cleaned=[], diff=diff)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "rollback"], default="present"),
            prefix=dict(type="path", default="/opt/ddtree"),
            artifact_id=dict(type="str"),
            artifact_bytes=dict(type="int", default=0),
            transfer=dict(type="str", choices=["ssh", "file"], default="ssh"),
            ssh_host=dict(type="str"),
            sources=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str"), address=dict(type="str", required=True), wait=dict(type="bool", default=False))),
            check_sources=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=3600),
            connect_timeout=dict(type="int", default=10),
            artifact_dir=dict(type="path", default="/var/cache/ddtree/venv-artifacts"),
            artifact_file=dict(type="path"),
            manifest_file=dict(type="path"),
            import_check=dict(type="list", elements="str", default=[]),
            keep=dict(type="int", default=3),
            progress_file=dict(type="path"),
            **dict(peer_ssh.ARGUMENT_SPEC, **fanout.ARGUMENT_SPEC)
        ),
        supports_check_mode=True,
    )
    inst = Installer(module)
    result = inst.present() if module.params["state"] == "present" else inst.rollback()
    if not module._diff:
        result.pop("diff", None)
    result["needed"] = result["changed"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
