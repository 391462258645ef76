# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host-to-host ssh, as the modules that pull from another fleet host run it (venv_install, warm_cache): the
service user's key from the base role's trust, never a password prompt. Documented by the doc fragment
ddtree.fleet.peer_ssh.

Every value that reaches ssh comes from the inventory and is data, never an option or shell:

- the destination (a hostname, an IPv4 or an IPv6 literal) follows C(--), so nothing in it is parsed as an
  option, and ssh parses no option after it;
- ssh_user goes to C(-l), ssh_identity to C(-i) (an absolute path); neither may begin with C(-) nor hold
  whitespace or control characters;
- ssh_options are C(-o Key=Value) pairs (two items, or one C(-oKey=Value)) whose Key is one of SAFE_OPTIONS:
  keys that run commands, load code, forward, redirect the connection or change the user or key
  (ProxyCommand, LocalCommand, PermitLocalCommand, KnownHostsCommand, Match, Include, ProxyJump, Hostname,
  ControlPath, PKCS11Provider, ...) are refused;
- the remote command is one string of shlex.quote'd arguments: the remote side runs it through the
  user's shell as one string, so a C(;) in a path stays part of the path.

A value that breaks a rule raises BadValue (a ValueError) whose message names the parameter, the value and
the fix, before anything runs. Callers turn it into their own failure (venv_install: fail_json before
anything changes; warm_cache: a cold start with the reason).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re
from shlex import quote

ARGUMENT_SPEC = dict(
    ssh_user=dict(type="str", default="ddtree"),
    ssh_identity=dict(type="path", default="/var/lib/ddtree/.ssh/id_ed25519"),
    ssh_options=dict(type="list", elements="str", default=[]),
)

# ssh_config keys an inventory may set: timeouts, keep-alives, algorithms, host key checking, port. Nothing
# that runs a command, loads a library, forwards, multiplexes, or changes the destination, user or key.
SAFE_OPTIONS = (
    "AddressFamily", "BatchMode", "CheckHostIP", "Ciphers", "Compression", "ConnectTimeout", "ConnectionAttempts",
    "GlobalKnownHostsFile", "HashKnownHosts", "HostKeyAlgorithms", "IdentitiesOnly", "IPQoS", "KexAlgorithms",
    "LogLevel", "MACs", "NumberOfPasswordPrompts", "Port", "PubkeyAcceptedAlgorithms", "RekeyLimit",
    "ServerAliveCountMax", "ServerAliveInterval", "StrictHostKeyChecking", "TCPKeepAlive", "UpdateHostKeys",
    "UserKnownHostsFile", "VerifyHostKeyDNS",
)
_SAFE = dict((k.lower(), k) for k in SAFE_OPTIONS)
_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_VALUE = re.compile(r"^[A-Za-z0-9@._,:/+~%^=-]+$")


class BadValue(ValueError):
    """An inventory value that ssh would take as an option or shell: the message names the parameter, the
    value and the fix."""


def _bad(param, value, why, fix):
    return BadValue("%s %r %s: %s" % (param, value, why, fix))


def _plain(param, value, fix):
    """value as a str that cannot be an option: not empty, no leading '-', no whitespace or control characters."""
    if not isinstance(value, str) or not value:
        raise _bad(param, value, "is empty or not a string", fix)
    if value.startswith("-"):
        raise _bad(param, value, "begins with '-' (ssh would read it as an option)", fix)
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise _bad(param, value, "holds whitespace or a control character", fix)
    return value


def check_host(host, param="ssh_host"):
    """host when it is a hostname, an IPv4 address or an IPv6 literal (no brackets, no user@, no port)."""
    fix = "set it to the other host's name or IP address (ansible_host / the inventory name), nothing else"
    _plain(param, host, fix)
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise _bad(param, host, "is not a hostname, an IPv4 address or an IPv6 literal", fix)
    return host


def check_user(user, param="ssh_user"):
    fix = "set it to a plain user name (the base role's service user, ddtree by default)"
    _plain(param, user, fix)
    if not _USER.match(user):
        raise _bad(param, user, "is not a user name (letters, digits, '_', '.', '-'; at most 32)", fix)
    return user


def check_identity(path, param="ssh_identity"):
    fix = "set it to the absolute path of the private key (the base role's default is /var/lib/ddtree/.ssh/id_ed25519)"
    _plain(param, path, fix)
    if not path.startswith("/"):
        raise _bad(param, path, "is not an absolute path", fix)
    return path


def check_options(options, param="ssh_options"):
    """['-o', 'Key=Value', ...] from ssh_options items: '-o', 'Key=Value' pairs or '-oKey=Value' items, each Key one
    of SAFE_OPTIONS."""
    fix = ("give each option as the two items '-o' and 'Key=Value' (or one '-oKey=Value'), Key one of %s"
           % ", ".join(SAFE_OPTIONS))
    if not isinstance(options, (list, tuple)):
        raise _bad(param, options, "is not a list", fix)
    out, items = [], list(options)
    i = 0
    while i < len(items):
        item = items[i]
        if not isinstance(item, str):
            raise _bad(param, item, "holds an item that is not a string", fix)
        if item == "-o":
            if i + 1 >= len(items):
                raise _bad(param, options, "ends with '-o' and no Key=Value after it", fix)
            pair, i = items[i + 1], i + 2
        elif item.startswith("-o"):
            pair, i = item[2:], i + 1
        else:
            raise _bad(param, item, "is not '-o' or '-oKey=Value' (only -o options are taken)", fix)
        if not isinstance(pair, str) or "=" not in pair:
            raise _bad(param, pair, "is not Key=Value", fix)
        key, value = pair.split("=", 1)
        if not _KEY.match(key) or key.lower() not in _SAFE:
            raise _bad(param, pair, "sets %r, which is not an option the collection passes to ssh" % key, fix)
        if not _VALUE.match(value):
            raise _bad(param, pair, "has an empty value or one with whitespace, quotes or shell characters", fix)
        out += ["-o", "%s=%s" % (_SAFE[key.lower()], value)]
    return out


def remote_command(remote):
    """The remote argv as the one string ssh sends, each argument quoted for the remote user's shell."""
    if not remote:
        raise BadValue("the remote command is empty")
    for arg in remote:
        if not isinstance(arg, str) or "\0" in arg:
            raise BadValue("remote argument %r is not a string or holds a NUL byte" % (arg,))
    return " ".join(quote(arg) for arg in remote)


def check(params, host, param="ssh_host"):
    """Validate everything ssh_argv would use (raises BadValue); nothing runs."""
    check_host(host, param)
    check_user(params["ssh_user"])
    check_identity(params["ssh_identity"])
    check_options(params["ssh_options"] or [])


def ssh_argv(params, host, remote, connect_timeout=None, param="ssh_host"):
    """ssh argv that runs `remote` (a list) on host as params' ssh_user with its ssh_identity and ssh_options.
    Raises BadValue (naming `param` for the host) when a value could become an option or shell."""
    check_host(host, param)
    timeout = ["-o", "ConnectTimeout=%d" % int(connect_timeout)] if connect_timeout else []
    return (["ssh", "-o", "BatchMode=yes"] + timeout + check_options(params["ssh_options"] or [])
            + ["-i", check_identity(params["ssh_identity"]), "-l", check_user(params["ssh_user"]),
               "--", host, remote_command(list(remote))])
