"""Verify ddtree_monitoring on the host that holds the file_sd directory (set in group_vars): every
instance with its labels, the router's metrics port, the exporter found by its running unit, and the rules
with the group_vars threshold."""
import json

testinfra_hosts = ["ansible://mon-router"]
DIR = "/srv/prometheus/file_sd"


def job(host, name):
    return json.loads(host.file("%s/ddtree-%s.json" % (DIR, name)).content_string)


def test_the_instances_are_targets_with_the_fleets_labels(host):
    (g,) = job(host, "sglang")
    assert g["targets"][0].endswith(":30000")
    assert g["labels"]["host"] == "mon-gpu" and g["labels"]["family"] == "b200" and g["labels"]["sglang_instance"] == "main"


def test_the_router_and_the_running_exporter_are_targets(host):
    assert [g["labels"]["host"] for g in job(host, "sglang-router")] == ["mon-router"]
    assert job(host, "sglang-router")[0]["targets"][0].endswith(":29000")
    node = job(host, "node")
    assert [g["labels"]["host"] for g in node] == ["mon-gpu"] and node[0]["targets"][0].endswith(":9100")
    assert job(host, "dcgm") == []


def test_the_rules_carry_the_group_vars_threshold(host):
    rules = host.file(DIR + "/ddtree-fleet.rules.yml").content_string
    assert 'sglang:num_queue_reqs{job="sglang"} > 7' in rules

