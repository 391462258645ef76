"""The HTML report's pictures (ddtree.fleet.fleet_charts) and profile evidence, from rows built on real
captures. The page itself is opened in headless Chromium by molecule/fleet."""
from ansible_collections.ddtree.fleet.plugins.filter import report
from helpers import facts_of, profile, records


def rows():
    hv = {"b": {"inventory_hostname": "b", "ansible_facts": {"nvidia": facts_of("b300_8x")}, "nvidia_facts_profile": profile("b300"),
                "group_names": ["fleet"], "nvidia_facts_profile_overrides": {"min_ram_gib": 1},
                "ddtree_service_status": [{"name": "main", "port": 30000, "release": "r1", "algorithm": "DFLASH", "healthy": False}]},
          "r": {"inventory_hostname": "r", "ansible_facts": {"nvidia": facts_of("rtx_pro_6000_8x")},
                "nvidia_facts_profile": profile("rtx_pro_6000"), "group_names": ["fleet"]}}
    return report.fleet_rows(records(hv, ["b", "r"]))


def test_topology_heatmaps_name_each_link_and_numa_node():
    c = report.fleet_charts(rows())
    b, r = c["topology"]["b"], c["topology"]["r"]
    assert 'id="topology-b"' in b and '"NV18"' in b and '"GPU7 \\u00b7 NUMA 1"' in b
    assert '"SYS"' in r and '"NV18"' not in r
    # NVLink host: coloured by lanes; PCIe-only host: by the path kind, its scale naming PIX..SYS
    assert '"NVLink lanes"' in b and '"PCIe path"' not in b
    assert '"PCIe path"' in r and '"ticktext":["PIX","PXB","PHB","NODE","SYS"]' in r and "NVLink lanes" not in r
    assert report.fleet_charts(rows()) == c  # fixed ids: the same fleet gives the same page


def test_bench_beside_the_recorded_figures_and_the_rollout_timeline():
    bench = {"r": {"levels": [{"concurrency": 1, "baseline_tok_s": 41.5, "speculative_tok_s": 88.25, "accept_length": 2.9,
                               "ttft_ms": 120.0, "baseline_ttft_ms": 110.0}]}}
    rollout = {"id": "20261204T180000Z", "outcome": "completed", "hosts": {
        "b": [{"event": "drained", "at": "2026-12-04T18:00:01+00:00", "router_workers": 1},
              {"event": "rejoined", "at": "2026-12-04T18:01:00+00:00", "router_workers": 2}],
        "r": [{"event": "refused", "at": "2026-12-04T18:02:00+00:00", "router_workers": None, "reason": "x"}]}}
    c = report.fleet_charts(rows(), bench, rollout)
    assert sorted(c["bench"]) == ["b300", "rtx_pro_6000"]  # b300: recorded figures only
    assert "88.25" in c["bench"]["rtx_pro_6000"]["tok_s"] and "41.5" in c["bench"]["rtx_pro_6000"]["tok_s"]
    assert "4723" in c["bench"]["b300"]["tok_s"] and "recorded (report)" in c["bench"]["b300"]["tok_s"]
    t = c["timeline"]
    assert 'id="rollout-timeline"' in t and "r refused" in t and "b drained" in t
    assert report.fleet_charts(rows(), bench, None)["timeline"] is None


def test_alerts_come_first():
    al = report.fleet_charts(rows())["alerts"]
    assert al["unhealthy"] == ["b main"] and "b: instance main (release r1) is not healthy" in al["errors"]


def test_a_host_refused_by_gpu_health_is_counted_as_refused():
    # the verdict a failed health check gets (_health_verdict) is the one alerts() and the page count
    row = {"host": "b", "health": {"verdict": report.HEALTH_FAILED, "problems": ["b: GPU 3 (00000000:63:00.0): Xid 79"]}}
    al = report.alerts([row, {"host": "r", "health": {"verdict": "ok", "problems": []}}])
    assert al["refused"] == ["b"] and al["errors"] == ["b: GPU 3 (00000000:63:00.0): Xid 79"]


def test_profile_evidence_reads_the_tags_of_each_value():
    ev = dict((e["key"], e) for e in report.profile_evidence("b300"))
    assert ev["parallelism.tp"]["value"] == "8" and ev["parallelism.tp"]["tags"] == ["report", "doc"]
    assert ev["page_size"]["tags"] == ["wheel"]
    assert report.profile_evidence("no_such_family") == [] and report.profile_evidence("") == []
