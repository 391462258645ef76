"""router_workers against a stand-in of smg 1.13's worker REST API (TEST DOUBLE, below), modelled on what the real
gateway did (../shared/reference/smg-1.13-notes.md section 2, and the same calls run against the real smg 1.13.0 wheel):
POST /workers is create-only (409 with the existing id, also while the worker still registers), a registering worker
is `pending` and not listed, ids are new UUIDs on every add, DELETE of a ready worker makes it `draining` for its
health.drain_settle_secs (then the gateway removes it by itself), DELETE of a draining or unhealthy worker removes it
at once, and `load` is the gateway's count of the worker's in-flight requests. The router's molecule scenario runs the module
against the real gateway."""
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Gateway:
    """TEST DOUBLE of smg 1.13's worker API. Workers: id -> dict(url, status, load, settle, ...)."""

    def __init__(self, register_s=0.3):
        self.workers, self.calls, self.lock = {}, [], threading.Lock()
        self.register_s = register_s
        gw = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, code, body):
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def handle_any(self, method):
                body = self.body() if method in ("POST", "PATCH") else None
                with gw.lock:
                    gw.calls.append((method, self.path, body, self.headers.get("Authorization")))
                    gw.tick()
                    code, out = gw.route(method, self.path, body)
                self.reply(code, out)

            def do_GET(self):
                self.handle_any("GET")

            def do_POST(self):
                self.handle_any("POST")

            def do_PATCH(self):
                self.handle_any("PATCH")

            def do_DELETE(self):
                self.handle_any("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.api = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def tick(self):
        now = time.time()
        for wid, w in list(self.workers.items()):
            if w["status"] == "pending" and now >= w["ready_at"]:
                w["status"] = "ready"
            if w["status"] == "draining" and now >= w["remove_at"]:
                del self.workers[wid]  # the settle time is over: removed, in flight or not
            if w.get("load_until") and now >= w["load_until"]:
                w["load"], w["load_until"] = 0, None

    def info(self, w):
        return {k: v for k, v in w.items() if k in ("id", "url", "status", "load")}

    def route(self, method, path, body):
        parts = path.strip("/").split("/")
        if parts == ["workers"] and method == "GET":
            listed = [self.info(w) for w in self.workers.values() if w["status"] != "pending"]
            return 200, {"workers": listed, "total": len(listed), "stats": {}}
        if parts == ["workers"] and method == "POST":
            for w in self.workers.values():
                if w["url"] == body["url"]:
                    return 409, {"error": "Worker already exists at URL '%s' with ID %s. Use PUT /workers/%s to replace or "
                                          "PATCH /workers/%s to update." % (w["url"], w["id"], w["id"], w["id"]),
                                 "code": "WORKER_ALREADY_EXISTS"}
            wid = str(uuid.uuid4())
            self.workers[wid] = dict(id=wid, url=body["url"], status="pending", load=0, settle=5,
                                     ready_at=time.time() + self.register_s)
            return 202, {"status": "accepted", "worker_id": wid, "url": body["url"], "location": "/workers/" + wid}
        if len(parts) == 2 and parts[0] == "workers":
            w = self.workers.get(parts[1])
            if w is None:
                return 404, {"error": "Worker %s not found" % parts[1], "code": "WORKER_NOT_FOUND"}
            if method == "GET":
                return 200, self.info(w)
            if method == "PATCH":
                w["settle"] = body.get("health", {}).get("drain_settle_secs", w["settle"])
                return 202, {"status": "accepted", "worker_id": w["id"]}
            if method == "DELETE":
                if w["status"] == "ready":
                    w["status"], w["remove_at"] = "draining", time.time() + w["settle"]
                else:
                    del self.workers[w["id"]]
                return 202, {"status": "accepted", "worker_id": w["id"]}
        return 400, {"error": "bad request", "code": "BAD_REQUEST"}

    def have(self, url, status="ready", load=0, load_for=None):
        wid = str(uuid.uuid4())
        self.workers[wid] = dict(id=wid, url=url, status=status, load=load, settle=5, ready_at=0, remove_at=time.time() + 5,
                                 load_until=time.time() + load_for if load_for else None)
        return wid

    def by_url(self):
        return dict((w["url"], w) for w in self.workers.values())

    def posts(self):
        return [c for c in self.calls if c[0] == "POST"]


@pytest.fixture
def gateway():
    g = Gateway()
    yield g
    g.server.shutdown()


A, B, C = "http://10.0.0.5:30000", "http://10.0.0.5:30001", "http://10.0.0.6:30000"


def test_add_registers_what_the_gateway_lacks_waits_until_ready_and_then_changes_nothing(run_module, gateway):
    gateway.have(A)
    pending = gateway.route("POST", "/workers", {"url": B})[1]["worker_id"]  # still registering: not listed, 409 on POST
    gateway.workers[pending]["ready_at"] = time.time() + 4
    r = run_module("router_workers", api=gateway.api, op="add", urls=[A, B, C], interval=0.1)
    assert r["changed"] and r["added"] == [C], r
    assert sorted(r["urls"]) == [A, B, C] and r["routable"] == 3
    assert gateway.by_url()[B]["id"] == pending  # the registering one was waited for, not posted twice
    assert [c[2]["url"] for c in gateway.posts()] == [B, C]  # B: the 409, answered with its id
    n = len(gateway.calls)
    r = run_module("router_workers", api=gateway.api, op="add", urls=[A, B, C])
    assert not r["changed"] and r["added"] == [] and not [c for c in gateway.calls[n:] if c[0] != "GET"], r


def test_drain_waits_for_the_in_flight_count_to_reach_zero_then_removes(run_module, gateway):
    gateway.have(A, load=2, load_for=10)
    gateway.have(B)
    old = gateway.by_url()[A]["id"]
    start = time.time()
    r = run_module("router_workers", api=gateway.api, op="drain", urls=[A], timeout=60, drain_settle=120, interval=0.1)
    assert r["changed"] and r["urls"] == [B] and r["routable"] == 1, r
    (d,) = r["drained"]
    assert d["url"] == A and d["status"] == "ready" and d["outcome"] == "in-flight 0", d
    assert d["in_flight"][0] == [0.0, 2] and d["in_flight"][-1][1] == 0 and 0 < d["seconds"] <= 10, d
    assert time.time() - start < 60  # ended at 0 in flight, not after the 120 s settle time
    # the order the gateway saw: the settle time, the DELETE that drains, and once at 0 the DELETE that removes
    writes = [(c[0], c[1], c[2]) for c in gateway.calls if c[0] in ("PATCH", "DELETE")]
    assert writes == [("PATCH", "/workers/" + old, {"health": {"drain_settle_secs": 120}}),
                      ("DELETE", "/workers/" + old, None), ("DELETE", "/workers/" + old, None)], writes
    r = run_module("router_workers", api=gateway.api, op="drain", urls=[A])
    assert not r["changed"] and r["drained"] == []
    # back in: a new id (looked up by URL, never kept)
    r = run_module("router_workers", api=gateway.api, op="add", urls=[A], interval=0.1)
    assert r["added"] == [A] and gateway.by_url()[A]["id"] != old


def test_a_drain_that_does_not_reach_zero_fails_and_the_worker_stays_out(run_module, gateway):
    gateway.have(A, load=1)
    r = run_module("router_workers", api=gateway.api, op="drain", urls=[A], timeout=2, drain_settle=60, interval=0.2)
    assert r["failed"] and "did not reach 0 in 2s" in r["msg"] and "%s (1 in flight)" % A in r["msg"], r
    assert gateway.by_url()[A]["status"] == "draining"


def test_a_gateway_that_removes_the_worker_with_requests_in_flight_is_named(run_module, gateway):
    gateway.have(A, load=1)
    r = run_module("router_workers", api=gateway.api, op="drain", urls=[A], timeout=30, drain_settle=1, interval=0.2)
    assert r["failed"] and "removed %s while requests were in flight" % A in r["msg"] and "drain_settle" in r["msg"], r


def test_unhealthy_workers_leave_at_once_and_a_draining_one_is_removed_before_it_is_added_again(run_module, gateway):
    gateway.have(A, status="not_ready")
    r = run_module("router_workers", api=gateway.api, op="drain", urls=[A], interval=0.1)
    assert r["drained"][0]["outcome"].startswith("removed (not_ready") and r["urls"] == [], r
    assert not [c for c in gateway.calls if c[0] == "PATCH"]
    gateway.have(B, status="draining")
    r = run_module("router_workers", api=gateway.api, op="add", urls=[B], interval=0.1)
    assert r["changed"] and r["added"] == [B] and gateway.by_url()[B]["status"] == "ready", r


def test_check_mode_reads_only(run_module, gateway):
    gateway.have(A, load=3)
    r = run_module("router_workers", check=True, api=gateway.api, op="drain", urls=[A, B])
    assert r["changed"] and r["drained"][0]["outcome"] == "check mode" and r["drained"][0]["in_flight"] == [[0.0, 3]], r
    r = run_module("router_workers", check=True, api=gateway.api, op="add", urls=[A, B])
    assert r["changed"] and r["added"] == [B]
    assert [c[0] for c in gateway.calls] == ["GET", "GET"] and gateway.by_url()[A]["status"] == "ready"


def test_the_api_key_goes_in_a_header_only(run_module, gateway):
    r = run_module("router_workers", api=gateway.api, api_key="s3cret-key")
    assert not r["changed"] and r["urls"] == []
    assert gateway.calls[0][3] == "Bearer s3cret-key"
    assert "s3cret-key" not in json.dumps(r)


def test_a_gateway_that_is_not_smg_is_named(run_module):
    r = run_module("router_workers", api="http://127.0.0.1:9")
    assert r["failed"] and "does not answer GET /workers" in r["msg"], r
