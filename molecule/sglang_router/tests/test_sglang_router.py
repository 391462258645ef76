"""Verify sglang_router: the real smg 1.13 gateway (from its wheel) runs under systemd as the service user
with the fleet's workers (every instance of every GPU host, by address), is live and ready on its own
health endpoints, routes requests to them, the two real servers included, and a run limited to the
router (or to one worker) keeps every worker. A rollout then cycles both real servers behind it while a
request probe runs through it: each drain goes through the gateway's drain state and ends with the
in-flight count at 0, and no request fails."""
import glob
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://rt-router"]
CONVERGE = "molecule/sglang_router/converge.yml"


def expected():
    out = []
    for name, ports in (("rt-w1", [30000]), ("rt-w2", [30000, 30001]), ("rt-cpu", [30000]), ("rt-cpu2", [30000])):
        addr = other(name).ansible.get_variables()["ansible_host"]
        out += ["http://%s:%d" % (addr, p) for p in ports]
    return sorted(out)


def workers(host):
    return sorted(w["url"] for w in json.loads(host.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"])


def test_router_runs_pinned_as_the_service_user(host):
    svc = host.service("ddtree-sglang-router.service")
    assert svc.is_running and svc.is_enabled
    assert host.check_output("systemctl show -p User --value ddtree-sglang-router.service") == "ddtree"
    versions = json.loads(host.check_output(
        "/opt/ddtree/router-venv/bin/python -c \"import importlib.metadata as m, json; "
        "print(json.dumps(sorted((d.metadata['Name'].lower(), d.version) for d in m.distributions())))\""))
    assert ["smg", "1.13.0"] in versions and not [v for v in versions if v[0] == "sglang-router"], versions
    assert host.check_output("/opt/ddtree/router-venv/bin/smg --version").strip().endswith("1.13.0")
    cmd = host.check_output("systemctl show -p ExecStart --value ddtree-sglang-router.service")
    assert "-m smg launch" in cmd and "--max-concurrent-requests 0" in cmd and "--mini-lb" not in cmd, cmd
    assert host.socket("tcp://0.0.0.0:30080").is_listening


def test_the_gateway_is_live_and_ready(host):
    assert host.check_output("curl -sf http://127.0.0.1:30080/liveness") == "OK"
    ready = json.loads(host.check_output("curl -sf http://127.0.0.1:30080/readiness"))
    assert ready["status"] == "ready" and ready["healthy_workers"] == ready["total_workers"] == len(expected()), ready
    metrics = host.check_output("curl -sf http://127.0.0.1:29000/metrics")
    for url in expected():  # the series the monitoring rules read
        assert 'smg_worker_health{worker="%s"} 1' % url in metrics, metrics[:2000]


def test_workers_are_every_instance_of_the_gpu_hosts(host):
    assert workers(host) == expected()


def test_requests_reach_the_workers_through_the_router(host):
    for _ in range(3):
        out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                                "-d '{\"text\": \"hello\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
        assert json.loads(out)["text"]


REAL = ("rt-cpu", "rt-cpu2")


def real_requests(name):
    """Requests a real server has finished, from its own /metrics."""
    metrics = other(name).check_output("curl -sf http://127.0.0.1:30000/metrics")
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("sglang:num_requests_total"))


def server_info(name):
    return json.loads(other(name).check_output("curl -sf http://127.0.0.1:30000/server_info"))


def test_requests_reach_the_real_servers_through_the_router(host):
    for name in REAL:
        assert server_info(name)["version"] == "0.5.23"
    reach_both(host)
    # the gateway's in-flight count of a worker (the drain follows it to 0), a series from the worker's first request on
    metrics = host.check_output("curl -sf http://127.0.0.1:29000/metrics")
    for name in REAL:
        url = "http://%s:30000" % other(name).ansible.get_variables()["ansible_host"]
        assert 'smg_worker_requests_active{worker="%s"}' % url in metrics, metrics[:3000]


def reach_both(host):
    """Requests through the router until each real server has finished one more (its own /metrics)."""
    before = dict((name, real_requests(name)) for name in REAL)
    for i in range(40):  # distinct prompts spread over the five workers
        out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                                "-d '{\"text\": \"request %d of the fleet\", \"sampling_params\": {\"max_new_tokens\": 4}}'" % i)
        assert json.loads(out)["text"] is not None
        if all(real_requests(name) > before[name] for name in REAL):
            return
    raise AssertionError("40 requests through the router, not each real server got one: %s" %
                         dict((name, real_requests(name) - before[name]) for name in REAL))


def worker_state(host, url):
    return next(w for w in json.loads(host.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"] if w["url"] == url)


def wait_for(check, limit):
    """Seconds until check() holds, polled every 0.25 s; fails past limit."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "not within %d s" % limit
        time.sleep(0.25)
    return round(time.monotonic() - start, 1)


def test_a_hung_worker_leaves_the_gateway_within_seconds_and_returns(host):
    """sglang #21486: a rank 0 whose scheduler hangs (NCCL aborted a member) can keep answering /health 200, and the
    gateway's default check (/health) would keep routing to it. The stand-in on rt-w1 (port 30000) hangs while a file exists
    (hang_while): /health still answers 200, generation does not. With the role's settings (/health_generate every
    5 s, out after 2 failures, 5 s each) the gateway stops routing to it, requests keep succeeding on the other
    workers, and it returns once the hang ends. The seconds are measured and kept in reports/group-health.json."""
    w1 = other("rt-w1")
    url = "http://%s:30000" % w1.ansible.get_variables()["ansible_host"]
    hang = "/etc/ddtree-sglang-double/hang"
    w1.run_test("mkdir -p /etc/ddtree-sglang-double && rm -f %s && echo '%s' > /etc/ddtree-sglang-double/faults.json"
                % (hang, json.dumps([{"match": "--port 30000", "mode": "hang_while:%s" % hang}])))
    w1.run_test("systemctl restart sglang-double@30000.service")  # the stand-in's test unit (prepare.yml)
    wait_for(lambda: w1.run("curl -sf -m 2 http://127.0.0.1:30000/health_generate").rc == 0, 60)  # up again
    wait_for(lambda: worker_state(host, url)["is_healthy"], 60)
    try:
        w1.run_test("touch %s" % hang)
        start = time.monotonic()
        assert host.run("curl -s -o /dev/null -w '%%{http_code}' -m 3 %s/health" % url).stdout == "200"  # liveness lies
        assert host.run("curl -s -m 3 %s/health_generate" % url).rc == 28  # generation hangs (curl: timed out)
        wait_for(lambda: not worker_state(host, url)["is_healthy"], 60)
        out = round(time.monotonic() - start, 1)
        for i in range(8):  # the gateway routes around it (round robin would otherwise send it every fifth)
            r = host.run("curl -sf -m 20 -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                         "-d '{\"text\": \"while w1 hangs %d\", \"sampling_params\": {\"max_new_tokens\": 4}}'" % i)
            assert r.rc == 0, r.stderr
    finally:
        w1.run_test("rm -f %s" % hang)
    back = wait_for(lambda: worker_state(host, url)["is_healthy"], 60)
    w1.run_test("echo '[]' > /etc/ddtree-sglang-double/faults.json")
    measured = json.dumps({"hung_worker_out_s": out, "back_in_s": back, "settings": "interval 5 s, 2 failures, timeout 5 s"})
    # kept where the run's logs are (scripts/test: .work/measured/), the scenario's own directory goes with it
    for d in filter(None, [os.environ.get("DDTREE_WORK") and Path(os.environ["DDTREE_WORK"]) / "measured",
                           Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"]):
        d.mkdir(parents=True, exist_ok=True)
        (d / "group-health.json").write_text(measured + "\n")
    assert out <= 5 * 2 + 5 + 5, out  # interval x failures + one check's timeout, and the polling


def test_limited_runs_keep_every_worker(host):
    for limit in ("rt-router", "rt-w1"):
        r = playbook(CONVERGE, limit=limit)
        assert r.returncode == 0, r.text
        assert "changed=0" in r.text and "changed=1" not in r.text, r.text
        assert workers(host) == expected()


def test_a_rollout_under_load_cycles_both_real_servers_without_a_failed_request(host):
    """rollout.yml, limited to the real servers (as an operator limits a rollout), with a changed profile
    (max_running_requests 4 -> 3, so each server restarts) and two requests in flight through the
    router the whole time: each server is drained, redeployed, gated and rejoined in turn, and the
    probe saw every request answered; the record and the fleet report say how many ran."""
    reports = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
    before = dict((name, server_info(name)["max_running_requests"]) for name in REAL)
    assert before == {"rt-cpu": 4, "rt-cpu2": 4}
    r = playbook("playbooks/rollout.yml", "-e", json.dumps({"cpu_test_profile_overrides": {"max_running_requests": 3},
                                                            "ddtree_rollout_probe_concurrency": 2}),
                 limit="real_sglang")
    assert r.returncode == 0, r.text
    assert "0 failed (record:" in r.text, r.text
    for name in REAL:  # the new settings run, and both new servers are back in the router's rotation
        assert server_info(name)["max_running_requests"] == 3
    assert workers(host) == expected()
    reach_both(host)
    record = json.loads(Path(sorted(glob.glob(str(reports / "rollouts" / "*.json")))[-1]).read_text())
    assert record["outcome"] == "completed"
    probe = record["probe"]
    assert probe["failed_requests"] == 0 and probe["requests"] == probe["ok"] > 10 and probe["concurrency"] == 2, probe
    assert probe["stopped_by"] == "stop"
    for name in REAL:  # one at a time: drained (4 of the 5 workers left), deployed, rejoined (all 5)
        events = record["hosts"][name]
        assert [e["event"] for e in events] == ["drained", "deployed", "rejoined"], events
        assert events[0]["router_workers"] == 4 and events[-1]["router_workers"] == 5
        # the drain went through the gateway's drain state and ended with its in-flight count at 0
        (drain,) = events[0]["in_flight"]
        assert drain["url"] == "http://%s:30000" % other(name).ansible.get_variables()["ansible_host"], drain
        assert drain["status"] == "ready" and drain["outcome"] == "in-flight 0", drain
        assert drain["in_flight"][-1][1] == 0 and drain["seconds"] >= drain["in_flight"][-1][0], drain
    first, second = sorted(REAL, key=lambda n: record["hosts"][n][0]["at"])
    assert record["hosts"][first][-1]["at"] <= record["hosts"][second][0]["at"]  # never both out
    rep = playbook("playbooks/report.yml", limit=None)
    assert rep.returncode == 0, rep.text
    md = (reports / "fleet.md").read_text()
    assert "requests through the router while it ran: %d at concurrency 2, 0 failed" % probe["requests"] in md, md
