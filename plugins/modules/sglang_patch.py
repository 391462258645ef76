#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_patch
short_description: Apply or revert a patch series on the SGLang installed in a venv, all or nothing
version_added: "0.1.0"
description:
  - Checks that the installed sglang is the series' version and that every file the series
    touches hashes to the series' C(before) or C(after) (or to what the last apply recorded);
    anything else fails naming the file and both hashes, and nothing is written.
  - Computes every patched file in memory and checks it against the series' C(after) hash
    before writing any; then writes each file atomically, byte-compiles the patched modules
    with the venv's Python and records a stamp (series, patches, hashes) in the venv. The
    originals are kept beside the stamp, so O(state=absent) restores them exactly, even
    without the series.
  - Applying a different series (or a different selection of its patches) first goes back to
    the originals, so the result is always the originals plus exactly the requested patches.
options:
  venv:
    description: The venv whose sglang is patched (a link to it works; the real path is patched).
    type: path
    required: true
  state:
    description: C(present) applies the series, C(absent) restores the originals.
    type: str
    choices: [present, absent]
    default: present
  series:
    description:
      - The series, as the role reads it from C(series.yml) with each patch's diff text in C(diff).
      - Needed for O(state=present); for O(state=absent) only when no stamp exists.
    type: dict
    default: {}
  python:
    description: Interpreter that byte-compiles the patched modules (default C(<venv>/bin/python)).
    type: path
attributes:
  check_mode:
    support: full
    description: Computes and checks everything, reports what would change, writes nothing.
  diff_mode:
    support: full
    description: Shows the patches in effect before and after.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Apply the shipped series
  ddtree.fleet.sglang_patch:
    venv: /opt/ddtree/venv
    series: "{{ lookup('ansible.builtin.file', 'series.yml') | from_yaml }}"

- name: Back to the wheel as released
  ddtree.fleet.sglang_patch:
    venv: /opt/ddtree/venv
    state: absent
"""

RETURN = r"""
sglang_version:
  description: Version of the installed sglang.
  returned: always
  type: str
  sample: 0.5.23
site_packages:
  description: The site-packages directory that holds sglang.
  returned: always
  type: str
applied:
  description: Patches in effect after the run, in order.
  returned: always
  type: list
  elements: str
provides:
  description:
    - The profile workarounds the patches in effect provide, each with the environment that switches it
      on (from the series' C(provides)); also written to the stamp.
  returned: always
  type: dict
  sample: {skip_vision_warmup: {SGLANG_SKIP_VLM_WARMUP: "1"}}
files:
  description: sha256 of every file the series (or the previous stamp) touches, after the run.
  returned: always
  type: dict
stamp:
  description: Path of the stamp in the venv.
  returned: always
  type: str
"""

import glob
import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_patch as sp
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import UnsafePath, atomic_write, inside, root_only

STAMP = sp.STAMP
ORIG = ".ddtree/sglang-patch-orig"


def installed_sglang(venv):
    """(site_packages, version) of the sglang in the venv, or (None, None)."""
    for dist in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "sglang-*.dist-info"))):
        try:
            with open(os.path.join(dist, "METADATA")) as f:
                for line in f:
                    if line.startswith("Version:"):
                        return os.path.dirname(dist), line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None, None


def check_stamp(stamp):
    """The stamp when its fields have the types the module uses; else ValueError naming the field."""
    if not isinstance(stamp, dict):
        raise ValueError("it is not a JSON object")
    files = stamp.get("files", {})
    if not isinstance(files, dict):
        raise ValueError("its files field is not an object")
    for q, info in files.items():
        if not isinstance(info, dict) or not all(isinstance(info.get(k), str) for k in ("before", "after")):
            raise ValueError("its entry for %r is not {before, after}" % q)
    if not isinstance(stamp.get("patches", []), list):
        raise ValueError("its patches field is not a list")
    return stamp


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except (IOError, OSError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            series=dict(type="dict", default={}),
            python=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    venv = os.path.realpath(p["venv"])
    site, version = installed_sglang(venv)
    if site is None:
        module.fail_json(msg="no sglang installed in %s (no sglang-*.dist-info under lib/python*/site-packages): "
                             "install the serving venv first (venv_stream role)" % p["venv"])
    stamp_path, orig_dir = os.path.join(venv, STAMP), os.path.join(venv, ORIG)
    try:  # root reads, writes and replaces files here: no one else may be able to plant a link on the way
        root_only(site, "site-packages of the venv")
        root_only(os.path.dirname(stamp_path), "the venv's stamp directory")
    except UnsafePath as e:
        module.fail_json(msg="%s; nothing was changed" % e)
    stamp = None
    if os.path.lexists(stamp_path):
        try:
            with open(stamp_path) as f:
                stamp = check_stamp(json.load(f))
        except (OSError, ValueError) as e:
            module.fail_json(msg="the stamp %s cannot be used: %s; reinstall the venv (venv_stream), then run again; "
                                 "nothing was changed" % (stamp_path, e))
    series = p["series"] or {}
    patches = series.get("patches") or []
    present = p["state"] == "present"
    if present and not series:
        module.fail_json(msg="state=present needs the series")
    if present and str(series.get("sglang_version")) != version:
        module.fail_json(msg="%s has sglang %s but series '%s' is for sglang %s: choose the series for %s "
                             "(sglang_patch_series_dir) or install sglang %s in the venv"
                             % (p["venv"], version, series.get("name"), series.get("sglang_version"), version,
                                series.get("sglang_version")), sglang_version=version, site_packages=site)
    use_series = present or stamp is None
    selected = patches if use_series else []
    try:
        diffs = dict((x["name"], sp.parse_diff(x["diff"])) for x in selected)
        for x in selected:
            listed = set(f["path"] for f in x["files"])
            if listed != set(diffs[x["name"]]):
                raise sp.PatchError("patch %s lists files %s but its diff changes %s"
                                    % (x["name"], sorted(listed), sorted(diffs[x["name"]])))
        paths = set(f["path"] for x in selected for f in x["files"]) | set((stamp or {}).get("files", {}))
        for q in sorted(paths):  # names from the series and the stamp stay inside site-packages
            try:
                inside(site, q, "a file the patch series names")
                root_only(os.path.dirname(os.path.join(site, q)), "the directory of %s" % q)
                root_only(os.path.dirname(os.path.join(orig_dir, q)), "the directory of the saved original of %s" % q)
            except UnsafePath as e:
                raise sp.PatchError("%s; fix the series (sglang_patch_series_dir) - nothing was changed" % e)
        current = dict((q, read(os.path.join(site, q))) for q in paths)
        backups = dict((q, read(os.path.join(orig_dir, q))) for q in (stamp or {}).get("files", {}))
        plan = sp.plan(current, stamp, backups, selected, diffs, present=use_series)
    except sp.PatchError as e:
        module.fail_json(msg="sglang %s in %s: %s; nothing was changed" % (version, p["venv"], e),
                         sglang_version=version, site_packages=site)

    if present:
        want = {q: (orig, new) for q, (orig, new) in plan.items() if orig != new}
        provides = {}
        for x in patches:  # workaround id -> the environment that switches it on
            provides.update(dict((k, dict((str(n), str(v)) for n, v in (env or {}).items()))
                                 for k, env in (x.get("provides") or {}).items()))
        new_stamp = {"series": series.get("name"), "sglang_version": version,
                     "patches": [x["name"] for x in patches], "provides": provides,
                     "files": dict((q, {"before": sp.sha256(o), "after": sp.sha256(n)}) for q, (o, n) in sorted(want.items()))}
    else:
        want, new_stamp = {}, None
    targets = dict((q, want[q][1] if q in want else orig) for q, (orig, _n) in plan.items())
    changed_files = sorted(q for q, data in targets.items() if data != current[q])
    changed = bool(changed_files) or new_stamp != stamp
    applied = new_stamp["patches"] if new_stamp else []
    result = dict(changed=changed, sglang_version=version, site_packages=site, applied=applied, stamp=stamp_path,
                  provides=new_stamp["provides"] if new_stamp else {},
                  files=dict((q, sp.sha256(d)) for q, d in targets.items()), changed_files=changed_files)
    if module._diff:
        result["diff"] = {"before": "patches: %s\n" % ", ".join((stamp or {}).get("patches", [])),
                          "after": "patches: %s\n" % ", ".join(applied),
                          "before_header": stamp_path, "after_header": stamp_path}
    if not changed or module.check_mode:
        module.exit_json(**result)

    # write: originals first, then the files, then compile, then the stamp (the commit point)
    if new_stamp:
        for q, (orig, _n) in want.items():
            dest = os.path.join(orig_dir, q)
            if read(dest) != orig:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                atomic_write(dest, orig)
    written = []
    for q in changed_files:
        dest = os.path.join(site, q)
        mode = os.stat(dest).st_mode & 0o7777
        atomic_write(dest, targets[q], mode)
        written.append(q)
    py = p["python"] or os.path.join(venv, "bin", "python")
    compile_these = [os.path.join(site, q) for q in written if q.endswith(".py")]
    if compile_these:
        rc, _out, err = module.run_command([py, "-m", "py_compile"] + compile_these)
        if rc != 0:
            for q in written:
                atomic_write(os.path.join(site, q), current[q], os.stat(os.path.join(site, q)).st_mode & 0o7777)
            module.fail_json(msg="patched modules do not compile with %s: %s; the files were put back" % (py, err.strip()))
    if new_stamp:
        os.makedirs(os.path.dirname(stamp_path), exist_ok=True)
        atomic_write(stamp_path, json.dumps(new_stamp, indent=1, sort_keys=True) + "\n")
    else:
        if os.path.exists(stamp_path):
            os.unlink(stamp_path)
        if os.path.isdir(orig_dir):
            shutil.rmtree(orig_dir)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
