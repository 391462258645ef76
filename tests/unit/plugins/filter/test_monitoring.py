"""The monitoring stage (playbooks/monitoring.yml): Prometheus file_sd targets from the inventory and the
facts of real captures, their labels, what a --limit run keeps, and the alerting rules checked by the
real promtool (Debian's package, which scripts/test unpacks: DDTREE_PROMTOOL)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.ddtree.fleet.plugins.filter import monitoring
from helpers import facts_of, profile as prof, records

ROOT = Path(__file__).resolve().parents[4]
FLEET = ["r1", "b1", "router"]
EXPORTERS = {"node": 9100, "dcgm": 9400}


def hv():
    return {
        "b1": {"inventory_hostname": "b1", "ansible_host": "10.0.0.5", "ansible_facts": {"nvidia": facts_of("b300_8x")},
               "nvidia_facts_profile": prof("b300"), "ddtree_service_status": [{"name": "main", "release": "abc123"}],
               "ddtree_monitoring_found": ["node"]},
        "r1": {"inventory_hostname": "r1", "ansible_facts": {"nvidia": facts_of("rtx_pro_6000_8x")},
               "nvidia_facts_profile": prof("rtx_pro_6000"), "ddtree_monitoring_exporters": ["dcgm", "node"],
               "ddtree_service_instances": [{"name": "a", "port": 30000}, {"name": "b", "port": 30001}]},
        "router": {"inventory_hostname": "router", "ddtree_address": "fd00::7"},
    }


def test_targets_per_job_with_the_fleets_labels():
    jobs = monitoring.prometheus_targets(records(hv(), FLEET), ["r1", "b1"], ["router"], instances=[{"name": "main", "port": 30000}],
                                         exporters=EXPORTERS)
    assert sorted(jobs) == ["dcgm", "node", "sglang", "sglang-router"]
    sg = jobs["sglang"]
    assert [g["targets"] for g in sg] == [["10.0.0.5:30000"], ["r1:30000"], ["r1:30001"]]
    assert sg[0]["labels"] == {"host": "b1", "family": "b300", "profile": "b300", "sglang_instance": "main",
                               "release": "abc123", "serving_group": "", "node_rank": ""}
    assert sg[2]["labels"]["family"] == "rtx_pro_6000" and sg[2]["labels"]["sglang_instance"] == "b"
    assert sg[2]["labels"]["release"] == ""  # not deployed in this run
    assert jobs["sglang-router"] == [{"targets": ["[fd00::7]:29000"], "labels": {"host": "router", "router_port": "30080"}}]
    # exporters where they run: found by this run's service facts, or as the inventory lists them
    assert jobs["node"] == [{"targets": ["10.0.0.5:9100"], "labels": {"host": "b1"}},
                            {"targets": ["r1:9100"], "labels": {"host": "r1"}}]
    assert jobs["dcgm"] == [{"targets": ["r1:9400"], "labels": {"host": "r1"}}]


def test_a_router_without_metrics_and_an_unknown_exporter():
    h = hv()
    h["router"]["sglang_router_prometheus_port"] = 0
    assert monitoring.prometheus_targets(records(h, [] + ["router"]), [], ["router"], exporters=EXPORTERS)["sglang-router"] == []
    h["b1"]["ddtree_monitoring_found"] = ["nvml"]
    with pytest.raises(Exception, match="b1: exporter 'nvml' is not one ddtree_monitoring_exporter_ports knows"):
        monitoring.prometheus_targets(records(h, ["b1"] + []), ["b1"], [], exporters=EXPORTERS)


def test_under_limit_the_other_hosts_keep_their_entries():
    last = monitoring.prometheus_targets(records(hv(), FLEET), ["r1", "b1"], ["router"], instances=[{"name": "main", "port": 30000}],
                                         exporters=EXPORTERS)
    h = hv()
    del h["r1"]["nvidia_facts_profile"], h["r1"]["ansible_facts"]  # r1 outside --limit: no facts this run
    h["b1"]["ddtree_service_status"] = [{"name": "main", "release": "def456"}]
    jobs = monitoring.prometheus_targets(records(h, FLEET), ["r1", "b1"], ["router"], instances=[{"name": "main", "port": 30000}],
                                         exporters=EXPORTERS, previous=last, current=["b1"])
    by = dict((tuple(g["targets"]), g["labels"]) for g in jobs["sglang"])
    assert by[("10.0.0.5:30000",)]["release"] == "def456"          # reached: fresh
    assert by[("r1:30001",)]["family"] == "rtx_pro_6000"           # not reached: as written last time
    assert jobs["sglang-router"] == last["sglang-router"]
    assert jobs["node"] == last["node"]  # r1 lists its exporters; b1's were found in this run


def test_a_reached_router_and_a_looked_at_host_are_fresh_without_gpu_facts():
    """A router has no GPU facts, and monitoring.yml alone reads none: what runs on them now wins over last time."""
    last = monitoring.prometheus_targets(records(hv(), FLEET), ["r1", "b1"], ["router"], instances=[{"name": "main", "port": 30000}],
                                         exporters=EXPORTERS)
    h = hv()
    h["router"]["sglang_router_prometheus_port"] = 29100
    h["router"]["ddtree_monitoring_found"] = []
    del h["b1"]["ansible_facts"]      # no GPU facts in this run: the sglang entry stays as it was
    h["b1"]["ddtree_monitoring_found"] = []  # but its node exporter stopped
    jobs = monitoring.prometheus_targets(records(h, FLEET), ["r1", "b1"], ["router"], instances=[{"name": "main", "port": 30000}],
                                         exporters=EXPORTERS, previous=last, current=["b1", "r1", "router"])
    assert jobs["sglang-router"] == [{"targets": ["[fd00::7]:29100"], "labels": {"host": "router", "router_port": "30080"}}]
    assert jobs["node"] == [{"targets": ["r1:9100"], "labels": {"host": "r1"}}]
    assert [g for g in jobs["sglang"] if g["labels"]["host"] == "b1"] == [g for g in last["sglang"] if g["labels"]["host"] == "b1"]


def test_the_previous_files_are_needed_only_for_hosts_this_run_cannot_refresh():
    h = hv()
    h["router"]["ddtree_monitoring_found"] = []
    assert monitoring.prometheus_stale(records(h, FLEET), ["r1", "b1"], ["router"], current=["r1", "b1", "router"]) == []
    assert monitoring.prometheus_stale(records(h, FLEET), ["r1", "b1"], ["router"], current=["r1", "router"]) == ["b1"]  # --limit
    del h["r1"]["ansible_facts"]
    assert monitoring.prometheus_stale(records(h, FLEET), ["r1", "b1"], ["router"], current=["r1", "b1", "router"]) == ["r1"]  # no GPU facts
    del h["router"]["ddtree_monitoring_found"]
    assert monitoring.prometheus_stale(records(h, FLEET), ["r1", "b1"], ["router"], current=["r1", "b1", "router"]) == ["r1", "router"]


@pytest.mark.skipif(not os.environ.get("DDTREE_PROMTOOL"), reason="DDTREE_PROMTOOL unset: run through scripts/test")
def test_the_stage_writes_targets_and_rules_promtool_accepts(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"ddtree_monitoring_exporters": []}, "children": {"fleet": {"children": {
        "gpu_hosts": {"hosts": {"gpu-a.example.com": {"ddtree_service_profile": {"name": "b300", "speculative": {
            "accept_length_floor": 2.0}}}, "gpu-b.example.com": {"ddtree_service_profile": {
                "name": "h100", "health": {"xid_policy": {"application": "ignore"}}}}}},
        "routers": {"hosts": {"router.example.com": {}}}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), DDTREE_REPORT_DIR=str(tmp_path / "reports"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    argv = ["ansible-playbook", "-i", str(inv), str(ROOT / "playbooks" / "monitoring.yml")]
    for run in (1, 2):
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        changed = sum(int(n) for n in re.findall(r"changed=(\d+)", p.stdout))
        assert (changed == 0) == (run == 2), p.stdout  # a second run changes nothing
    d = tmp_path / "reports" / "prometheus"
    assert [g["targets"] for g in json.loads((d / "ddtree-sglang.json").read_text())] == [
        ["gpu-a.example.com:30000"], ["gpu-b.example.com:30000"]]
    assert json.loads((d / "ddtree-node.json").read_text()) == []
    rules = d / "ddtree-fleet.rules.yml"
    assert 'family="b300"} < 2.0' in rules.read_text()
    check = subprocess.run([os.environ["DDTREE_PROMTOOL"], "check", "rules", str(rules)], capture_output=True, text=True,
                           check=False)
    # 9, and the XID rules: one for the XIDs both hosts refuse, one per set they warn on (gpu-b ignores application XIDs)
    assert check.returncode == 0 and "SUCCESS: 12 rules found" in check.stdout, check.stdout + check.stderr
    # the XID rules on DCGM's last-XID gauge, as Prometheus evaluates them (promtool test rules)
    refused = ("GPU {{ $labels.gpu }} on {{ $labels.host }} reported Xid {{ $value }}: the preflight refuses this host "
               "until it is cleared (the fleet report and docs/gates.md say how)")
    series = [("gpu-a.example.com", "3", 79), ("gpu-a.example.com", "0", 13), ("gpu-b.example.com", "1", 13),
              ("gpu-b.example.com", "2", 0)]
    exp = {"refuse": [("gpu-a.example.com", "3", 79)], "warn": [("gpu-a.example.com", "0", 13)]}  # not 13 on gpu-b, nor 0

    def alerts(action):
        summary = refused if action == "refuse" else "GPU {{ $labels.gpu }} on {{ $labels.host }} reported Xid {{ $value }}: the profile warns on it"
        return [{"exp_labels": {"severity": "critical" if action == "refuse" else "warning", "xid_action": action,
                                "xid_set": "1" if action == "refuse" else "2", "job": "dcgm", "host": h, "gpu": g},
                 "exp_annotations": {"summary": summary.replace("{{ $labels.gpu }}", g).replace("{{ $labels.host }}", h)
                                     .replace("{{ $value }}", str(x))}} for h, g, x in exp[action]]
    (d / "xid-test.yml").write_text(yaml.safe_dump({"rule_files": ["ddtree-fleet.rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": 'DCGM_FI_DEV_XID_ERRORS{job="dcgm",host="%s",gpu="%s"}' % (h, g), "values": "%dx5" % x}
                         for h, g, x in series],
        "alert_rule_test": [{"eval_time": "2m", "alertname": "GPUXidRefused", "exp_alerts": alerts("refuse")},
                            {"eval_time": "2m", "alertname": "GPUXidWarning", "exp_alerts": alerts("warn")}]}]}))
    test = subprocess.run([os.environ["DDTREE_PROMTOOL"], "test", "rules", str(d / "xid-test.yml")], capture_output=True,
                          text=True, check=False)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr

    # the serving-group rules the day-two loop acts on (extensions/eda/rulebooks/day2.yml: restart_group)
    def up(host, rank, group, addr, values):
        return {"series": 'up{job="sglang",host="%s",node_rank="%s",serving_group="%s",instance="%s",sglang_instance="main"}'
                % (host, rank, group, addr), "values": values}

    def health(addr, values):
        return {"series": 'smg_worker_health{job="sglang-router",host="router",instance="router:29000",worker="http://%s"}' % addr,
                "values": values}
    member = {"exp_labels": {"severity": "critical", "job": "sglang", "host": "gpu-f", "node_rank": "0", "serving_group": "g5",
                             "instance": "10.0.0.7:30000", "sglang_instance": "main"},
              "exp_annotations": {"summary": "Rank 0 (gpu-f) of serving group g5 does not answer /metrics: a member is down, the "
                                             "group is out of the gateway"}}
    hung = {"exp_labels": {"severity": "critical", "job": "sglang-router", "host": "gpu-c", "node_rank": "0", "serving_group": "g2",
                           "instance": "10.0.0.5:30000", "sglang_instance": "main", "worker": "http://10.0.0.5:30000"},
            "exp_annotations": {"summary": "Serving group g2 (rank 0 gpu-c) answers /metrics but the gateway holds it unhealthy: hung"}}
    (d / "group-test.yml").write_text(yaml.safe_dump({"rule_files": ["ddtree-fleet.rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            up("gpu-f", "0", "g5", "10.0.0.7:30000", "1x5 0x20"),   # rank 0 answered, then went down (a member killed)
            # a non-zero rank's port answering, then not: a local user there can do that (the rank serves no /metrics
            # of its own), so it is no evidence of a member down
            up("gpu-a", "1", "g1", "10.0.0.2:30000", "1x5 0x20"),
            up("gpu-b", "1", "g3", "10.0.0.3:30000", "0x25"),       # a real non-zero rank: never a /metrics of its own
            up("gpu-d", "", "", "10.0.0.4:30000", "1x5 0x20"),      # not in a group: SGLangInstanceDown's
            up("gpu-c", "0", "g2", "10.0.0.5:30000", "1x25"),       # rank 0 up ...
            health("10.0.0.5:30000", "1x3 0x22"),                   # ... and unhealthy in the gateway from minute 4: hung
            up("gpu-e", "0", "g4", "10.0.0.6:30000", "1x25"),
            health("10.0.0.6:30000", "1x3 0x5 _x17"),               # drained for 5 minutes, then removed (series gone)
        ],
        "alert_rule_test": [{"eval_time": "5m", "alertname": "SGLangGroupMemberDown", "exp_alerts": []},
                            {"eval_time": "7m", "alertname": "SGLangGroupMemberDown", "exp_alerts": [member]},
                            {"eval_time": "13m", "alertname": "SGLangGroupHung", "exp_alerts": []},
                            {"eval_time": "16m", "alertname": "SGLangGroupHung", "exp_alerts": [hung]}]}]}))
    test = subprocess.run([os.environ["DDTREE_PROMTOOL"], "test", "rules", str(d / "group-test.yml")], capture_output=True,
                          text=True, check=False)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def _prometheus():
    tool = os.environ.get("DDTREE_PROMTOOL", "")
    return os.environ.get("DDTREE_PROMETHEUS") or (os.path.join(os.path.dirname(tool), "prometheus") if tool else "")


@pytest.mark.skipif(not _prometheus(), reason="DDTREE_PROMETHEUS/DDTREE_PROMTOOL unset: run through scripts/test")
def test_the_documented_scrape_config_never_takes_the_fleets_labels_from_a_scrape(tmp_path):
    """docs/monitoring.md's scrape config in the real Prometheus (Debian's), scraping a /metrics that sends the
    fleet's labels: the targets' labels stand, an empty one is not filled from the scrape (a local user answering on
    a free metrics port could otherwise give an ungrouped instance's series a serving_group)."""
    import http.server
    import socket
    import threading
    import time
    import urllib.parse
    import urllib.request

    forged = ('sglang:spec_accept_length{serving_group="forged",node_rank="0",release="evil",family="b300",profile="p",'
              'host="other",sglang_instance="x",router_port="1",ddtree_set="a;b;c;d;e"} 1.5\n').encode()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(forged)))
            self.end_headers()
            self.wfile.write(forged)

        def log_message(self, *_args):
            pass
    targets = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics) for _n in range(2)]
    for target in targets:
        threading.Thread(target=target.serve_forever, daemon=True).start()
    tport, tport2 = (t.server_address[1] for t in targets)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        pport = s.getsockname()[1]
    doc = (ROOT / "docs" / "monitoring.md").read_text()
    block = re.search(r"## Pointing a Prometheus at it\n\n```yaml\n(.*?)```", doc, re.S).group(1)
    sd = tmp_path / "sd"
    sd.mkdir()
    config = yaml.safe_load(block.replace("/path/to/reports/prometheus", str(sd)))
    config["global"] = {"scrape_interval": "1s"}
    (sd / "ddtree-fleet.rules.yml").write_text("groups: []\n")
    empty = {"family": "", "profile": "", "serving_group": "", "node_rank": "", "release": ""}
    (sd / "ddtree-sglang.json").write_text(json.dumps([
        {"targets": ["127.0.0.1:%d" % tport], "labels": dict(empty, host="gpu-d", sglang_instance="main")},
        {"targets": ["127.0.0.1:%d" % tport2],
         "labels": {"host": "gpu-a", "sglang_instance": "main", "family": "b300", "profile": "b300", "serving_group": "g1",
                    "node_rank": "1", "release": "r1"}}]))
    (sd / "ddtree-node.json").write_text(json.dumps([{"targets": ["127.0.0.1:%d" % tport], "labels": {"host": "gpu-d"}}]))
    for job in ("sglang-router", "dcgm"):
        (sd / ("ddtree-%s.json" % job)).write_text("[]")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([_prometheus(), "--config.file=%s" % (tmp_path / "prometheus.yml"),
                             "--storage.tsdb.path=%s" % (tmp_path / "data"), "--web.listen-address=127.0.0.1:%d" % pport],
                            stdout=log, stderr=subprocess.STDOUT)

    def query(q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (pport, urllib.parse.urlencode({"query": q}))
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as r:
            return sorted((x["metric"] for x in json.load(r)["data"]["result"]), key=lambda m: (m["job"], m["instance"]))
    try:
        got, end = [], time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < end:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                got = query("sglang:spec_accept_length")
            except OSError:
                pass
            time.sleep(0.5)
        up = query('up{job="sglang"}')
    finally:
        prom.terminate()
        prom.wait(15)
        log.close()
        for target in targets:
            target.shutdown()
            target.server_close()
    base = {"__name__": "sglang:spec_accept_length", "exported_host": "other", "exported_sglang_instance": "x"}
    assert got == sorted([
        {"__name__": "sglang:spec_accept_length", "exported_host": "other", "job": "node", "instance": "127.0.0.1:%d" % tport,
         "host": "gpu-d"},
        dict(base, job="sglang", instance="127.0.0.1:%d" % tport, host="gpu-d", sglang_instance="main"),
        dict(base, job="sglang", instance="127.0.0.1:%d" % tport2, host="gpu-a", sglang_instance="main", family="b300",
             profile="b300", serving_group="g1", node_rank="1", release="r1", exported_family="b300", exported_profile="p",
             exported_serving_group="forged", exported_node_rank="0", exported_release="evil"),
    ], key=lambda m: (m["job"], m["instance"])), json.dumps(got, indent=1)
    assert sorted(m.get("serving_group", "") for m in up) == ["", "g1"], up
