"""Verify the fleet after site.yml (converge + idempotence) and a rollout behind the real
sglang-router: the two B300 hosts serve one model as a two-host serving group (TP16, rank 0 the
router's worker), the RTX PRO 6000 host alone; then a changed profile rolls out with the group's
rank 1 made to crash on it (the whole group rolled back and kept out of the router, the later host
untouched, a watcher sees at least N - 1 workers the whole time); then, the fault fixed, the same
rollout cycles the group as one unit. Killing a member's unit takes its group out of the routing.
A real Prometheus (Debian's package) scrapes the fleet from the file_sd targets site.yml wrote:
every instance is up with its family, release and group, and the router's series show each drain."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://fl-router"]
GPU = ["fl-b300-1", "fl-b300-2", "fl-rtx-1"]
GROUP = ["fl-b300-1", "fl-b300-2"]  # one serving group, in rank order (host_vars: nodes 2, TP16)
WORKERS = ["fl-b300-1", "fl-rtx-1"]  # what the router serves from: the group's rank 0 and the host alone
CHANGE = {"nvidia_facts_profile_overrides": {"min_ram_gib": 1, "max_running_requests": 100},
          "ddtree_rollout_batch": 1, "ddtree_service_health_timeout": 20}


def rendered(name):
    """The command line the host's current release runs."""
    return json.loads(other(name).file("/opt/ddtree/service/main/current/release.json").content_string)["argv"]


def url_of(name):
    return "http://%s:30000" % other(name).ansible.get_variables()["ansible_host"]


def workers(router):
    return json.loads(router.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"]


def release(name):
    return other(name).check_output("basename $(readlink -f /opt/ddtree/service/main/current)")


def info(name):
    return json.loads(other(name).check_output("curl -sf http://127.0.0.1:30000/server_info"))


def restarts(name):
    """How often the instance's server process has started (systemd's NRestarts does not count
    restarts that Ansible asks for; the main PID's start time does)."""
    return other(name).check_output("systemctl show -P ExecMainStartTimestampMonotonic ddtree-sglang@main.service")


def rollout(router, extra):
    samples, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            samples.append(len(workers(router)))
            time.sleep(0.3)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = playbook("playbooks/rollout.yml", "-e", json.dumps(extra))
    finally:
        stop.set()
        watcher.join()
    return r, samples


REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """The real Prometheus (Debian's package, unpacked by scripts/test: DDTREE_PROMETHEUS) on the controller,
    scraping every second the targets site.yml's monitoring stage wrote, with its rules loaded.
    Returns query(promql) -> the result list of /api/v1/query."""
    sd = REPORTS / "prometheus"
    d = tmp_path_factory.mktemp("prometheus")
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
           "rule_files": [str(sd / "ddtree-fleet.rules.yml")],
           "scrape_configs": [{"job_name": job, "file_sd_configs": [{"files": [str(sd / ("ddtree-%s.json" % job))],
                                                                     "refresh_interval": "2s"}]}
                              for job in ("sglang", "sglang-router", "node", "dcgm")]}
    (d / "prometheus.yml").write_text(json.dumps(cfg))  # YAML reads JSON
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(d / "prometheus.log", "w")
    proc = subprocess.Popen([os.environ["DDTREE_PROMETHEUS"], "--config.file=%s" % (d / "prometheus.yml"),
                             "--storage.tsdb.path=%s" % (d / "data"), "--web.listen-address=127.0.0.1:%d" % port],
                            stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port

    def query(q):
        with urllib.request.urlopen(url + "/api/v1/query?query=" + urllib.parse.quote(q), timeout=10) as r:
            return json.load(r)["data"]["result"]
    for _ in range(60):
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=2).close()
            break
        except OSError:
            time.sleep(0.5)
    else:
        raise AssertionError("prometheus did not start: " + (d / "prometheus.log").read_text()[-2000:])
    yield query
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def value(prometheus, q, want):
    """The one series of q, asserting its value is want."""
    r = prometheus(q)
    assert len(r) == 1 and r[0]["value"][1] == want, (q, r)
    return r[0]


def eventually(fn, seconds=60):
    end = time.time() + seconds
    while True:
        try:
            return fn()
        except AssertionError:
            if time.time() > end:
                raise
            time.sleep(1)


def test_site_serves_every_family_behind_the_router(host):
    assert host.service("ddtree-sglang-router.service").is_running
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)
    out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                            "-d '{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
    assert json.loads(out)["text"] == "tok tok tok tok"
    for n in GPU:
        h = other(n)
        # every stage left its effect: toolkit, venv, verified models, patch stamp, the release
        assert h.file("/opt/ddtree/models/target/.ddtree-manifest.json").exists
        assert h.file("/opt/ddtree/models/drafter/.ddtree-manifest.json").exists
        assert h.file("/opt/ddtree/venvs/sglang-0.5.23-test/.ddtree/sglang-patch.json").exists
        assert h.service("ddtree-sglang@main.service").is_running
    for n in WORKERS:
        srv = info(n)
        assert srv["max_running_requests"] == 128
        # the family's profile: TP over NVLink (B300, TP16 over the group's two hosts); expert parallel over PCIe (RTX PRO 6000)
        assert (int(srv["tp_size"]), int(srv.get("ep_size", 1))) == ((16, 1) if n in GROUP else (8, 8)), srv
    # the group: the same command line on both but the rank, rank 0's init address; rank 1 serves only /health
    argv = [rendered(n) for n in GROUP]
    for r, a in enumerate(argv):
        assert a[a.index("--nnodes") + 1] == "2" and a[a.index("--node-rank") + 1] == str(r), a
        assert a[a.index("--dist-init-addr") + 1] == "%s:20000" % other(GROUP[0]).ansible.get_variables()["ansible_host"]
    assert [argv[0][i - 1] for i, (a, b) in enumerate(zip(*argv)) if a != b] == ["--node-rank"] and len(argv[0]) == len(argv[1])
    member = other(GROUP[1])
    assert member.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health").stdout == "200"
    assert member.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/v1/models").stdout == "404"
    env = member.file("/opt/ddtree/service/main/current/release.json").content_string
    assert '"GLOO_SOCKET_IFNAME"' in env and '"NCCL_SOCKET_IFNAME": "=' in env, env
    report = json.loads(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "fleet.json").read_text())
    rows = {r["host"]: r for r in report["hosts"]}
    assert rows["fl-b300-1"]["family"] == "b300" and rows["fl-rtx-1"]["family"] == "rtx_pro_6000"
    assert all(rows[n]["service"][0]["healthy"] for n in GPU)
    groups = [rows[n]["serving_group"] for n in GPU]
    assert groups[0]["name"] == groups[1]["name"] == "b300-2x8-1" and groups[0]["members"] == GROUP and not groups[2]
    assert [g.get("rank") for g in groups[:2]] == [0, 1] and "formed" in groups[0]["reason"]


def test_prometheus_scrapes_every_instance_from_the_targets(host, prometheus):
    """Prometheus finds every SGLang instance and the router from the file_sd files alone, with the
    fleet's labels: the host's family and the release the service stage made current."""
    def all_up():
        up = dict((r["metric"]["host"], r) for r in prometheus('up{job="sglang"}'))
        assert sorted(up) == sorted(GPU) and all(r["value"][1] == "1" for r in up.values()), up
        return up
    up = eventually(all_up)
    for n in GPU:
        labels = up[n]["metric"]
        assert labels["family"] == ("b300" if n.startswith("fl-b300") else "rtx_pro_6000"), labels
        assert labels["release"] == release(n) and labels["sglang_instance"] == "main", labels
        assert labels["instance"] == url_of(n)[len("http://"):]  # Prometheus's own: the scraped address
        # Prometheus drops a label whose value is empty
        assert (labels.get("serving_group", ""), labels.get("node_rank", "")) == (("b300-2x8-1", str(GROUP.index(n))) if n in GROUP else ("", ""))
    router = eventually(lambda: value(prometheus, 'up{job="sglang-router"}', "1"))
    assert router["metric"]["host"] == "fl-router"
    eventually(lambda: value(prometheus, "sum(smg_worker_pool_size)", str(len(WORKERS))))


def test_report_alone_reads_what_each_host_serves(host):
    """playbooks/facts.yml (ddtree-fleet report) deploys nothing but reads each release and its health."""
    fleet_json = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports", "fleet.json")
    fleet_json.unlink()
    other("fl-rtx-1").run_test("systemctl stop ddtree-sglang@main.service")
    try:
        r = playbook("playbooks/facts.yml", limit=None)
        assert r.returncode == 0 and "changed=0" in r.text and "changed=1" not in r.text, r.text
        rows = {x["host"]: x for x in json.loads(fleet_json.read_text())["hosts"]}
        for n in GPU:
            svc = rows[n]["service"][0]
            assert svc["release"] == release(n) and svc["algorithm"] == "DFLASH", svc
            assert svc["healthy"] is (n != "fl-rtx-1"), svc
    finally:
        other("fl-rtx-1").run_test("systemctl start ddtree-sglang@main.service")
    assert "UNHEALTHY" in Path(fleet_json.parent, "fleet.md").read_text()


def main_pid(name):
    return other(name).check_output("systemctl show -P MainPID ddtree-sglang@main.service")


def test_a_degraded_gpu_host_is_refused_and_stays_out_of_the_router(host):
    """fl-rtx-1's nvidia-smi -q replays a real capture of 8 GPUs in HW slowdown + power brake: site.yml
    refuses it in the preflight (its server is not touched) and the router leaves it out; healthy
    again, the next run lets it back in."""
    rtx = other("fl-rtx-1")
    pid = main_pid("fl-rtx-1")
    rtx.run_test("echo health/h100-sxm-8x-hw-slowdown-power-brake__1.txt > /etc/nvidia-smi-replay/q")
    try:
        r = playbook("site.yml")
    finally:
        rtx.run_test("rm -f /etc/nvidia-smi-replay/q")
    assert r.returncode != 0
    assert "fl-rtx-1: GPU 0 (00000000:19:00.0) clock event reason is HW Slowdown + HW Power Brake Slowdown" in r.text, r.text[-3000:]
    assert sorted(w["url"] for w in workers(host)) == [url_of("fl-b300-1")]
    assert main_pid("fl-rtx-1") == pid  # refused before its service changed
    r = playbook("site.yml")
    assert r.returncode == 0, r.text[-3000:]
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)


def test_bench_gate_refuses_a_slower_release(host):
    """bench.yml records the host's figures; a rollout that would serve autoregressively passes its
    health gate but not its bench gate: rolled back and kept out; rolled again without the change,
    the host has nothing to deploy and only rejoins the router."""
    before = release("fl-rtx-1")
    r = playbook("playbooks/bench.yml", "-e", json.dumps({
        "ddtree_bench_concurrency": [1], "ddtree_bench_num_prompts": 4, "ddtree_bench_input_len": 16,
        "ddtree_bench_output_len": 32}), limit="fl-rtx-1")
    assert r.returncode == 0, r.text
    recorded = json.loads(other("fl-rtx-1").file("/var/lib/ddtree/bench.json").content_string)
    assert recorded["levels"][0]["concurrency"] == 1 and recorded["levels"][0]["speedup"] > 1.5, recorded
    assert release("fl-rtx-1") == before  # bench.yml puts the configured release back
    gate = {"ddtree_rollout_bench_gate": True, "ddtree_rollout_bench_num_prompts": 4,
            "ddtree_rollout_bench_input_len": 16, "ddtree_rollout_bench_output_len": 32}
    r = playbook("playbooks/rollout.yml", "-e", json.dumps(dict(gate, ddtree_service_algorithm="none")), limit="fl-rtx-1")
    assert r.returncode != 0 and "failed its bench gate" in r.text and "stays out of the router" in r.text, r.text
    assert release("fl-rtx-1") == before and info("fl-rtx-1").get("speculative_algorithm")
    assert url_of("fl-rtx-1") not in [w["url"] for w in workers(host)]
    r = playbook("playbooks/rollout.yml", "-e", json.dumps(gate), limit="fl-rtx-1")
    assert r.returncode == 0, r.text
    assert release("fl-rtx-1") == before
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)


def test_rollout_with_a_failing_group_member(host, prometheus):
    """The serving group is the canary unit; its rank 1 crashes on the new command line (a bad member config):
    the whole group returns to its previous release, stays out of the router, and the host after it is untouched."""
    before = {n: release(n) for n in GPU}
    other("fl-b300-2").run_test("mkdir -p /etc/ddtree-sglang-double && echo '%s' > /etc/ddtree-sglang-double/faults.json"
                                % json.dumps([{"match": "--max-running-requests 100", "mode": "crash"}]))
    r, samples = rollout(host, CHANGE)
    assert r.returncode != 0 and "serving group b300-2x8-1" in r.text and "failed its admission gate" in r.text, r.text[-4000:]
    assert "fl-b300-2 (rank 1)" in r.text, r.text[-4000:]  # the message names the member that failed
    # every member back on its previous release, the group serving again (rank 0 healthy with rank 1 joined)
    assert all(release(n) == before[n] for n in GROUP) and info("fl-b300-1")["max_running_requests"] == 128
    assert "--max-running-requests 128" in " ".join(rendered("fl-b300-2"))
    # but kept out of the router; after the failure: untouched
    assert release("fl-rtx-1") == before["fl-rtx-1"] and info("fl-rtx-1")["max_running_requests"] == 128
    assert [w["url"] for w in workers(host)] == [url_of("fl-rtx-1")]
    assert samples and min(samples) >= len(WORKERS) - 1, samples  # capacity never below N - batch (in units)
    # the record: both members drained (rank 0 from the router) and refused, their releases restored
    record = json.loads(sorted((REPORTS / "rollouts").glob("*.json"))[-1].read_text())
    assert record["outcome"].startswith("stopped: fl-b300-") and record["probe"] is None, record
    for n in GROUP:
        events = record["hosts"][n]
        assert [e["event"] for e in events] == ["drained", "refused"] and events[1]["restored"], (n, events)
    assert "fl-rtx-1" not in record["hosts"]
    # Prometheus saw it: the group's worker left the routing and stays out (smg 1.13 deletes a removed worker's
    # series, where sglang-router 0.3.2 left it at -1), the pool never below N - 1
    def seen():
        rank0 = 'smg_worker_health{worker="%s"}' % url_of("fl-b300-1")
        value(prometheus, "absent(%s)" % rank0, "1")
        value(prometheus, "min_over_time(sum(smg_worker_pool_size)[10m:1s])", str(len(WORKERS) - 1))
    eventually(seen, 30)


def test_rollout_again_after_the_fix_cycles_the_group_as_one(host):
    other("fl-b300-2").run_test("rm -f /etc/ddtree-sglang-double/faults.json")
    before = {n: (release(n), restarts(n)) for n in GPU}
    r, samples = rollout(host, CHANGE)
    assert r.returncode == 0, r.text[-4000:]
    # both members on a new release and restarted, the group serving the change through rank 0
    assert all(release(n) != before[n][0] and restarts(n) != before[n][1] for n in GPU)
    assert all(info(n)["max_running_requests"] == 100 for n in WORKERS)
    assert "--max-running-requests 100" in " ".join(rendered("fl-b300-2"))
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)
    assert samples and min(samples) >= len(WORKERS) - 1, samples
    record = json.loads(sorted((REPORTS / "rollouts").glob("*.json"))[-1].read_text())
    assert all([e["event"] for e in record["hosts"][n]] == ["drained", "deployed", "rejoined"] for n in GPU), record["hosts"]


def test_a_dead_member_takes_its_group_out_of_the_routing(host, prometheus):
    """Killing rank 1's server takes rank 0 down with it (the communicator is gone): the router stops routing to
    the group within its health checks, requests still succeed on the host alone; site.yml brings the group back."""
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)
    pid = main_pid("fl-b300-1")
    other("fl-b300-2").run_test("systemctl kill -s KILL ddtree-sglang@main.service")
    def rank0_went_down():  # with its member: the stand-in's rank 0 exits when a joined rank goes away
        assert main_pid("fl-b300-1") != pid, "rank 0 is still the same process"
    eventually(rank0_went_down, 30)
    rank0 = 'smg_worker_health{worker="%s"}' % url_of("fl-b300-1")
    eventually(lambda: value(prometheus, rank0, "0"), 90)
    for _ in range(6):  # the router sends nothing to the broken group
        out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                                "-d '{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": 2}}'")
        assert json.loads(out)["text"] == "tok tok"
    r = playbook("site.yml")
    assert r.returncode == 0, r.text[-3000:]
    eventually(lambda: value(prometheus, rank0, "1"), 90)
    assert sorted(w["url"] for w in workers(host)) == sorted(url_of(n) for n in WORKERS)


class Dom:
    """The page as the browser left it (chromium --dump-dom, after its scripts ran): per element id, the
    text inside it and the classes of the elements inside it; and the rows of the hosts table."""

    def __init__(self, html):
        from html.parser import HTMLParser
        self.text, self.classes, self.host_rows = {}, {}, []
        dom = self

        class P(HTMLParser):
            VOID = {"br", "img", "input", "meta", "link", "hr", "path", "rect", "line", "circle", "stop", "use"}

            def __init__(self):
                super().__init__()
                self.stack = []

            def handle_starttag(self, tag, attrs):
                a = dict(attrs)
                for _t, el_id in self.stack:
                    if el_id:
                        dom.classes.setdefault(el_id, set()).update((a.get("class") or "").split())
                if tag == "tr" and a.get("data-host"):
                    dom.host_rows.append(a["data-host"])
                if tag not in self.VOID:
                    self.stack.append((tag, a.get("id")))

            def handle_startendtag(self, tag, attrs):
                a = dict(attrs)
                for _t, el_id in self.stack:
                    if el_id:
                        dom.classes.setdefault(el_id, set()).update((a.get("class") or "").split())

            def handle_endtag(self, tag):
                for i in range(len(self.stack) - 1, -1, -1):
                    if self.stack[i][0] == tag:
                        del self.stack[i:]
                        break

            def handle_data(self, data):
                for _t, el_id in self.stack:
                    if el_id and data.strip():
                        dom.text.setdefault(el_id, []).append(data.strip())
        P().feed(html)

    def texts(self, el_id):
        return self.text.get(el_id, [])


def test_the_html_report_as_a_browser_shows_it(host):
    """reports/fleet.html opened in real headless Chromium (Debian's chromium-headless-shell), offline:
    every host is there, each GPU host's topology is drawn (NVLink lanes on the B300s, PCIe paths on
    the RTX PRO 6000), the bench chart carries the measured and the recorded B300 numbers, the last
    rollout's timeline is drawn. A screenshot is kept beside the report (reports/fleet.png)."""
    r = playbook("playbooks/facts.yml", limit=None)  # ddtree-fleet report: facts, what each host serves, the report
    assert r.returncode == 0, r.text
    page = REPORTS / "fleet.html"
    html = page.read_text()
    assert "<script src" not in html and "<link " not in html  # self-contained: nothing to fetch when viewed
    argv = ["chromium-headless-shell", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    dom = subprocess.run(argv + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    shot = subprocess.run(argv + ["--screenshot=%s" % (REPORTS / "fleet.png"), "--window-size=1400,2600", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert shot.returncode == 0 and (REPORTS / "fleet.png").stat().st_size > 50000, shot.stderr[-2000:]
    if os.environ.get("DDTREE_KEEP_SCREENSHOT"):  # docs/fleet-report.png is taken this way
        Path(os.environ["DDTREE_KEEP_SCREENSHOT"]).write_bytes((REPORTS / "fleet.png").read_bytes())
    d = Dom(dom)
    assert sorted(d.host_rows) == sorted(GPU + ["fl-router", "fl-src"]), d.host_rows
    for n in GPU:
        topo = "topology-%s" % n
        assert "main-svg" in d.classes.get(topo, set()), (topo, d.classes.get(topo))  # drawn by the browser
        cells = d.texts(topo)
        assert ("NV18" in cells) if n.startswith("fl-b300") else ("SYS" in cells and "NV18" not in cells), (n, cells[:40])
        assert "GPU7 · NUMA 1" in cells, cells[:40]
    bench = json.loads((REPORTS / "bench.json").read_text())["hosts"]["fl-rtx-1"]["levels"][0]
    rtx = d.texts("bench-tok-rtx-pro-6000")
    assert "main-svg" in d.classes.get("bench-tok-rtx-pro-6000", set())
    assert str(bench["speculative_tok_s"]) in rtx and str(bench["baseline_tok_s"]) in rtx, (bench, rtx)
    b300 = d.texts("bench-tok-b300")
    assert "303" in b300 and "4723" in b300, b300  # the recorded B300 figures (profiles/b300.yml)
    groups = " ".join(d.texts("serving-groups"))  # the serving group, its members in rank order
    assert "b300-2x8-1" in groups and "fl-b300-1 (rank 0), fl-b300-2 (rank 1)" in groups, groups
    assert "main-svg" in d.classes.get("rollout-timeline", set())
    summary = " ".join(d.texts("rollout-summary"))
    record = json.loads(sorted((REPORTS / "rollouts").glob("*.json"))[-1].read_text())
    assert record["id"] in summary and record["outcome"] in summary, summary
