"""tcp_reach for real: a listening port is open, a port nobody listens on is closed but reachable (rank 0
before its server starts), a port that never answers (dropped SYNs) and a name that does not resolve fail,
naming the address and the fix. A firewall that rejects (RST) instead of dropping looks closed, that is
reachable: the group's gate then finds it (the members never join)."""
import socket

from helpers import free_port


def test_open_and_closed_ports_are_reachable(run_module):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        r = run_module("tcp_reach", host="127.0.0.1", port=s.getsockname()[1])
        assert r["state"] == "open" and r["address"] == "127.0.0.1" and not r["changed"]
    r = run_module("tcp_reach", host="127.0.0.1", port=free_port(), check=True)
    assert r["state"] == "closed" and not r.get("failed")


def silent_port():
    """A port whose SYNs go unanswered, like a firewall that drops: a listener with a full backlog that never
    accepts (the clients that fill it are returned to be kept open)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    held = [lst]
    for _attempt in range(8):
        c = socket.socket()
        c.settimeout(0.5)
        held.append(c)
        try:
            c.connect(lst.getsockname())
        except OSError:
            return lst.getsockname()[1], held
    raise AssertionError("the backlog never filled")


def test_an_address_that_never_answers_or_a_name_that_does_not_resolve_fail_with_the_fix(run_module):
    port, held = silent_port()
    try:
        r = run_module("tcp_reach", host="127.0.0.1", port=port, timeout=1, what="rank 0's init address")
    finally:
        for s in held:
            s.close()
    assert r["failed"] and r["msg"].startswith("rank 0's init address (127.0.0.1:%d) cannot be reached: timed out" % port)
    assert "open TCP port %d between the hosts" % port in r["msg"]
    r = run_module("tcp_reach", host="rank0.does-not-exist.invalid", port=20000, timeout=1)
    assert r["failed"] and "does not resolve" in r["msg"] and "ddtree_address" in r["msg"]
