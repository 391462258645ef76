"""Fan-out of host-to-host transfers: the tree's shape at fleet sizes (egress of the first holders bounded
whatever the size, every other host's pullers bounded, depth logarithmic), the chains, the retry on sshd
resets and the wait for a parent."""
import math

import pytest

from ansible_collections.ddtree.fleet.plugins.module_utils import fanout


@pytest.mark.parametrize("n", [1, 5, 17, 33, 63, 500])
def test_the_tree_bounds_egress_and_depth(n):
    hosts = ["h%03d" % i for i in range(n)]
    parent = fanout.plan(["src"], hosts)
    assert sorted(parent) == hosts
    served = {}
    for p in parent.values():
        served[p] = served.get(p, 0) + 1
    assert served.get("src", 0) <= fanout.ROOT_FANOUT  # the source sends at most two copies at any size
    assert max(served.values()) <= fanout.FANOUT
    depth = max(len(fanout.chain(h, ["src"], hosts)) for h in hosts)
    assert depth <= 2 + math.ceil(math.log(max(n, 2), fanout.FANOUT)), depth
    for h in hosts:  # every chain ends at the source and never repeats
        c = fanout.chain(h, ["src"], hosts)
        assert c[-1] == "src" and len(set(c)) == len(c) and h not in c


def test_chains_climb_to_every_holder_and_a_holder_pulls_nothing():
    hosts = ["a", "b", "c", "d", "e", "f", "g"]
    assert fanout.plan(["s1", "s2"], hosts, root_fanout=1, fanout=2) == {
        "a": "s1", "b": "s2", "c": "a", "d": "a", "e": "b", "f": "b", "g": "c"}
    assert fanout.chain("g", ["s1", "s2"], hosts, root_fanout=1, fanout=2) == ["c", "a", "s1", "s2"]
    assert fanout.chain("s1", ["s1"], hosts) == [] and fanout.chain("a", [], hosts) == []
    # a host outside the list still gets a place (appended last)
    assert fanout.chain("z", ["s"], ["a"], root_fanout=1, fanout=1) == ["a", "s"]


def test_retry_backs_off_on_sshd_resets_only():
    waits, calls = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("kex_exchange_identification: read: Connection reset by peer")
        return "ok"
    assert fanout.retry(flaky, sleep=waits.append, jitter=lambda: 0.5) == ("ok", 3)
    assert waits == [1.0, 2.0]

    def broken():
        raise RuntimeError("the artefact's sha256 is 00, its index says 11 (corrupt)")
    with pytest.raises(RuntimeError, match="corrupt"):
        fanout.retry(broken, sleep=waits.append)
    assert len(waits) == 2  # no retry for a refusal

    def always():
        raise RuntimeError("Connection reset by peer")
    with pytest.raises(RuntimeError):
        fanout.retry(always, tries=4, sleep=waits.append, jitter=lambda: 0.5)
    assert waits[2:] == [1.0, 2.0, 4.0]


def test_every_form_of_an_sshd_reset_is_transient():
    # the forms ssh printed in the lab at 18 hosts (OpenSSH 9.2: sshd's MaxStartups dropping the excess)
    for line in ("kex_exchange_identification: read: Connection reset by peer",
                 "Connection reset by 10.89.0.25 port 22",
                 "kex_exchange_identification: Connection closed by remote host",
                 "Connection closed by 10.89.0.25 port 22",
                 "ssh: connect to host 10.89.0.25 port 22: Connection refused"):
        assert fanout.transient("cannot read its manifest: " + line), line
    for line in ("Permission denied (publickey).", "Host key verification failed.",
                 "the artefact's sha256 is 00, its index says 11 (corrupt)"):
        assert not fanout.transient(line), line


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_wait_ready_waits_while_the_parent_progresses():
    clock = Clock()
    answers = iter([("absent", None), ("progress", 10), ("progress", 20), ("ready", None)])
    seen = []
    assert fanout.wait_ready(lambda: next(answers), clock=clock, sleep=clock.sleep,
                             report=lambda s, b: seen.append(s)) == (True, "")
    assert seen == ["absent", "progress", "progress", "ready"]


@pytest.mark.parametrize("answers,why", [
    ([("absent", None)] * 100, "has no copy and fetches none"),
    ([("progress", 5)] * 100, "stalled at 5 bytes"),
])
def test_wait_ready_gives_up_on_a_parent_that_will_not_serve(answers, why):
    clock = Clock()
    it = iter(answers)
    ok, reason = fanout.wait_ready(lambda: next(it), grace=10, stall=20, interval=1, clock=clock, sleep=clock.sleep)
    assert ok is False and why in reason
