"""address (one definition of how hosts reach each other) and fleet_trust (the ssh trust is the
fleet's, not the play's), peer_allow and warm_sources on the records of hostvars shaped like Ansible's."""
from ansible_collections.ddtree.fleet.plugins.filter import hosts, router

from helpers import records


def worker_urls(hvs, instances):
    return router.worker_urls(records(hvs), instances)


def hv(name, **kw):
    return dict({"inventory_hostname": name}, **kw)


def test_address_order():
    assert hosts.address(hv("b300-01.example.internal")) == "b300-01.example.internal"  # names only
    assert hosts.address(hv("b300-1", ansible_host="10.0.0.5")) == "10.0.0.5"
    assert hosts.address(hv("b300-1", ansible_host="10.0.0.5", ddtree_address="b300-1.fabric")) == "b300-1.fabric"
    assert hosts.address(hv("b300-1", ansible_host="", ddtree_address=None)) == "b300-1"


def test_worker_urls_use_the_address_and_bracket_ipv6():
    default = [{"name": "main", "port": 30000}]
    assert worker_urls([hv("g1.example.internal"), hv("g2", ansible_host="fd00::2",
                                                      ddtree_service_instances=[{"port": 30001}])], default) == [
        "http://g1.example.internal:30000", "http://[fd00::2]:30001"]
    # a host without instances of its own has the fleet's default ones (common_instances)
    assert worker_urls([hv("g3")], [{"port": 31000}, {"port": 31001}]) == ["http://g3:31000", "http://g3:31001"]


def test_worker_urls_leave_out_hosts_this_run_refused():
    default = [{"name": "main", "port": 30000}]
    hosts = [hv("ok"), hv("sick", nvidia_facts_refused=True), hv("bad", ddtree_service_refused=True),
             hv("fine", nvidia_facts_refused=False, ddtree_service_refused=False)]
    assert worker_urls(hosts, default) == ["http://ok:30000", "http://fine:30000"]


KEY_A, KEY_B, KEY_C = "AAAAC3NzaC1lZDI1NTE5AAAAIA", "AAAAC3NzaC1lZDI1NTE5AAAAIB", "AAAAC3NzaC1lZDI1NTE5AAAAIC"


def test_trust_from_play_hosts():
    h = {"a": hv("a", base_user_pubkey="ssh-ed25519 %s ddtree@a" % KEY_A, base_host_pubkey="ssh-ed25519 HA"),
         "b": hv("b", ansible_host="10.0.0.2", base_user_pubkey="ssh-ed25519 %s ddtree@b" % KEY_B,
                 base_host_pubkey="ssh-ed25519 HB")}
    t = hosts.fleet_trust(records(h, ["a", "b"]), ["a", "b"])
    assert t["authorized_keys"] == {"a": "ssh-ed25519 %s ddtree.fleet:a" % KEY_A, "b": "ssh-ed25519 %s ddtree.fleet:b" % KEY_B}
    assert t["known_hosts"] == {"a": "a ssh-ed25519 HA", "b": "b,10.0.0.2 ssh-ed25519 HB"}
    assert t["missing"] == [] and t["outside"] == []
    assert hosts.trust_block(t["known_hosts"]) == "a ssh-ed25519 HA\nb,10.0.0.2 ssh-ed25519 HB"


def test_limit_keeps_the_others_from_their_gathered_facts_or_the_record():
    recorded = {"authorized_keys": {"c": "ssh-ed25519 %s ddtree.fleet:c" % KEY_C, "gone": "ssh-ed25519 X ddtree.fleet:gone"},
                "known_hosts": {"c": "c ssh-ed25519 HC", "gone": "gone ssh-ed25519 HG"}}
    h = {
        # the --limit host: keys from this run
        "new": hv("new", base_user_pubkey="ssh-ed25519 %s ddtree@new" % KEY_A, base_host_pubkey="ssh-ed25519 HN"),
        # outside the play, gathered by delegation now
        "b": hv("b", ansible_facts={"ssh_host_key_ed25519_public": "HB", "local": {
            "ddtree_base": {"user_pubkey": "ssh-ed25519 %s ddtree@b" % KEY_B, "trust": recorded}}}),
        # outside and unreachable: only the record of it on b
        "c": hv("c"),
    }
    t = hosts.fleet_trust(records(h, ["new", "b", "c"]), ["new"])
    assert set(t["authorized_keys"]) == {"new", "b", "c"} and set(t["known_hosts"]) == {"new", "b", "c"}
    assert t["known_hosts"]["c"] == "c ssh-ed25519 HC" and t["known_hosts"]["b"] == "b ssh-ed25519 HB"
    assert "gone" not in t["known_hosts"]  # no longer in the fleet: dropped
    assert t["outside"] == ["b"] and t["missing"] == []


def test_a_host_nobody_knows_is_missing():
    h = {"a": hv("a", base_user_pubkey="ssh-ed25519 K", base_host_pubkey="ssh-ed25519 H"), "never": hv("never")}
    t = hosts.fleet_trust(records(h, ["a", "never"]), ["a"])
    assert t["missing"] == ["never"] and "never" not in t["known_hosts"]


def test_warm_sources_order_holders_extra_then_group_peers_outside_the_play():
    held = {"key_id": "k1", "held": True}
    hvs = {"b300-01.dc": hv("b300-01.dc", ddtree_service_warm_key=held),
           "b300-02.dc": hv("b300-02.dc", ddtree_service_warm_key={"key_id": "k1", "held": False}),
           "b300-03.dc": hv("b300-03.dc", ddtree_service_warm_key={"key_id": "k2", "held": True}),
           "b300-04.dc": hv("b300-04.dc", ansible_host="10.0.0.4"),
           "b300-05.dc": hv("b300-05.dc"),
           "build.dc": hv("build.dc", ddtree_address="build.fabric"),
           "rtx-01.dc": hv("rtx-01.dc")}
    groups = {"all": list(hvs), "b300": ["b300-0%d.dc" % i for i in range(1, 6)], "rtx": ["rtx-01.dc"], "ungrouped": []}
    play = ["b300-01.dc", "b300-02.dc", "b300-03.dc", "b300-05.dc"]
    recs = records(hvs, list(hvs))
    got = hosts.warm_sources("b300-05.dc", recs, play, groups, "k1", ["build.dc"], True, 4)
    # the play's holder of this key first; not the one without it, nor another key's; then the build host,
    # then the group's host outside the play (a --limit run), never a host of another group or itself
    assert got == [{"name": "b300-01.dc", "address": "b300-01.dc", "wait": False},
                   {"name": "build.dc", "address": "build.fabric", "wait": False},
                   {"name": "b300-04.dc", "address": "10.0.0.4", "wait": False}]
    assert [s["name"] for s in hosts.warm_sources("b300-05.dc", recs, play, groups, "k1", [], False, 4)] == ["b300-01.dc"]
    assert len(hosts.warm_sources("b300-05.dc", recs, ["b300-05.dc"], groups, "k1", [], True, 2)) == 2


def test_warm_sources_fan_out_one_holder_serves_two_and_each_restorer_the_next_four():
    """18 hosts of one key, one holder: the holder is asked first by two hosts only; the others wait on a
    parent that restores in the same run (wait: true), then climb its chain, then the holder."""
    names = ["g%02d" % i for i in range(18)]
    recs = records(dict((n, hv(n, ddtree_service_warm_key={"key_id": "k", "held": n == "g00"})) for n in names), names)
    groups = {"all": names, "gpu": names}
    firsts = {}
    for n in names[1:]:
        got = hosts.warm_sources(n, recs, names, groups, "k", [], False, 4)
        assert got[-1] == {"name": "g00", "address": "g00", "wait": False}, got
        assert all(s["wait"] for s in got[:-1]) and n not in [s["name"] for s in got]
        firsts[got[0]["name"]] = firsts.get(got[0]["name"], 0) + 1
    assert firsts["g00"] == 2 and max(firsts.values()) <= 4
    assert hosts.warm_sources("g00", recs, names, groups, "k", [], False, 4) == []  # a holder restores from itself


def test_peer_allow_takes_every_address_of_the_clients_records():
    facts = {"all_ipv4_addresses": ["10.0.0.1", "192.168.5.1"], "all_ipv6_addresses": ["fe80::1%eth0", "fd00::1"]}
    h = {"a": hv("a", ansible_host="10.0.0.1", ansible_facts=facts), "b": hv("b", ansible_host="fd00::2"),
         "c": hv("c.example.internal")}
    assert hosts.peer_allow(records(h, ["a", "b", "c"]), ["172.16.0.0/12"]) == [
        "10.0.0.1", "172.16.0.0/12", "192.168.5.1", "fd00::1", "fd00::2"]
    # a filter that needs a few keys of many hosts asks for just those (host and address always come)
    assert records(h, ["a"])[0]["addresses"] == ["10.0.0.1", "192.168.5.1", "fd00::1"]
    from ansible_collections.ddtree.fleet.plugins.module_utils import fleet
    assert fleet.records(h, ["b"], ["addresses"]) == [{"host": "b", "address": "fd00::2", "addresses": []}]
