# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One way to run a command whose output is input of unbounded size: stdout read up to a byte limit, the process
killed past it or at a deadline, stderr kept to its last 64 KiB. Used where run_command does not fit - it has
neither a byte cap nor a deadline: a peer's manifest (venv_artifact) and the kernel log (xid)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import threading

CHUNK = 1 << 20
ERR_KEEP = 65536


def run(argv, limit, timeout, env=None):
    """{rc, out, over, timed_out, err} of argv: `out` holds at most `limit` bytes of stdout; `over` says stdout went
    past them (the process was then killed); `timed_out`, that it was killed at `timeout` seconds; rc is the exit
    status (negative when killed); err is the end of stderr as text."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                            env=env)
    err, fired = [], []

    def drain():
        while True:
            block = proc.stderr.read(ERR_KEEP)
            if not block:
                break
            err.append(block)
            del err[:-2]

    def kill():
        fired.append(True)
        proc.kill()

    reader = threading.Thread(target=drain)
    reader.daemon = True
    reader.start()
    timer = threading.Timer(timeout, kill)
    timer.start()
    out, size = [], 0
    try:
        while size <= limit:
            block = proc.stdout.read(min(CHUNK, limit + 1 - size))
            if not block:
                break
            out.append(block)
            size += len(block)
        if size > limit:
            proc.kill()
    finally:
        proc.stdout.close()
        rc = proc.wait()
        timer.cancel()
        reader.join(10)
    return {"rc": rc, "out": b"".join(out)[:limit], "over": size > limit, "timed_out": bool(fired) and size <= limit,
            "err": b"".join(err).decode("utf-8", "replace")[-ERR_KEEP:]}
