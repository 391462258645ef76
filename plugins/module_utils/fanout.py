# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fan-out of host-to-host transfers (docs/scale.md): a host that has verified an artefact serves the next
ones, so its first holders send about one copy whatever the fleet's size, and no holder has more pullers than
its sshd accepts at once.

- plan(): a tree over the holders and the hosts that need the artefact, filled level by level: each first
  holder serves at most `root_fanout` hosts, every other host at most `fanout`. A host's chain is its parent,
  the parent's parent, ... up to a first holder, then the other first holders.
- wait_ready(): before pulling from a parent that is still fetching, wait while it makes progress; a parent
  that has nothing and fetches nothing, or whose transfer stalls, is passed over for the next in the chain.
- retry(): a connection that the other side's sshd resets or refuses at the start (MaxStartups, a restart)
  is tried again with exponential backoff and jitter; then the next holder serves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import time

ROOT_FANOUT = 2
FANOUT = 4

# the options of a module that waits for a parent (documented by the doc fragment ddtree.fleet.fanout)
ARGUMENT_SPEC = dict(
    wait_grace=dict(type="int", default=60),
    wait_stall=dict(type="int", default=120),
)

# what ssh says when the other side drops a connection before it is authenticated: sshd's MaxStartups
# (10:30:100 by default) resets the excess, a restarting sshd refuses; all are worth another try later
# (ssh names the peer either way: "Connection reset by peer", "Connection reset by 10.0.0.5 port 22")
TRANSIENT = ("kex_exchange_identification", "Connection reset by ", "ssh_exchange_identification",
             "Connection closed by ", "banner exchange", "Connection refused",
             "Connection timed out", "Broken pipe")

# the readiness probe: run on the holder as argv (the script is ours, the paths its arguments): says
# 'ready' when the finished file is readable, 'progress N' while the incoming file grows, else 'absent'
PROBE = ('if [ -r "$1" ]; then echo ready; elif [ -e "$2" ]; then echo "progress $(stat -c %s "$2")"; '
         'else echo absent; fi')


def plan(holders, needing, root_fanout=ROOT_FANOUT, fanout=FANOUT):
    """{host: parent} for every host of `needing` (in order) that is not a holder: a tree filled level by
    level, each of the holders with room for root_fanout, every other host for fanout."""
    holders = list(dict.fromkeys(holders))
    queue = [[h, max(int(root_fanout), 1)] for h in holders]
    parent, i = {}, 0
    for host in dict.fromkeys(needing):
        if host in holders:
            continue
        while queue[i][1] <= 0:
            i += 1
        parent[host] = queue[i][0]
        queue[i][1] -= 1
        queue.append([host, max(int(fanout), 1)])
    return parent


def chain(me, holders, needing, root_fanout=ROOT_FANOUT, fanout=FANOUT):
    """The hosts `me` pulls from, nearest first: its parent in plan()'s tree, that one's parent, ... up to a
    holder, then the other holders. [] when me is a holder itself or there are none."""
    holders = list(dict.fromkeys(holders))
    if not holders or me in holders:
        return []
    parents = plan(holders, list(needing) + [me], root_fanout, fanout)
    out, h = [], parents.get(me)
    while h is not None and h not in out:
        out.append(h)
        h = parents.get(h)
    return out + [h for h in holders if h not in out]


def transient(message):
    return any(t in (message or "") for t in TRANSIENT)


def retry(call, tries=5, base=1.0, cap=20.0, sleep=time.sleep, jitter=random.random):
    """call() until it does not raise a transient error (one whose text transient() knows): at most tries
    times, waiting base * 2**n seconds (at most cap) times a jitter of 0.5..1.5 between them. Returns
    (result, attempts); the last error is raised."""
    n = 0
    while True:
        n += 1
        try:
            return call(), n
        except Exception as exc:  # pylint: disable=broad-except
            if n >= tries or not transient(str(exc)):
                raise
            sleep(min(cap, base * 2 ** (n - 1)) * (0.5 + jitter()))


def wait_ready(probe, timeout=1800, grace=60, stall=120, interval=2.0, clock=time.time, sleep=time.sleep, report=None):
    """Wait for a holder: probe() returns ('ready', None), ('progress', bytes) or ('absent', None), or raises.
    True when ready; (False, why) once it is absent past grace seconds, its bytes stop growing for stall
    seconds, or timeout passes. report(state, bytes) is told every answer (progress lines)."""
    start = last_change = clock()
    last = None
    while True:
        state, got = probe()
        if report:
            report(state, got)
        if state == "ready":
            return True, ""
        now = clock()
        if state == "progress":
            if got != last:
                last, last_change = got, now
            elif now - last_change > stall:
                return False, "its own transfer stalled at %s bytes for %d s" % (got, stall)
        elif now - start > grace:
            return False, "it has no copy and fetches none"
        if now - start > timeout:
            return False, "it was not ready within %d s" % timeout
        sleep(interval)
