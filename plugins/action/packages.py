# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree.fleet.packages: dpkg's view first, apt only for what is missing (documentation: plugins/modules/packages.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _v, args = self.validate_argument_spec(argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "tools": {"type": "dict", "default": {}},
            "update_cache": {"type": "bool", "default": False},
        })
        try:
            query = self._execute_module(module_name="ddtree.fleet.packages", task_vars=task_vars,
                                         module_args=dict(names=args["names"], tools=args["tools"]))
            if query.get("failed"):
                result.update(query)
                return result
            missing = query["missing"]
            result.update(changed=False, missing=missing, present=query["present"])
            if missing:
                apt = self._execute_module(module_name="ansible.legacy.apt", task_vars=task_vars,
                                           module_args=dict(name=missing, state="present", update_cache=args["update_cache"]))
                for key in ("failed", "msg", "stderr", "stdout", "rc"):
                    if key in apt:
                        result[key] = apt[key]
                result["changed"] = bool(apt.get("changed"))
                if apt.get("failed"):
                    host = (task_vars or {}).get("inventory_hostname", "?")
                    result["msg"] = "%s: apt could not install %s: %s (check the host's apt sources, or install them yourself)" % (
                        host, ", ".join(missing), apt.get("msg", ""))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
