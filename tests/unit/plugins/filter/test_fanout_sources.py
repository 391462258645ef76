"""ddtree.fleet.fanout_sources: each host's chain in the venv fan-out tree."""
from collections import Counter

from ansible_collections.ddtree.fleet.plugins.filter.fanout import fanout_sources


def records(hosts):
    return [{"host": h, "address": "10.0.0.%d" % n} for n, h in enumerate(hosts, 1)]


def test_the_source_serves_two_and_every_other_host_four():
    needing = ["gpu-%d" % i for i in range(1, 65)]
    recs = records(["src"] + needing)
    parents = Counter()
    for h in needing:
        chain = fanout_sources(h, ["src"], needing, recs)
        assert chain[-1] == {"name": "src", "address": "10.0.0.1", "wait": False}
        assert all(s["wait"] for s in chain[:-1]) and len(set(s["name"] for s in chain)) == len(chain)
        parents[chain[0]["name"]] += 1
    assert parents["src"] == 2 and max(n for h, n in parents.items() if h != "src") == 4
    assert sum(parents.values()) == 64
    # level by level: the first two are the source's, the next eight theirs
    assert [fanout_sources(h, ["src"], needing, recs)[0]["name"] for h in needing[:2]] == ["src", "src"]
    assert set(fanout_sources(h, ["src"], needing, recs)[0]["name"] for h in needing[2:10]) == {"gpu-1", "gpu-2"}


def test_other_fanouts_addresses_and_a_holder():
    needing = ["b", "c", "d", "e", "f"]
    recs = records(["a"] + needing)
    chains = dict((h, fanout_sources(h, ["a"], needing, recs, 1, 2, {"a": "src.example"})) for h in needing)
    assert [s["name"] for s in chains["b"]] == ["a"] and chains["b"][0]["address"] == "src.example"
    assert [s["name"] for s in chains["d"]] == ["b", "a"] and chains["d"][0] == {"name": "b", "address": "10.0.0.2", "wait": True}
    assert [s["name"] for s in chains["f"]] == ["c", "b", "a"]
    assert fanout_sources("a", ["a"], needing, recs) == []


def test_needing_hosts_alone_are_in_the_tree():
    """A host whose dry run said it has the venv fetches nothing, so it serves nobody."""
    needing = ["b", "d"]
    chain = fanout_sources("d", ["a"], needing, records(["a", "b", "c", "d"]))
    assert [s["name"] for s in chain] == ["a"]
