#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_release
short_description: Releases of an SGLang serving instance - venv, patch stamp and rendered config - switched atomically
version_added: "0.1.0"
description:
  - A release is the venv the server runs from (its real path), the sglang patch stamp in that venv,
    and the rendered command line and environment. Its id is a hash of all of them, so the same inputs
    give the same release and a second run changes nothing.
  - Each release is a directory C(<root>/<instance>/releases/<id>) with C(launch) (the exec line),
    C(env) (a systemd EnvironmentFile) and C(release.json). C(<root>/<instance>/current) points at the
    live one and C(previous) at the one before; both links flip atomically.
  - O(state=rollback) makes C(previous) current again (and the failed one previous), or the release
    O(release) names.
  - No secret belongs here; the service passes the API key as a systemd credential.
options:
  instance:
    description: Instance name (the C(%i) of C(ddtree-sglang@.service)).
    type: str
    required: true
  root:
    description: Where instances keep their releases.
    type: path
    default: /opt/ddtree/service
  state:
    description: C(present) makes the described release current; C(rollback) returns to the previous one.
    type: str
    choices: [present, rollback]
    default: present
  venv:
    description: The serving venv (a link is resolved; the release pins the real path).
    type: path
  launcher:
    description:
      - Program and arguments before the server flags; C({venv}) is replaced with the venv's real path,
        so a release keeps running the venv it was made with after the C(venv) link moves.
    type: list
    elements: str
    default: ["{venv}/bin/python", -m, sglang.launch_server]
  argv:
    description: Server flags (no secrets).
    type: list
    elements: str
    default: []
  env:
    description: Environment of the server process.
    type: dict
    default: {}
  credential:
    description: Name of the systemd credential holding a C(--config) YAML with secrets; passed when present.
    type: str
    default: sglang-secrets.yaml
  previous:
    description:
      - With O(state=present), the release C(previous) points at afterwards instead of the one that was current.
        A deploy that makes another release current for a while (the correctness gate's fresh autoregressive
        reference) keeps its rollback target this way. When it names the release being made current (the
        rollback target is the release made current, e.g. a bench's autoregressive baseline is the fresh
        reference's release), it is ignored; that release is kept as current.
    type: str
  release:
    description: With O(state=rollback), the release to return to instead of C(previous).
    type: str
  keep:
    description: Releases kept per instance (current and previous always stay).
    type: int
    default: 5
attributes:
  check_mode:
    support: full
    description: Reports the release that would become current; writes nothing.
  diff_mode:
    support: full
    description: Shows C(release.json) of the current release before and after.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Make the rendered release current
  ddtree.fleet.sglang_release:
    instance: main
    venv: /opt/ddtree/venv
    argv: [--model-path, /opt/ddtree/models/kimi, --tp-size, "8"]
    env: {NCCL_P2P_LEVEL: SYS}

- name: Back to the previous release
  ddtree.fleet.sglang_release:
    instance: main
    state: rollback
"""

RETURN = r"""
id:
  description: Id of the current release after the run.
  returned: always
  type: str
previous:
  description: Id of the previous release after the run (null when none).
  returned: always
  type: str
path:
  description: Directory of the current release.
  returned: always
  type: str
release:
  description: Content of C(release.json) of the current release.
  returned: always
  type: dict
"""

import hashlib
import json
import os
import shutil
import time
from shlex import quote as shlex_quote

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import atomic_write, switch_link
from ansible_collections.ddtree.fleet.plugins.module_utils.sglang_patch import STAMP


def env_file(env):
    lines = ["# ddtree.fleet release environment (systemd EnvironmentFile)"]
    for k in sorted(env):
        v = str(env[k]).replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"' % (k, v))
    return "\n".join(lines) + "\n"


def launch_script(rid, instance, launcher, argv, credential):
    lines = [" ".join(shlex_quote(x) for x in launcher)]
    for x in argv:  # one flag and its values per line
        if x.startswith("--") or len(lines) == 1:
            lines.append(shlex_quote(x))
        else:
            lines[-1] += " " + shlex_quote(x)
    quoted = " \\\n  ".join(lines)
    return ("#!/bin/sh\n# ddtree.fleet release %s of instance %s: the server's exec line\n"
            'secrets="${CREDENTIALS_DIRECTORY:-/nonexistent}/%s"\n'
            'if [ -r "$secrets" ]; then set -- --config "$secrets"; else set --; fi\n'
            'exec %s \\\n  "$@"\n' % (rid, instance, credential, quoted))


class Releases:
    def __init__(self, module):
        self.m, self.p = module, module.params
        self.base = os.path.join(self.p["root"], self.p["instance"])
        self.dir = os.path.join(self.base, "releases")
        self.current = os.path.join(self.base, "current")
        self.previous = os.path.join(self.base, "previous")

    def target(self, link):
        return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None

    def load(self, rid):
        try:
            with open(os.path.join(self.dir, rid, "release.json")) as f:
                return json.load(f)
        except (OSError, ValueError, TypeError):
            return None

    def point(self, link, rid):
        switch_link(link, os.path.join("releases", rid))

    def describe(self):
        p = self.p
        venv = os.path.realpath(p["venv"])
        stamp_file = os.path.join(venv, STAMP)
        stamp = None
        if os.path.exists(stamp_file):
            with open(stamp_file) as f:
                stamp = json.load(f)
        launcher = [x.replace("{venv}", venv) for x in p["launcher"]]
        body = {"instance": p["instance"], "venv": venv, "patch_stamp": stamp, "launcher": launcher,
                "argv": p["argv"], "env": dict((k, str(v)) for k, v in p["env"].items()), "credential": p["credential"]}
        rid = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
        body["id"] = rid
        return rid, body

    def diff(self, before, after):
        return {"before": self.dump(before), "after": self.dump(after), "before_header": self.current, "after_header": self.current}

    @staticmethod
    def dump(release):
        return json.dumps(dict((k, v) for k, v in (release or {}).items() if k != "created"), indent=1, sort_keys=True) + "\n"

    def present(self):
        if not self.p["venv"]:
            self.m.fail_json(msg="venv is required for state=present")
        if not os.path.isdir(self.p["venv"]):
            self.m.fail_json(msg="venv %s does not exist: install it first (venv_stream role)" % self.p["venv"])
        rid, body = self.describe()
        live = self.target(self.current)
        # the release being made current is kept as current: naming it as the rollback target asks nothing
        want_prev = self.p["previous"] if self.p["previous"] != rid else None
        if want_prev and self.load(want_prev) is None:
            self.m.fail_json(msg="previous=%s is not another release of instance %s (%s)" % (want_prev, self.p["instance"], self.dir))
        prev = want_prev or (self.target(self.previous) if live == rid else live)
        moves_prev = live == rid and bool(want_prev) and prev != self.target(self.previous)
        result = dict(changed=live != rid or moves_prev, id=rid, previous=prev, path=os.path.join(self.dir, rid), release=body)
        if self.m._diff:
            result["diff"] = self.diff(self.load(live) if live else None, body)
        if self.m.check_mode or not result["changed"]:
            return result
        if live == rid:  # only the rollback target moves
            self.point(self.previous, prev)
            return result
        path = os.path.join(self.dir, rid)
        if self.load(rid) is None:  # the id hashes the content: an existing one is the same release
            staging = os.path.join(self.dir, ".staging-%s-%d" % (rid, os.getpid()))
            os.makedirs(staging)
            body["created"] = time.time()
            atomic_write(os.path.join(staging, "env"), env_file(body["env"]))
            atomic_write(os.path.join(staging, "launch"), launch_script(rid, body["instance"], body["launcher"], body["argv"], body["credential"]), 0o755)
            atomic_write(os.path.join(staging, "release.json"), json.dumps(body, indent=1, sort_keys=True) + "\n")
            if os.path.exists(path):
                shutil.rmtree(path)
            os.rename(staging, path)
        self.point(self.current, rid)
        if prev:
            self.point(self.previous, prev)
        self.prune()
        result["release"] = self.load(rid)
        return result

    def rollback(self):
        live, prev = self.target(self.current), self.p["release"] or self.target(self.previous)
        if not prev or self.load(prev) is None:
            if self.p["release"]:
                self.m.fail_json(msg="instance %s has no release %s to roll back to (%s)" % (self.p["instance"], prev, self.dir))
            self.m.fail_json(msg="instance %s has no previous release to roll back to (%s)" % (self.p["instance"], self.previous))
        result = dict(changed=True, id=prev, previous=live, path=os.path.join(self.dir, prev), release=self.load(prev))
        if self.m._diff:
            result["diff"] = self.diff(self.load(live) if live else None, self.load(prev))
        if self.m.check_mode:
            return result
        self.point(self.current, prev)
        if live:
            self.point(self.previous, live)
        return result

    def prune(self):
        keep = {self.target(self.current), self.target(self.previous)}
        found = []
        for name in os.listdir(self.dir):
            full = os.path.join(self.dir, name)
            if name.startswith(".staging-"):
                shutil.rmtree(full)
            elif os.path.isdir(full):
                found.append(((self.load(name) or {}).get("created", 0), name))
        for n, (_created, name) in enumerate(sorted(found, reverse=True)):
            if name not in keep and n >= self.p["keep"]:
                shutil.rmtree(os.path.join(self.dir, name))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instance=dict(type="str", required=True),
            root=dict(type="path", default="/opt/ddtree/service"),
            state=dict(type="str", choices=["present", "rollback"], default="present"),
            venv=dict(type="path"),
            launcher=dict(type="list", elements="str", default=["{venv}/bin/python", "-m", "sglang.launch_server"]),
            argv=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            credential=dict(type="str", default="sglang-secrets.yaml"),
            keep=dict(type="int", default=5),
            previous=dict(type="str"),
            release=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    r = Releases(module)
    if not module.check_mode:
        os.makedirs(r.dir, mode=0o755, exist_ok=True)
    module.exit_json(**(r.present() if module.params["state"] == "present" else r.rollback()))


if __name__ == "__main__":
    main()
