#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cuda_probe
short_description: Prove a CUDA toolkit compiles for the host's GPUs and the JITs find their headers
version_added: "0.1.0"
description:
  - Compiles a tiny kernel with C(nvcc -arch=sm_XX) for every compute capability given (compile only,
    no GPU needed), and a tiny C file that includes C(Python.h) (Triton and Inductor JIT) and
    C(curand.h) (FlashInfer JIT) with the host's C compiler, in a temporary directory.
  - Reports what worked and the compiler's message for what did not; the role decides what fails.
options:
  cuda_home:
    description: The toolkit (C(bin/nvcc), C(include/)).
    type: path
    required: true
  compute_caps:
    description: Compute capabilities to compile for, e.g. C(10.3).
    type: list
    elements: str
    required: true
  python:
    description: Interpreter whose C(Python.h) the JITs use (the serving venv's base interpreter).
    type: path
    default: /usr/bin/python3
  cc:
    description: C compiler.
    type: str
    default: gcc
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Compile probe
  ddtree.fleet.cuda_probe:
    cuda_home: /opt/cuda-13.0
    compute_caps: ["10.3", "12.0"]
  register: probe
"""

RETURN = r"""
nvcc_version:
  description: Release nvcc reports.
  returned: always
  type: str
archs_ok:
  description: C(sm_XX) names nvcc compiled for.
  returned: always
  type: list
  elements: str
archs_failed:
  description: C(sm_XX) -> the compiler's last lines.
  returned: always
  type: dict
headers_ok:
  description: Whether the C file with Python.h and curand.h compiled.
  returned: always
  type: bool
headers_error:
  description: The compiler's message when it did not.
  returned: always
  type: str
"""

import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

KERNEL = "__global__ void ddtree_probe(float *x) { x[threadIdx.x] *= 2.0f; }\n"
HEADERS = "#include <Python.h>\n#include <curand.h>\nint ddtree_probe(void) { return (int)CURAND_RNG_PSEUDO_DEFAULT + (int)PY_MAJOR_VERSION; }\n"


def tail(text, n=3):
    return " | ".join(text.strip().splitlines()[-n:])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cuda_home=dict(type="path", required=True),
            compute_caps=dict(type="list", elements="str", required=True),
            python=dict(type="path", default="/usr/bin/python3"),
            cc=dict(type="str", default="gcc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    nvcc = os.path.join(p["cuda_home"], "bin", "nvcc")
    result = dict(changed=False, nvcc_version=None, archs_ok=[], archs_failed={}, headers_ok=False, headers_error="")
    if not os.access(nvcc, os.X_OK):
        module.fail_json(msg="no nvcc at %s: a CUDA toolkit comes from the cuda_toolkit role (cuda_toolkit_home for one "
                             "installed elsewhere)" % nvcc, **result)
    rc, out, err = module.run_command([nvcc, "--version"])
    m = re.search(r"release (\d+\.\d+)", out)
    result["nvcc_version"] = m.group(1) if m else None
    work = tempfile.mkdtemp(prefix="ddtree-cuda-probe-")
    try:
        with open(os.path.join(work, "probe.cu"), "w") as f:
            f.write(KERNEL)
        with open(os.path.join(work, "probe.c"), "w") as f:
            f.write(HEADERS)
        for cc in sorted(set(p["compute_caps"])):
            arch = "sm_" + cc.replace(".", "")
            rc, out, err = module.run_command([nvcc, "-arch=" + arch, "-c", os.path.join(work, "probe.cu"),
                                               "-o", os.path.join(work, arch + ".o")], cwd=work)
            if rc == 0:
                result["archs_ok"].append(arch)
            else:
                result["archs_failed"][arch] = tail(err or out)
        rc, inc, err = module.run_command([p["python"], "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
        if rc != 0:
            result["headers_error"] = "%s cannot report its include directory: %s" % (p["python"], tail(err))
        else:
            rc, out, err = module.run_command([p["cc"], "-c", os.path.join(work, "probe.c"), "-o", os.path.join(work, "probe.o"),
                                               "-I", inc.strip(), "-I", os.path.join(p["cuda_home"], "include")], cwd=work)
            result["headers_ok"] = rc == 0
            result["headers_error"] = "" if rc == 0 else tail(err or out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
