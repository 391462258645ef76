"""ddtree.fleet.load_probe: the rollout's request probe, against a small local HTTP server that answers
/generate like SGLang (or fails on the requests a test chooses). The real router and servers are
exercised by the router scenario of molecule, where a rollout runs under this probe."""
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Server:
    def __init__(self, fail=lambda n: False):
        self.n = 0
        self.bodies = []
        self.answered = threading.Event()  # set once a request was answered: the probe is running
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.n += 1
                    n = outer.n
                    outer.bodies.append((self.path, body))
                if fail(n):
                    self.send_response(503)
                    self.end_headers()
                    self.wfile.write(b"no worker available")
                    return
                out = json.dumps({"text": " ok", "meta_info": {}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                outer.answered.set()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server():
    made = []

    def make(**kw):
        s = Server(**kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def test_counts_every_request_until_the_deadline(run_module, server, tmp_path):
    s = server()
    r = run_module("load_probe", url=s.url, concurrency=2, max_seconds=2, state_dir=str(tmp_path / "probe"))
    assert not r.get("failed"), r
    assert r["stopped_by"] == "max_seconds" and r["failed_requests"] == 0 and r["failures"] == []
    assert r["requests"] == r["ok"] == s.n > 4  # what the server saw is what the probe counted
    assert r["latency_p50_s"] is not None and r["latency_p99_s"] >= r["latency_p50_s"]
    path, body = s.bodies[0]
    assert path == "/generate" and body["sampling_params"] == {"max_new_tokens": 8, "temperature": 0}
    status = json.loads((tmp_path / "probe" / "status.json").read_text())
    assert status["running"] is False and status["requests"] == r["requests"]


def test_the_stop_signal_ends_it(run_module, server, tmp_path):
    s = server()
    state = tmp_path / "probe"
    state.mkdir()
    (state / "stop").write_text("")  # a stale signal from an earlier rollout is cleared at the start

    def signal_once_running():
        # not on a timer: however long the module takes to start, the signal comes after the probe
        # cleared the stale one and a request was answered (bounded: the probe ends by itself at 120 s)
        if s.answered.wait(timeout=110):
            (state / "stop").write_text("")
    signaller = threading.Thread(target=signal_once_running, daemon=True)
    signaller.start()
    r = run_module("load_probe", url=s.url, max_seconds=120, state_dir=str(state))
    signaller.join(timeout=5)
    # ok > 0: the stale signal was cleared (else it stops before the first request); stop: it obeyed the new one
    assert r["stopped_by"] == "stop" and r["ok"] > 0 and r["failed_requests"] == 0, r


def test_failed_requests_fail_it_with_the_counts_and_the_first_reason(run_module, server, tmp_path):
    s = server(fail=lambda n: n in (3, 4))
    r = run_module("load_probe", url=s.url, max_seconds=2, state_dir=str(tmp_path / "probe"))
    assert r["failed"] and r["failed_requests"] == 2 and r["ok"] == r["requests"] - 2
    assert "2 of %d requests through %s failed" % (r["requests"], s.url) in r["msg"]
    assert "HTTP 503: no worker available" in r["msg"]
    r = run_module("load_probe", url=s.url, max_seconds=1, max_failed=5, state_dir=str(tmp_path / "probe"))
    assert not r.get("failed") and r["failed_requests"] == 0  # the server fails only requests 3 and 4


def test_a_refused_connection_is_a_failure(run_module, tmp_path):
    from helpers import free_port
    r = run_module("load_probe", url="http://127.0.0.1:%d" % free_port(), max_seconds=1, state_dir=str(tmp_path / "p"))
    assert r["failed"] and r["ok"] == 0 and r["failed_requests"] == r["requests"] > 0
    assert "Connection refused" in r["failures"][0]["error"]


def test_an_earlier_probe_still_running_is_stopped_first(run_module, server, tmp_path):
    s = server()
    state = tmp_path / "probe"
    state.mkdir()
    earlier = subprocess.Popen(["sleep", "120"])  # an interrupted rollout's probe that ignores the signal
    (state / "status.json").write_text(json.dumps({"running": True, "pid": earlier.pid}))
    start = time.time()
    r = run_module("load_probe", url=s.url, max_seconds=1, request_timeout=0.5, state_dir=str(state))
    assert r["stopped_earlier_probe"] == earlier.pid and earlier.wait(timeout=10) == -15
    assert r["stopped_by"] == "max_seconds" and time.time() - start > 5  # it waited for it to stop on its own first


def test_check_mode_sends_nothing(run_module, server, tmp_path):
    s = server()
    r = run_module("load_probe", check=True, url=s.url, max_seconds=5, state_dir=str(tmp_path / "probe"))
    assert r["stopped_by"] == "check_mode" and r["requests"] == 0 and s.n == 0
    assert not (tmp_path / "probe").exists()


def test_bad_settings_are_refused(run_module, tmp_path):
    r = run_module("load_probe", url="http://127.0.0.1:9", concurrency=0, state_dir=str(tmp_path / "probe"))
    assert r["failed"] and "must be at least 1 (got 0, 8, 7200)" in r["msg"]
