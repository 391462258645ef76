#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cuda_pip_prefix
short_description: A CUDA toolkit from NVIDIA's PyPI component wheels, laid out as a normal CUDA_HOME
version_added: "0.1.0"
description:
  - Installs the given NVIDIA CUDA component wheels (nvcc, crt, nvvm, runtime, cccl, curand, ...)
    with pip into a staging directory, merges their C(nvidia/<component>/) trees into one
    C(bin/ include/ lib/ lib64 nvvm/) tree, checks that C(bin/nvcc --version) reports the requested
    release, and renames it into O(prefix) in one step.
  - A prefix whose recorded package set matches is left alone. A prefix being replaced is kept as
    C(<prefix>.previous), never deleted in place, so a running process keeps its files.
options:
  prefix:
    description: The CUDA_HOME to create, e.g. C(/opt/cuda-13.0).
    type: path
    required: true
  version:
    description: The CUDA release nvcc must report (major.minor).
    type: str
    required: true
  packages:
    description: Pinned requirements (C(name==version)).
    type: list
    elements: str
    required: true
  pip:
    description: The pip to run (a tool venv's, so the system Python is not touched).
    type: path
    required: true
  pip_venv_python:
    description:
      - When O(pip) does not exist, create its venv (the directory above its C(bin/)) with this Python's
        C(venv) module first. Done only when the prefix has to be built, so a host whose toolkit is in
        place needs no tool venv at all.
      - Empty leaves a missing O(pip) a failure.
    type: path
    default: ""
  find_links:
    description: Directory or URL of a wheelhouse; with it, pip does not use an index.
    type: str
    default: ""
  index_url:
    description: Package index (a mirror); empty uses pip's configuration.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reports whether the prefix would be (re)built.
  diff_mode:
    support: none
    description: No diff; the recorded package set is returned.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: CUDA 13.0 from PyPI
  ddtree.fleet.cuda_pip_prefix:
    prefix: /opt/cuda-13.0
    version: "13.0"
    pip: /opt/ddtree/tools/pip/bin/pip
    pip_venv_python: /usr/bin/python3
    packages: [nvidia-cuda-nvcc==13.0.88, nvidia-cuda-crt==13.0.88, nvidia-nvvm==13.0.88,
               nvidia-cuda-runtime==13.0.96, nvidia-cuda-cccl==13.0.85, nvidia-curand==10.4.0.35]
"""

RETURN = r"""
nvcc_version:
  description: Release nvcc reports.
  returned: success
  type: str
  sample: "13.0"
packages:
  description: The package set recorded in the prefix.
  returned: always
  type: list
  elements: str
"""

import json
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils.fs import atomic_write

MARKER = ".ddtree-cuda.json"


def merge_tree(src, dest):
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            s, d = os.path.join(root, name), os.path.join(dest, rel, name)
            if os.path.lexists(d):
                os.unlink(d)
            if os.path.islink(s):
                os.symlink(os.readlink(s), d)
            else:
                shutil.copy2(s, d)


def nvcc_release(module, home):
    rc, out, err = module.run_command([os.path.join(home, "bin", "nvcc"), "--version"])
    m = re.search(r"release (\d+\.\d+)", out)
    return (m.group(1) if m else None), (out + err).strip()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            prefix=dict(type="path", required=True),
            version=dict(type="str", required=True),
            packages=dict(type="list", elements="str", required=True),
            pip=dict(type="path", required=True),
            pip_venv_python=dict(type="path", default=""),
            find_links=dict(type="str", default=""),
            index_url=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    prefix = p["prefix"].rstrip("/")
    marker = os.path.join(prefix, MARKER)
    try:
        with open(marker) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = None
    want = {"version": p["version"], "packages": sorted(p["packages"])}
    if recorded == want and os.access(os.path.join(prefix, "bin", "nvcc"), os.X_OK):
        module.exit_json(changed=False, nvcc_version=p["version"], packages=want["packages"])
    if module.check_mode:
        module.exit_json(changed=True, packages=want["packages"])

    if not os.path.exists(p["pip"]) and p["pip_venv_python"]:
        venv = os.path.dirname(os.path.dirname(p["pip"]))
        rc, out, err = module.run_command([p["pip_venv_python"], "-m", "venv", venv])
        if rc != 0 or not os.path.exists(p["pip"]):
            module.fail_json(msg="cannot create the pip tool venv %s with %s (rc %d): %s; install python3-venv"
                                 % (venv, p["pip_venv_python"], rc, (err or out).strip()[-300:]))

    staging = "%s.staging-%d" % (prefix, os.getpid())
    shutil.rmtree(staging, ignore_errors=True)
    site, tree = os.path.join(staging, "site"), os.path.join(staging, "tree")
    argv = [p["pip"], "install", "--no-deps", "--disable-pip-version-check", "--target", site]
    if p["find_links"]:
        argv += ["--no-index", "--find-links", p["find_links"]]
    elif p["index_url"]:
        argv += ["--index-url", p["index_url"]]
    rc, out, err = module.run_command(argv + p["packages"])
    if rc != 0:
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg="pip could not install CUDA %s components %s from %s: %s; nothing was changed"
                             % (p["version"], ", ".join(p["packages"]), p["find_links"] or p["index_url"] or "pip's index",
                                (err or out).strip().splitlines()[-1] if (err or out).strip() else "rc %d" % rc))
    roots = sorted(os.path.join(site, "nvidia", d) for d in os.listdir(os.path.join(site, "nvidia"))
                   if os.path.isdir(os.path.join(site, "nvidia", d)) and not d.startswith("__"))
    for root in roots:
        merge_tree(root, tree)
    shutil.rmtree(os.path.join(tree, ".metadata"), ignore_errors=True)
    if os.path.isdir(os.path.join(tree, "lib")) and not os.path.lexists(os.path.join(tree, "lib64")):
        os.symlink("lib", os.path.join(tree, "lib64"))
    if not os.path.exists(os.path.join(tree, "bin", "nvcc")):
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg="the packages %s hold no bin/nvcc: add the nvcc wheel for CUDA %s" % (p["packages"], p["version"]))
    got, text = nvcc_release(module, tree)
    if got != p["version"]:
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg="nvcc from %s reports release %s, not %s: pin the component wheels of CUDA %s (%s)"
                             % (", ".join(p["packages"]), got, p["version"], p["version"], text[-200:]))
    atomic_write(os.path.join(tree, MARKER), json.dumps(want, indent=1, sort_keys=True) + "\n")
    previous = None
    if os.path.lexists(prefix):
        previous = prefix + ".previous"
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(prefix, previous)  # kept: a process may still run from it
    os.rename(tree, prefix)
    shutil.rmtree(staging, ignore_errors=True)
    module.exit_json(changed=True, nvcc_version=got, packages=want["packages"], previous=previous)


if __name__ == "__main__":
    main()
