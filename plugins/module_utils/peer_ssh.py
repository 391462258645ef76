# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host-to-host ssh, as the modules that pull from another fleet host run it (venv_install, warm_cache): the
service user's key from the base role's trust, never a password prompt. Documented by the doc fragment
ddtree.fleet.peer_ssh."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

ARGUMENT_SPEC = dict(
    ssh_user=dict(type="str", default="ddtree"),
    ssh_identity=dict(type="path", default="/var/lib/ddtree/.ssh/id_ed25519"),
    ssh_options=dict(type="list", elements="str", default=[]),
)


def ssh_argv(params, host, remote, connect_timeout=None):
    """ssh argv that runs `remote` (a list) on host as params' ssh_user with its ssh_identity and ssh_options."""
    timeout = ["-o", "ConnectTimeout=%d" % connect_timeout] if connect_timeout else []
    return (["ssh", "-o", "BatchMode=yes"] + timeout + ["-i", params["ssh_identity"], "-l", params["ssh_user"]]
            + list(params["ssh_options"]) + [host, "--"] + list(remote))
