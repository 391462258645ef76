"""Verify the rollout behind the real sglang-router: one host made to fail its health gate is
rolled back and kept out of the router, the canary is updated, the host after the failure is
untouched, and a watcher sampling the router sees at least N - 1 workers the whole time."""
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import other, playbook  # noqa: E402

testinfra_hosts = ["ansible://rt-router"]
GPU = ["rt-b300-1", "rt-b300-2", "rt-rtx-1"]


def url_of(name):
    return "http://%s:30000" % other(name).ansible.get_variables()["ansible_host"]


def workers(router):
    return json.loads(router.check_output("curl -sf http://127.0.0.1:30080/workers"))["workers"]


def release(name):
    return other(name).check_output("basename $(readlink -f /opt/ddtree/service/main/current)")


def info(name):
    return json.loads(other(name).check_output("curl -sf http://127.0.0.1:30000/server_info"))


def test_router_starts_with_every_instance(host):
    urls = sorted(w["url"] for w in workers(host))
    assert urls == sorted(url_of(n) for n in GPU)
    assert host.service("ddtree-sglang-router.service").is_running
    # a request through the router reaches a worker
    out = host.check_output("curl -sf -X POST http://127.0.0.1:30080/generate -H 'Content-Type: application/json' "
                            "-d '{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
    assert json.loads(out)["text"] == "tok tok tok tok"


def test_rollout_with_a_failing_host(host):
    before = {n: release(n) for n in GPU}
    other("rt-b300-2").run_test("mkdir -p /etc/ddtree-sglang-double && echo '%s' > /etc/ddtree-sglang-double/faults.json"
                                % json.dumps([{"match": "--max-running-requests 100", "mode": "unhealthy"}]))
    samples, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            samples.append(len(workers(host)))
            time.sleep(0.3)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = playbook("playbooks/rollout.yml", "-e", json.dumps({
            "nvidia_facts_profile_overrides": {"min_ram_gib": 1, "max_running_requests": 100}, "ddtree_rollout_batch": 1}))
    finally:
        stop.set()
        watcher.join()
    assert r.returncode != 0 and "rt-b300-2" in r.text and "failed its health gate" in r.text, r.text
    # canary: updated, serving the new settings, back in the router
    assert release("rt-b300-1") != before["rt-b300-1"] and info("rt-b300-1")["max_running_requests"] == 100
    # the failing host: its previous release restored and healthy, but kept out of the router
    assert release("rt-b300-2") == before["rt-b300-2"] and info("rt-b300-2")["max_running_requests"] == 128
    # after the failure: untouched
    assert release("rt-rtx-1") == before["rt-rtx-1"] and info("rt-rtx-1")["max_running_requests"] == 128
    urls = sorted(w["url"] for w in workers(host))
    assert urls == sorted([url_of("rt-b300-1"), url_of("rt-rtx-1")])
    assert samples and min(samples) >= len(GPU) - 1, samples  # capacity never below N - batch
