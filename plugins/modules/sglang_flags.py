#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_flags
short_description: The CLI flags and choices an installed SGLang accepts, and a check of a command line against them
version_added: "0.1.0"
description:
  - Reads the installed sglang's argument definitions statically (its annotated config fields
    and hand-written parser options, with the ast module), so it needs neither torch nor a GPU
    and sees what an applied patch series adds, such as a registered C(DDTREE) algorithm.
  - With O(argv), checks every flag, value and choice of a C(sglang.launch_server) command line
    and fails listing each problem (unknown, removed, ambiguous or deprecated flags, wrong
    choices, an algorithm the installed sglang does not have).
  - Only exact option names pass, because argparse's prefix matching turns removed flags such
    as C(--cuda-graph-max-bs) into ambiguous ones; abbreviations are refused.
options:
  venv:
    description: The venv that holds sglang.
    type: path
    required: true
  argv:
    description: Arguments after C(python -m sglang.launch_server) to check.
    type: list
    elements: str
  return_options:
    description: Also return every option with its kind, type and choices (large).
    type: bool
    default: false
  cache_dir:
    description:
      - Where the contract is kept between runs, keyed by a fingerprint of the package's files (path, size,
        mtime), so an unchanged sglang is not parsed again; a patch or reinstall changes the fingerprint.
      - Nothing is written in check mode. Set to an empty value to always read the sources.
    type: path
    default: /var/cache/ddtree-fleet/sglang-flags
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Check the rendered server command line
  ddtree.fleet.sglang_flags:
    venv: /opt/ddtree/venv
    argv: [--model-path, /opt/ddtree/models/kimi, --tp-size, "8", --speculative-algorithm, DFLASH]

- name: What can this sglang do
  ddtree.fleet.sglang_flags:
    venv: /opt/ddtree/venv
  register: flags
"""

RETURN = r"""
sglang_version:
  description: Version of the installed sglang.
  returned: always
  type: str
  sample: 0.5.23
speculative_algorithms:
  description: Names C(--speculative-algorithm) accepts (builtins, aliases and registered plugins).
  returned: always
  type: list
  elements: str
  sample: [DFLASH, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, NEXTN, NGRAM, STANDALONE, UNO]
option_count:
  description: Number of option strings (aliases and --no- forms included).
  returned: always
  type: int
problems:
  description: What is wrong with O(argv), one line each (empty when it passes or no argv was given).
  returned: always
  type: list
  elements: str
options:
  description: Every option string with dest, kind (flag, value, list, optional, custom), type, choices, source.
  returned: when return_options is true
  type: dict
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.fleet.plugins.module_utils import sglang_flags as sf


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            argv=dict(type="list", elements="str"),
            return_options=dict(type="bool", default=False),
            cache_dir=dict(type="path", default="/var/cache/ddtree-fleet/sglang-flags"),
        ),
        supports_check_mode=True,
    )
    venv = module.params["venv"]
    sites = sorted(os.path.dirname(os.path.dirname(p)) for p in
                   glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "sglang", "__init__.py")))
    if not sites:
        module.fail_json(msg="no sglang package in %s (lib/python*/site-packages/sglang): install the serving venv first" % venv)
    try:
        if module.params["cache_dir"]:
            contract, _hit = sf.read_contract_cached(sites[0], module.params["cache_dir"], write=not module.check_mode)
        else:
            contract = sf.read_contract(sites[0])
    except (sf.ContractError, SyntaxError, OSError) as e:
        module.fail_json(msg="cannot read the flag contract of %s: %s" % (venv, e))
    argv = module.params["argv"]
    problems = sf.check_argv(contract, argv) if argv is not None else []
    result = dict(changed=False, sglang_version=contract["version"], speculative_algorithms=contract["speculative_algorithms"],
                  option_count=len(contract["options"]), problems=problems)
    if module.params["return_options"]:
        result["options"] = contract["options"]
    if problems:
        module.fail_json(msg="the command line does not fit sglang %s in %s: %s"
                             % (contract["version"], venv, " | ".join(problems)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
