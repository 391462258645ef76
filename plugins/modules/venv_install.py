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
    description: Source host for O(transfer=ssh).
    type: str
  artifact_dir:
    description: Directory of the artifacts on the source host.
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
    description: Venvs to keep under C(<prefix>/venvs); the live and the previous one always stay.
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
"""

import json
import os
import platform
import re
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import peer_ssh
from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, nearest_existing, require_tools, root_only
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import switch_link, write_progress


MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


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
        return cleaned

    def check_values(self, aid=None):
        """Every value that becomes a path, an ssh argument or code, and the directories root works in: a
        refusal names the value and the fix, before anything changes."""
        if aid is not None and not va.ID.match(aid):
            self.m.fail_json(msg="artifact_id %r is not an artifact id (16 hex digits, as venv_artifact returns it); "
                                 "nothing was changed" % (aid,))
        if aid is not None and self.p["transfer"] == "ssh":
            try:
                peer_ssh.check(self.p, self.p["ssh_host"])
            except peer_ssh.BadValue as e:
                self.m.fail_json(msg="cannot pull artifact %s from the source: %s; nothing was changed" % (aid, e))
        for mod in self.p["import_check"]:
            if not isinstance(mod, str) or not MODULE_NAME.match(mod):
                self.m.fail_json(msg="import_check item %r is not a module name (dotted identifiers, as in "
                                     "'import sglang'); nothing was changed" % (mod,))
        try:
            root_only(self.venvs, "the venvs directory")
        except UnsafePath as e:
            self.m.fail_json(msg="%s; nothing was changed" % e)

    # source ------------------------------------------------------------
    def ssh_argv(self, *remote):
        return peer_ssh.ssh_argv(self.p, self.p["ssh_host"], remote)

    def source(self):
        return self.p["manifest_file"] if self.p["transfer"] == "file" else "%s@%s" % (self.p["ssh_user"], self.p["ssh_host"])

    def read_manifest(self):
        """The manifest of the artifact, its size capped before it is read and every field checked before use
        (va.check_manifest), and hashing to the artifact id the source's module returned."""
        aid = self.p["artifact_id"]
        where = "the manifest of artifact %s from %s" % (aid, self.source())
        if self.p["transfer"] == "file":
            try:
                data = va.read_file_capped(self.p["manifest_file"])
            except OSError as e:
                self.m.fail_json(msg="cannot read %s: %s; nothing was changed" % (where, e))
            if data is None:
                self.m.fail_json(msg="%s is not a regular file of at most %d bytes; nothing was changed: bring the "
                                     "source's manifest again" % (where, va.MANIFEST_MAX_BYTES))
        else:
            rc, data, err = va.run_capped(self.ssh_argv("cat", os.path.join(self.p["artifact_dir"], aid + ".manifest.json")))
            if data is None:
                self.m.fail_json(msg="%s: the source sent more than %d bytes, more than any manifest; nothing was changed: "
                                     "the source's artifact is corrupt or hostile, remove it there and run again"
                                     % (where, va.MANIFEST_MAX_BYTES))
            if rc != 0:
                self.m.fail_json(msg="cannot read manifest %s from %s@%s: %s (host-to-host ssh comes from the base role)"
                                     % (aid, self.p["ssh_user"], self.p["ssh_host"], err.strip()))
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
        """Source bytes -> zstd -d -> tar -x into staging; progress into progress_file."""
        if self.p["transfer"] == "file":
            argv = ["cat", self.p["artifact_file"]]
        else:
            argv = self.ssh_argv("cat", os.path.join(self.p["artifact_dir"], self.p["artifact_id"] + ".tar.zst"))
        return va.stream_unpack(argv, staging, self.progress, limits=va.stream_limits(manifest, self.p["artifact_bytes"]))

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
        need = ["ssh_host"] if self.p["transfer"] == "ssh" else ["artifact_file", "manifest_file"]
        missing = [k for k in need if not self.p[k]]
        if missing:
            self.m.fail_json(msg="transfer=%s needs %s" % (self.p["transfer"], ", ".join(missing)))
        self.check_values(aid)
        installed = self.installed()
        live = self.target_of(self.link)
        cleaned = self.clean_leftovers()
        if live and installed.get(aid, {}).get("path") == live:
            return dict(changed=bool(cleaned), path=live, previous=self.target_of(self.prev_link), cleaned=cleaned)

        manifest = self.read_manifest()
        path = manifest["venv_path"]
        if os.path.dirname(path) != self.venvs:
            self.m.fail_json(msg="the source venv %s is not directly under %s: build serving venvs at %s/<name> on the "
                                 "source (they run at the same absolute path on every target)" % (path, self.venvs, self.venvs))
        fails = va.preflight(manifest, self.target_facts(manifest))
        if fails:
            self.m.fail_json(msg="venv %s (artifact %s) cannot run here: %s" % (path, aid, "; ".join(fails)))
        if path == live:
            self.m.fail_json(msg="%s is live with another artifact (%s): the source venv was changed in place; build "
                                 "the new venv at a new path under %s and stream that" % (path, self.installed_id(installed, path), self.venvs))
        diff = {"before": {"venv": live}, "after": {"venv": path}}
        already = installed.get(aid, {}).get("path") == path and os.path.isdir(path)
        if self.m.check_mode:
            return dict(changed=True, path=path, previous=live, cleaned=cleaned, diff=diff)

        result = dict(changed=True, path=path, cleaned=cleaned, diff=diff)
        if not already:
            require_tools(self.m, *(["zstd", "tar"] + (["ssh"] if self.p["transfer"] == "ssh" else [])))
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
            unpacked = os.path.join(staging, os.path.relpath(path, "/"))
            problems = ["unexpected member %s outside the venv's path" % x for x in va.outside_members(staging, unpacked)]
            if not os.path.isdir(unpacked) or os.path.islink(unpacked):
                problems.append("nothing unpacked at %s" % path)
            elif not problems:
                problems = va.verify_tree(unpacked, manifest)
            if problems:
                shutil.rmtree(staging)
                self.m.fail_json(msg="artifact %s does not match its manifest: %s; the live venv %s is untouched"
                                     % (aid, "; ".join(problems), live or "(none)"))
            if os.path.islink(path) or os.path.isfile(path):
                os.unlink(path)
            elif os.path.lexists(path):
                shutil.rmtree(path)  # an old, not live copy of this path
            os.rename(unpacked, path)
            shutil.rmtree(staging)
            result.update(transferred_bytes=done, seconds=round(secs, 2))
        self.point(self.link, path)
        if live and live != path:
            self.point(self.prev_link, live)
        bad = self.import_check(path)
        if bad:
            if live:
                self.point(self.link, live)
            self.m.fail_json(msg="venv %s: %s; switched back to %s" % (path, bad, live), **result)
        installed[aid] = {"path": path, "installed": time.time()}
        self.save_installed(self.prune(installed, path))
        result["previous"] = self.target_of(self.prev_link)
        return result

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
            elif os.path.dirname(info["path"]) == self.venvs and os.path.isdir(info["path"]) and not os.path.islink(info["path"]):
                shutil.rmtree(info["path"])
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
            artifact_dir=dict(type="path", default="/var/cache/ddtree/venv-artifacts"),
            artifact_file=dict(type="path"),
            manifest_file=dict(type="path"),
            import_check=dict(type="list", elements="str", default=[]),
            keep=dict(type="int", default=3),
            progress_file=dict(type="path"),
            **peer_ssh.ARGUMENT_SPEC
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
