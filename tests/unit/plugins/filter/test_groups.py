"""serving_groups: multi-node serving groups formed deterministically from the facts of real captures
(pinned by the inventory or formed per family and GPU count), every misfit named with its fix; and
the router's view of them (worker_urls: rank 0 only, the whole group out when a member is)."""
import random

from ansible_collections.ddtree.fleet.plugins.filter import gpu, router
from ansible_collections.ddtree.fleet.plugins.module_utils import serving_groups as sg

from helpers import facts_of, profile, records


def serving_groups(hvs, **kw):
    return sg.serving_groups(records(hvs), **kw)


def rollout_units(hvs, batch):
    return sg.rollout_units(records(hvs), batch)


def worker_urls(hvs, instances):
    return router.worker_urls(records(hvs), instances)


def host(name, replay="b300_8x", family="b300", nodes=1, **kw):
    prof = dict(profile(family), nodes=nodes)
    return dict({"inventory_hostname": name, "ansible_host": "10.0.0.%d" % (len(name) + sum(map(ord, name)) % 200),
                 "nvidia_facts_profile": prof, "ansible_facts": {"nvidia": facts_of(replay)}}, **kw)


def test_hosts_of_nodes_one_serve_alone():
    r = serving_groups([host("b300-1"), host("b300-2"), host("rtx-1", "rtx_pro_6000_8x", "rtx_pro_6000")])
    assert r == {"groups": [], "problems": {}}


def test_formed_groups_are_the_same_for_the_same_inventory_in_any_order():
    hvs = [host("h100-%d" % i, nodes=2) for i in (1, 2, 10, 3)]
    first = serving_groups(hvs)
    for _attempt in range(5):
        random.shuffle(hvs)
        assert serving_groups(hvs) == first
    assert [g["members"] for g in first["groups"]] == [["h100-1", "h100-2"], ["h100-3", "h100-10"]]  # natural order
    g = first["groups"][0]
    assert g["name"] == "b300-2x8-1" and g["rank0"] == "h100-1" and g["nodes"] == 2 and g["gpu_count"] == 8
    assert g["init_addr"] == "%s:20000" % [h for h in hvs if h["inventory_hostname"] == "h100-1"][0]["ansible_host"]
    assert "formed" in g["reason"] and "taken 2 at a time" in g["reason"]


def test_a_leftover_host_is_named_with_the_fix():
    r = serving_groups([host("a", nodes=2), host("b", nodes=2), host("c", nodes=2)])
    assert [g["members"] for g in r["groups"]] == [["a", "b"]]
    assert list(r["problems"]) == ["c"]
    assert "c: profile b300 asks for nodes: 2" in r["problems"]["c"] and "common_serving_group" in r["problems"]["c"]


def test_hosts_of_another_shape_do_not_mix():
    r = serving_groups([host("b1", nodes=2), host("r1", "rtx_pro_6000_8x", "rtx_pro_6000", nodes=2),
                        host("b2", nodes=2), host("r2", "rtx_pro_6000_8x", "rtx_pro_6000", nodes=2)])
    assert sorted(g["members"] for g in r["groups"]) == [["b1", "b2"], ["r1", "r2"]] and not r["problems"]


def test_pinned_groups_rank_by_the_inventory_then_by_name():
    r = serving_groups([host("x-2", nodes=2, common_serving_group="pair"),
                        host("x-1", nodes=2, common_serving_group="pair")])
    assert r["groups"][0]["members"] == ["x-1", "x-2"] and "pinned" in r["groups"][0]["reason"]
    r = serving_groups([host("x-2", nodes=2, common_serving_group="pair", common_serving_rank=0),
                        host("x-1", nodes=2, common_serving_group="pair", common_serving_rank=1)])
    assert r["groups"][0]["members"] == ["x-2", "x-1"] and r["groups"][0]["rank0"] == "x-2"


def test_pins_that_do_not_add_up_are_refused_with_the_fix():
    r = serving_groups([host("x-1", nodes=2, common_serving_group="pair")])
    assert "has 1 member(s) (x-1) but profile b300 asks for nodes: 2" in r["problems"]["x-1"] and not r["groups"]
    r = serving_groups([host("x-1", nodes=2, common_serving_group="pair"),
                        host("y-1", "rtx_pro_6000_8x", "rtx_pro_6000", nodes=2, common_serving_group="pair")])
    assert set(r["problems"]) == {"x-1", "y-1"} and "mixes hosts of different shape" in r["problems"]["y-1"]
    r = serving_groups([host("x-1", nodes=2, common_serving_group="p", common_serving_rank=0),
                        host("x-2", nodes=2, common_serving_group="p", common_serving_rank=0)])
    assert "common_serving_rank values" in r["problems"]["x-1"]
    r = serving_groups([host("x-1", nodes="two")])
    assert "nodes: 'two'" in r["problems"]["x-1"] and "whole number" in r["problems"]["x-1"]


def test_group_of_a_host():
    r = serving_groups([host("a", nodes=2), host("b", nodes=2), host("c")])
    assert sg.serving_group_of("b", r["groups"])["rank"] == 1
    assert sg.serving_group_of("c", r["groups"]) == {}


def test_the_router_gets_rank_zero_only_and_drops_a_group_with_a_refused_member():
    default = [{"name": "main", "port": 30000}]
    r = serving_groups([host("a", nodes=2), host("b", nodes=2)])
    a, b = [dict(host(n, nodes=2), serving_group_member=sg.serving_group_of(n, r["groups"])) for n in "ab"]
    c = dict(host("c"), serving_group_member={})
    assert worker_urls([a, b, c], default) == ["http://%s:30000" % a["ansible_host"], "http://%s:30000" % c["ansible_host"]]
    assert worker_urls([a, dict(b, ddtree_service_refused=True), c], default) == ["http://%s:30000" % c["ansible_host"]]
    # hosts this run did not reach: their pin in the inventory says which one is rank 0
    p1, p2 = {"inventory_hostname": "p-1", "common_serving_group": "g"}, {"inventory_hostname": "p-2", "common_serving_group": "g"}
    assert worker_urls([p2, p1], default) == ["http://p-1:30000"]


def test_a_group_holds_what_one_host_cannot():
    """8x H200 (real capture, 1.1 TiB of GPU memory) cannot hold a 1.2 TiB model alone; two as one group can."""
    alone = gpu.gpu_preflight("h1", facts_of("h200_8x"), profile("h200"), model_size_gib=1200)
    assert any("cannot hold a 1200 GiB model" in f and "serving group" in f for f in alone), alone
    together = gpu.gpu_preflight("h1", facts_of("h200_8x"), profile("h200", nodes=2, parallelism={"tp": 16}),
                                 model_size_gib=1200)
    assert not [f for f in together if "GPU memory" in f], together


def test_nccl_settings_come_from_the_fleet_address_and_the_gpudirect_nics():
    facts = {"interfaces": ["lo", "eth0", "ib-0"], "lo": {"ipv4": {"address": "127.0.0.1"}},
             "eth0": {"ipv4": {"address": "192.168.1.5"}}, "ib_0": {"ipv4": {"address": "10.0.0.5"}},
             "default_ipv4": {"interface": "eth0"}, "nvidia": facts_of("b300_8x")}
    env = sg.serving_group_env(facts, "10.0.0.5")
    assert env["NCCL_SOCKET_IFNAME"] == "=ib-0" and env["GLOO_SOCKET_IFNAME"] == "ib-0"
    # the real B300 capture: the eight GPUDirect HCAs, not the bonded frontend NIC
    assert env["NCCL_IB_HCA"] == "=" + ",".join("mlx5_1%d" % i for i in range(8))
    # a DNS name the facts cannot match: the default route's interface; no NICs in the topology: NCCL picks
    env = sg.serving_group_env(dict(facts, nvidia=facts_of("rtx_pro_6000_8x")), "gpu-7.example.internal")
    assert env == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def test_a_rollout_counts_a_group_as_one_unit_and_never_splits_it():
    r = serving_groups([host("b300-1", nodes=2), host("b300-2", nodes=2), host("h-1", nodes=2), host("h-2", nodes=2)])
    hvs = [dict(host(n), serving_group_member=sg.serving_group_of(n, r["groups"]))
           for n in ("b300-2", "rtx-1", "b300-1", "rtx-2", "h-1", "h-2", "rtx-3")]
    plan = rollout_units(hvs, 1)
    assert [u["name"] for u in plan["units"]] == ["b300-2x8-1", "rtx-1", "rtx-2", "b300-2x8-2", "rtx-3"]
    assert plan["hosts"] == ["b300-1", "b300-2", "rtx-1", "rtx-2", "h-1", "h-2", "rtx-3"]  # members in rank order
    assert plan["serial"] == [2, 1, 1, 2, 1]  # canary (the group), then one unit per batch
    assert rollout_units(hvs, "50%")["serial"] == [2, 2, 3] and rollout_units(hvs, "50%")["batches"][1] == ["rtx-1", "rtx-2"]
    # a --limit that leaves part of a group out would split it: the facts stage refuses that before (here: only the rest)
    assert rollout_units([h for h in hvs if h["inventory_hostname"] != "h-2"], 1)["hosts"][-2:] == ["h-1", "rtx-3"]


def test_a_host_without_facts_stops_formed_groups_not_pinned_ones():
    """b300-2 did not answer: pairing b300-1 with b300-3 would be another group than the inventory's."""
    hvs = [host("b300-1", nodes=2), host("b300-3", nodes=2),
           host("p-1", nodes=2, common_serving_group="pair"), host("p-2", nodes=2, common_serving_group="pair")]
    r = serving_groups(hvs, unknown=["b300-2"])
    assert [g["name"] for g in r["groups"]] == ["pair"]
    assert set(r["problems"]) == {"b300-1", "b300-3"} and "b300-2 had none in this run" in r["problems"]["b300-1"]
