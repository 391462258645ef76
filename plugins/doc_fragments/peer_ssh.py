# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The host-to-host ssh options (plugins/module_utils/peer_ssh.py)."""

    DOCUMENTATION = r"""
options:
  ssh_user:
    description:
      - User on the other host (the base role's host-to-host trust).
      - A plain user name (letters, digits, C(_), C(.), C(-); not beginning with C(-)); anything else is refused.
    type: str
    default: ddtree
  ssh_identity:
    description:
      - Private key of the local user that connects.
      - An absolute path without whitespace or control characters.
    type: path
    default: /var/lib/ddtree/.ssh/id_ed25519
  ssh_options:
    description:
      - Extra ssh options, C(-o Key=Value) pairs as separate list items (C(-o), C(Key=Value)) or C(-oKey=Value) items.
      - Key must be one of AddressFamily, BatchMode, CheckHostIP, Ciphers, Compression, ConnectTimeout,
        ConnectionAttempts, GlobalKnownHostsFile, HashKnownHosts, HostKeyAlgorithms, IdentitiesOnly, IPQoS,
        KexAlgorithms, LogLevel, MACs, NumberOfPasswordPrompts, Port, PubkeyAcceptedAlgorithms, RekeyLimit,
        ServerAliveCountMax, ServerAliveInterval, StrictHostKeyChecking, TCPKeepAlive, UpdateHostKeys,
        UserKnownHostsFile, VerifyHostKeyDNS; the value has no whitespace, quotes or shell characters. Options
        that run commands, load code, forward or redirect the connection (ProxyCommand, LocalCommand, Match,
        ProxyJump, ControlPath, ...) are refused.
      - The other host's address (a hostname, an IPv4 address or an IPv6 literal; never beginning with C(-))
        is passed after C(--), and every argument of the remote command is quoted for the remote shell.
    type: list
    elements: str
    default: []
"""
