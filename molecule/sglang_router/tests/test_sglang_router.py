"""Verify sglang_router: the real router runs under systemd as the service user with the fleet's
workers (every instance of every GPU host, by address), routes requests to them, and a run
limited to the router (or to one worker) keeps every worker."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://rt-router"]
CONVERGE = "molecule/sglang_router/converge.yml"


def expected():
    out = []
    for name, ports in (("rt-w1", [30000]), ("rt-w2", [30000, 30001]), ("rt-cpu", [30000])):
        addr = other(name).ansible.get_variables()["ansible_host"]
        out += ["http://%s:%d" % (addr, p) for p in ports]
    return sorted(out)


def workers(host):
    return sorted(w["url"] for w in json.loads(host.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"])


def test_router_runs_pinned_as_the_service_user(host):
    svc = host.service("ddtree-sglang-router.service")
    assert svc.is_running and svc.is_enabled
    assert host.check_output("systemctl show -p User --value ddtree-sglang-router.service") == "ddtree"
    version = host.check_output("/opt/ddtree/router-venv/bin/python -c \"import importlib.metadata as m; "
                                "print(m.version('sglang-router'))\"")
    assert version == "0.3.2"
    assert host.socket("tcp://0.0.0.0:30080").is_listening


def test_workers_are_every_instance_of_the_gpu_hosts(host):
    assert workers(host) == expected()


def test_requests_reach_the_workers_through_the_router(host):
    for _ in range(3):
        out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                                "-d '{\"text\": \"hello\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
        assert json.loads(out)["text"]


def real_requests():
    """Requests the real server (rt-cpu) has finished, from its own /metrics."""
    metrics = other("rt-cpu").check_output("curl -sf http://127.0.0.1:30000/metrics")
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("sglang:num_requests_total"))


def test_requests_reach_the_real_server_through_the_router(host):
    assert json.loads(other("rt-cpu").check_output("curl -sf http://127.0.0.1:30000/server_info"))["version"] == "0.5.23"
    before = real_requests()
    for i in range(40):  # distinct prompts spread over the four workers
        out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                                "-d '{\"text\": \"request %d of the fleet\", \"sampling_params\": {\"max_new_tokens\": 4}}'" % i)
        assert json.loads(out)["text"] is not None
        if real_requests() > before:
            return
    raise AssertionError("40 requests through the router, none reached the real server")


def test_limited_runs_keep_every_worker(host):
    for limit in ("rt-router", "rt-w1"):
        r = playbook(CONVERGE, limit=limit)
        assert r.returncode == 0, r.text
        assert "changed=0" in r.text and "changed=1" not in r.text, r.text
        assert workers(host) == expected()
