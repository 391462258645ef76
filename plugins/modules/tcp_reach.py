#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tcp_reach
short_description: Whether this host reaches a TCP port of another host, listening or not
version_added: "0.2.0"
description:
  - Connects to I(host):I(port). A connection, or a refusal (the host answered, nothing listens on the port yet), means
    the port is reachable; a timeout, no route or an unknown name means it is not, and the module fails naming the
    address and what to check.
  - A serving group's members run it against rank 0's init address before anything changes, when rank 0's server may
    not run yet (C(ansible.builtin.wait_for) cannot tell a closed port from a filtered one). Reads only.
options:
  host:
    description: Name or address to reach.
    type: str
    required: true
  port:
    description: TCP port.
    type: int
    required: true
  timeout:
    description: Seconds to wait for an answer.
    type: float
    default: 5
  what:
    description: What the port is, for the failure message.
    type: str
    default: the port
extends_documentation_fragment:
  - ddtree.fleet.attributes.read_only
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Reach rank 0's init address
  ddtree.fleet.tcp_reach:
    host: 10.0.0.1
    port: 20000
    what: rank 0's init address
"""

RETURN = r"""
state:
  description: C(open) (something listens) or C(closed) (the host refused the connection).
  returned: success
  type: str
  sample: closed
address:
  description: The address the name resolved to and that answered.
  returned: success
  type: str
"""

import errno
import socket

from ansible.module_utils.basic import AnsibleModule


def reach(host, port, timeout):
    """('open' | 'closed', address) or raises OSError with why it is not reachable."""
    last = None
    for family, kind, proto, _name, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        s = socket.socket(family, kind, proto)
        s.settimeout(timeout)
        try:
            s.connect(sockaddr)
            return "open", sockaddr[0]
        except ConnectionRefusedError:
            return "closed", sockaddr[0]
        except OSError as e:
            last = e
        finally:
            s.close()
    raise last or OSError(errno.EHOSTUNREACH, "no address")


def main():
    module = AnsibleModule(argument_spec=dict(host=dict(type="str", required=True), port=dict(type="int", required=True),
                                              timeout=dict(type="float", default=5), what=dict(type="str", default="the port")),
                           supports_check_mode=True)
    p = module.params
    try:
        state, addr = reach(p["host"], p["port"], p["timeout"])
    except socket.gaierror as e:
        module.fail_json(msg="%s (%s:%d) cannot be reached: the name does not resolve here (%s); make it resolve on every "
                             "host or give the host an address (ddtree_address)" % (p["what"], p["host"], p["port"], e))
    except OSError as e:
        why = "timed out after %gs" % p["timeout"] if isinstance(e, socket.timeout) else (e.strerror or str(e))
        module.fail_json(msg="%s (%s:%d) cannot be reached: %s; open TCP port %d between the hosts (firewall, security "
                             "group) and check the address (ddtree_address)" % (p["what"], p["host"], p["port"], why, p["port"]))
    module.exit_json(changed=False, state=state, address=addr)


if __name__ == "__main__":
    main()
