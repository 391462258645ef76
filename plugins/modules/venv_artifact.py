#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: venv_artifact
short_description: Build (once per content) a streamable artifact of a Python venv
version_added: "0.1.0"
description:
  - Makes C(<artifact_dir>/<id>.tar.zst) and C(<id>.manifest.json) from a venv. The manifest lists
    every file with size, mode and sha256, the Python version and base interpreter, the platform
    (machine, glibc), the installed packages and the sglang version; the id is the hash of the manifest.
  - The venv, every entry in it and O(artifact_dir) must be root's and writable only by root (root runs the
    venv's python and ships its files); files are opened without following links and must be the files the
    walk saw.
  - A cheap fingerprint (paths, sizes, mtimes) of the venv is remembered; while it is unchanged the
    existing artifact is returned without reading a file. Otherwise every file is hashed, and the tar
    is built only if no artifact with that id exists yet.
options:
  venv:
    description: The venv. Targets install it at this same absolute path.
    type: path
    required: true
  artifact_dir:
    description: Where artifacts are kept (readable by the service user, who serves them to targets).
    type: path
    default: /var/cache/ddtree/venv-artifacts
  compression_level:
    description: zstd level (1 is fastest; 3 is zstd's default).
    type: int
    default: 3
  keep:
    description: Artifacts to keep, newest first; the current one always stays.
    type: int
    default: 3
attributes:
  check_mode:
    support: full
    description: Hashes but builds nothing.
  diff_mode:
    support: none
    description: No diff.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Artifact of the serving venv
  ddtree.fleet.venv_artifact:
    venv: /opt/ddtree/venvs/sglang-0.5.23
  register: artifact
"""

RETURN = r"""
id:
  description: Artifact id (hash of the manifest).
  returned: always
  type: str
  sample: 3f2a9c0e1b7d4a55
artifact:
  description: Path of the zstd tar.
  returned: always
  type: str
artifact_bytes:
  description: Size of the zstd tar (0 in check mode when not built yet).
  returned: always
  type: int
manifest_path:
  description: Path of the manifest JSON.
  returned: always
  type: str
manifest:
  description: The manifest without its file list.
  returned: always
  type: dict
reused:
  description: The fingerprint matched a known artifact; nothing was hashed.
  returned: always
  type: bool
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import venv_artifact as va
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, require_tools, root_only

PACKAGES = ("import importlib.metadata as m, json; "
            "print(json.dumps(sorted(set('%s==%s' % (d.metadata['Name'], d.version) for d in m.distributions()))))")


def load_index(path):
    """{fingerprint: artifact id}; entries of another form are dropped (an id becomes a file name)."""
    try:
        with open(path) as f:
            index = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(index, dict):
        return {}
    return dict((k, v) for k, v in index.items() if isinstance(v, str) and va.ID.match(v))


def prune(artifact_dir, keep, current):
    ids = []
    for name in os.listdir(artifact_dir):
        if name.endswith(".manifest.json"):
            p = os.path.join(artifact_dir, name)
            ids.append((os.path.getmtime(p), name[:-len(".manifest.json")]))
    removed = []
    for _mtime, aid in sorted(ids, reverse=True)[keep:]:
        if aid == current:
            continue
        for suffix in (".tar.zst", ".manifest.json"):
            p = os.path.join(artifact_dir, aid + suffix)
            if os.path.exists(p):
                os.unlink(p)
        removed.append(aid)
    return removed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            artifact_dir=dict(type="path", default="/var/cache/ddtree/venv-artifacts"),
            compression_level=dict(type="int", default=3),
            keep=dict(type="int", default=3),
        ),
        supports_check_mode=True,
    )
    venv = os.path.abspath(module.params["venv"])
    adir = module.params["artifact_dir"]
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        module.fail_json(msg="%s is not a venv (no pyvenv.cfg): point venv_stream_source_venv at a venv made with "
                             "python -m venv" % venv)
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        module.fail_json(msg="%s: bin/python is missing or its base interpreter is gone: rebuild the venv" % venv)

    try:  # root runs the venv's python and reads its files: nobody else may be able to change them
        root_only(venv, "the venv")
        root_only(adir, "the artifact directory")
    except UnsafePath as e:
        module.fail_json(msg="%s; nothing was built" % e)
    walked = va.walk(venv)
    foreign = va.not_roots(walked)
    if foreign:
        module.fail_json(msg="the venv %s holds entries a user other than root can change: %s; root would run and ship "
                             "them. Build the serving venv as root (chown -R root:root %s && chmod -R go-w %s); nothing "
                             "was built" % (venv, ", ".join(foreign), venv, venv))
    fp = va.fingerprint(venv, walked)
    index_path = os.path.join(adir, "index.json")
    index = load_index(index_path)

    def paths(aid):
        return os.path.join(adir, aid + ".tar.zst"), os.path.join(adir, aid + ".manifest.json")

    known = index.get(fp)
    if known and all(os.path.exists(p) for p in paths(known)):
        tar, man = paths(known)
        try:
            manifest = va.parse_manifest(va.read_file_capped(man) or b"", man)
        except (OSError, va.BadManifest) as e:
            module.fail_json(msg="%s: %s; remove it (and %s) and run again" % (man, e, tar))
        module.exit_json(changed=False, id=known, artifact=tar, artifact_bytes=os.path.getsize(tar),
                         manifest_path=man, manifest=va.summary(manifest), reused=True)

    rc, out, err = module.run_command([python, "-c", PACKAGES], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="%s cannot list its packages: %s" % (python, err.strip()))
    try:
        manifest = va.build_manifest(venv, json.loads(out))
    except UnsafePath as e:
        module.fail_json(msg="the venv %s changed while it was read: %s; run again when nothing writes to it" % (venv, e))
    try:  # what every target will check, checked here first
        va.check_manifest(manifest, "the manifest of %s" % venv)
    except va.BadManifest as e:
        module.fail_json(msg="%s; targets would refuse it: fix the venv and run again; nothing was built" % e)
    aid = va.manifest_id(manifest)
    tar, man = paths(aid)
    exists = os.path.exists(tar) and os.path.exists(man)
    if module.check_mode:
        module.exit_json(changed=not exists, id=aid, artifact=tar, artifact_bytes=os.path.getsize(tar) if exists else 0,
                         manifest_path=man, manifest=va.summary(manifest), reused=False)
    if not os.path.isdir(adir):
        os.makedirs(adir, 0o755)
    if not exists:
        require_tools(module, "zstd", "tar")
        part = tar + ".part"
        trc, zrc = va.write_tar_zst(venv, part, module.params["compression_level"])
        if trc != 0 or zrc != 0:
            os.unlink(part)
            module.fail_json(msg="building %s failed (tar rc %s, zstd rc %s)" % (tar, trc, zrc))
        os.chmod(part, 0o644)
        os.replace(part, tar)
        atomic_write(man, json.dumps(manifest, sort_keys=True))
    index[fp] = aid
    atomic_write(index_path, json.dumps(index, sort_keys=True))
    removed = prune(adir, module.params["keep"], aid)
    module.exit_json(changed=not exists or bool(removed), id=aid, artifact=tar, artifact_bytes=os.path.getsize(tar),
                     manifest_path=man, manifest=va.summary(manifest), reused=False, pruned=removed)


if __name__ == "__main__":
    main()
