"""The day-two loop's event source (extensions/eda/plugins/event_source/alertmanager.py): Alertmanager's webhook
payload checked field by field, and its HTTP receiver run for real on 127.0.0.1 against a real HTTP client (the
standard library's), hostile input included. No ansible-rulebook here: tests/unit/test_day2_loop.py runs the loop."""
import asyncio
import http.client
import json
import socket
import threading
import time

import pytest

from ansible_collections.ddtree.fleet.extensions.eda.plugins.event_source import alertmanager as am


def alert(status="firing", **labels):
    base = {"alertname": "GPUXidRefused", "host": "b300-1", "severity": "critical"}
    base.update(labels)
    return {"status": status, "labels": dict((k, v) for k, v in base.items() if v is not None),
            "annotations": {"summary": "GPU 0 on b300-1 reported Xid 79"}, "startsAt": "2026-12-08T10:00:00.123Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom/graph", "fingerprint": "8a1c2f0e9b7d6a5c"}


def payload(*alerts, **over):
    body = {"version": "4", "groupKey": "{}:{alertname=\"GPUXidRefused\"}", "truncatedAlerts": 0, "status": "firing",
            "receiver": "ddtree-day2", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am", "alerts": list(alerts)}
    body.update(over)
    return json.dumps(body).encode()


def test_one_event_per_alert_with_the_checked_fields_only():
    events, dropped = am.check_payload(payload(alert(), alert(alertname="SGLangAcceptLengthUnderFloor", host="rtxpro-1",
                                                              sglang_instance="main", family="rtx_pro_6000")))
    assert dropped == []
    assert events[0] == {"alert": {"alertname": "GPUXidRefused", "status": "firing", "host": "b300-1", "instance": "",
                                   "serving_group": "", "severity": "critical", "summary": "GPU 0 on b300-1 reported Xid 79",
                                   "fingerprint": "8a1c2f0e9b7d6a5c", "starts_at": "2026-12-08T10:00:00.123Z",
                                   "receiver": "ddtree-day2"}}
    assert events[1]["alert"]["instance"] == "main" and "family" not in events[1]["alert"]  # unused labels stay out


@pytest.mark.parametrize("label, value", [
    ("host", "{{ lookup('pipe', 'touch /tmp/pwned') }}"),
    ("host", "b300-1; rm -rf /"),
    ("host", "$(id)"),
    ("host", "`id`"),
    ("host", "-oProxyCommand=sh"),
    ("host", "b300-1 b300-2"),
    ("host", "b300-1\n"),
    ("host", "x" * 300),
    ("host", "b3\u00f600"),
    ("sglang_instance", "main{% raw %}"),
    ("sglang_instance", "../../etc"),
    ("serving_group", "g|sh"),
    ("alertname", "GPUXidRefused{{1}}"),
    ("alertname", None),
    ("host", 7),
    ("serving_group", ["g1"]),
])
def test_a_hostile_label_drops_its_alert_and_keeps_the_others(label, value):
    events, dropped = am.check_payload(payload(alert(**{label: value}), alert(host="b300-2")))
    assert [e["alert"]["host"] for e in events] == ["b300-2"]
    assert len(dropped) == 1 and dropped[0].startswith("alert 0: ") and label.replace("sglang_", "") in dropped[0], dropped


@pytest.mark.parametrize("change, says", [
    ({"status": "pending"}, "status 'pending'"),
    ({"status": None}, "status None"),
    ({"labels": ["alertname"]}, "labels is list"),
    ({"labels": {"alertname": "A", "host": 7}}, "labels.host is int, not a string"),
    ({"annotations": ["summary"]}, "annotations is list"),
    ({"annotations": {"summary": 5}}, "annotations.summary is int, not a string"),
])
def test_a_malformed_alert_is_dropped_naming_the_field(change, says):
    bad = dict(alert(), **change)
    events, dropped = am.check_payload(payload(bad))
    assert events == [] and says in dropped[0], dropped


def test_free_text_loses_jinja_delimiters_and_control_characters_and_is_capped():
    a = alert()
    a["annotations"]["summary"] = "Xid {{ lookup('pipe', 'id') }} {% for x in y %}\x1b[31m\r\nnext {# c #}" + "y" * 400
    text = am.check_payload(payload(a))[0][0]["alert"]["summary"]
    assert "{" not in text and "}" not in text and "\x1b" not in text and "\n" not in text
    assert text.startswith("Xid lookup('pipe', 'id') % for x in y % [31m next # c #yyy") and len(text) == 300
    assert am.clean_text(7) == ""


@pytest.mark.parametrize("body, says", [
    (b"not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b'{"version": "4", "alerts": [NaN]}', "NaN"),
    (b"[1, 2]", "list, not an object"),
    (payload(version="3"), "version is '3'"),
    (payload(version=4), "version is 4"),
    (json.dumps({"version": "4", "alerts": {"a": 1}}).encode(), "alerts is dict"),
    (json.dumps({"version": "4"}).encode(), "alerts is NoneType"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
])
def test_a_payload_that_is_not_alertmanagers_is_refused_whole(body, says):
    with pytest.raises(am.PayloadError, match=".*") as err:
        am.check_payload(body)
    assert says in str(err.value)


def test_only_the_fields_a_rule_uses_can_drop_an_alert():
    odd = alert(severity="CRIT'", gpu="0")
    odd["labels"].update({"bad-name": "x", "long": "y" * 5000})
    odd["labels"]["count"] = 7
    odd["labels"].update(("l%d" % i, "v") for i in range(70))
    odd.update(fingerprint="zz", startsAt="yesterday; id")
    odd["annotations"].update(description=["not", "text"])
    events, dropped = am.check_payload(payload(odd))
    assert dropped == [] and len(events) == 1
    e = events[0]["alert"]
    assert (e["host"], e["severity"], e["fingerprint"], e["starts_at"]) == ("b300-1", "", "", "")
    assert "gpu" not in e and "long" not in e
    long_summary = alert()
    long_summary["annotations"]["summary"] = "x" * 5000
    assert am.check_payload(payload(long_summary))[0][0]["alert"]["summary"] == "x" * 300


def test_over_max_alerts_the_first_are_taken_and_the_rest_logged():
    events, dropped = am.check_payload(payload(*[alert(host="b300-%d" % i) for i in range(7)]), max_alerts=5)
    assert [e["alert"]["host"] for e in events] == ["b300-%d" % i for i in range(5)]
    assert dropped == ["alerts 5 to 6: over max_alerts 5, left out (the first 5 taken)"]


def test_a_vault_marker_does_not_survive_the_summary():
    a = alert()
    a["annotations"]["summary"] = "$ANSIBLE_VAULT;1.1;AES256\n6162636465 costs $5"
    text = am.check_payload(payload(a))[0][0]["alert"]["summary"]
    assert "$" not in text and "ANSIBLE_VAULT" in text


def test_the_allow_list_drops_hosts_outside_it(tmp_path):
    events, dropped = am.check_payload(payload(alert(host="b300-1"), alert(host="ghost-1"), alert(host=None)),
                                       hosts=frozenset(["b300-1", "b300-2"]))
    assert [e["alert"]["host"] for e in events] == ["b300-1", ""]  # no host label: nothing acts on it anyway
    assert len(dropped) == 1 and "host='ghost-1' is not a host of the allow-list" in dropped[0]
    lines = tmp_path / "hosts"
    lines.write_text("# gpu_hosts\nb300-1\n\n  b300-2  # the second\n")
    assert am.read_hosts(str(lines)) == {"b300-1", "b300-2"}
    listing = tmp_path / "inventory.json"  # ansible-inventory -i INV --list
    listing.write_text(json.dumps({"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped", "gpu_hosts", "routers"]},
                                   "gpu_hosts": {"hosts": ["rtxpro-1"], "children": ["b300"]}, "b300": {"hosts": ["b300-1", "b300-2"]},
                                   "routers": {"hosts": ["router"]}}))
    assert am.read_hosts(str(listing)) == {"rtxpro-1", "b300-1", "b300-2"}
    listing.write_text('["100", "0"]')
    assert am.read_hosts(str(listing)) == {"100", "0"}
    for bad in ("b300-1\n$(id)\n", "", '{"all": {}}'):
        lines.write_text(bad)
        with pytest.raises(ValueError):
            am.read_hosts(str(lines))


def test_the_token_bucket_allows_a_burst_then_its_rate():
    now = [0.0]
    bucket = am.TokenBucket(30, clock=lambda: now[0])
    assert sum(bucket.take() for _try in range(40)) == 30
    now[0] += 120  # two minutes: one more (30 an hour)
    assert bucket.take() and not bucket.take()
    now[0] += 10 * 3600
    assert sum(bucket.take() for _try in range(40)) == 30  # never more than the burst


def test_the_token_comes_from_a_file_or_the_environment_never_empty(tmp_path):
    assert am.read_token({}) is None
    f = tmp_path / "token"
    f.write_text("s3cret-s3cret-s3cret\nignored\n")
    f.chmod(0o640)
    assert am.read_token({"token_file": str(f)}) == "s3cret-s3cret-s3cret"
    assert am.read_token({"token_env": "AM_TOKEN"}, {"AM_TOKEN": "t" * 20}) == "t" * 20
    for args, env in (({"token_env": "AM_TOKEN"}, {}), ({"token_env": "AM_TOKEN"}, {"AM_TOKEN": "short"}),
                      ({"token_file": str(f), "token_env": "AM_TOKEN"}, {})):
        with pytest.raises(ValueError):
            am.read_token(args, env)
    with pytest.raises(OSError):
        am.read_token({"token_file": str(tmp_path / "absent")})


@pytest.mark.parametrize("mode, text", [(0o644, "s3cret-s3cret-s3cret"), (0o602, "s3cret-s3cret-s3cret"),
                                        (0o600, "s3cret-s3cret-s3cr\u00e9t"), (0o600, "s3cret s3cret s3cret"),
                                        (0o600, "s3cret-s3cret-\x7fs3cret")])
def test_a_token_others_can_read_or_not_printable_ascii_is_refused(tmp_path, mode, text):
    f = tmp_path / "token"
    f.write_text(text + "\n", encoding="utf-8")
    f.chmod(mode)
    with pytest.raises(ValueError):
        am.read_token({"token_file": str(f)})
    with pytest.raises(ValueError):
        if mode == 0o600:
            am.read_token({"token_env": "T"}, {"T": text})
        else:
            raise ValueError("the environment has no mode")


@pytest.fixture
def receiver(monkeypatch):
    """serve(args) -> (port, events, server): the source on 127.0.0.1, a port of its own, in a loop thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers = []

    def start(**args):
        events = []

        async def put(event):
            events.append(event)
        server = asyncio.run_coroutine_threadsafe(am.serve(put, dict({"port": 0, "allow_unauthenticated": True}, **args)),
                                                  loop).result(10)
        servers.append(server)
        return server.sockets[0].getsockname()[1], events, server
    yield start
    for server in servers:
        loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def post(port, body, path="/alerts", method="POST", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def raw(port, data, wait=10):
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        return s.recv(4096).split(b"\r\n")[0]


def test_the_receiver_queues_good_alerts_and_refuses_the_rest_over_real_http(receiver):
    port, events, server = receiver()
    assert post(port, payload(alert(), alert(host="{{ 7*6 }}"))) == (200, {"accepted": 1, "dropped": [
        "alert 1: label host='{{ 7*6 }}' is not of the form %s" % am.NAME_RE.pattern]})
    assert [e["alert"]["host"] for e in events] == ["b300-1"]
    assert post(port, b"{", )[0] == 400
    assert post(port, payload(alert()), path="/other")[0] == 404
    assert post(port, None, method="GET")[0] == 405
    assert post(port, payload(alert()), headers={"Content-Type": "text/plain"})[0] == 415
    # sizes: the body is refused by its Content-Length before it is read; the headers by the stream's limit
    assert raw(port, b"POST /alerts HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n") == b"HTTP/1.1 413 Payload Too Large"
    assert raw(port, b"POST /alerts HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n") == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert raw(port, b"POST /alerts HTTP/1.1\r\n\r\n") == b"HTTP/1.1 411 Length Required"
    assert raw(port, b"POST /alerts HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") == b"HTTP/1.1 501 Not Implemented"
    assert raw(port, b"\x00\x01 garbage\r\n\r\n") == b"HTTP/1.1 400 Bad Request"
    # a client that stops half way through its body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /alerts HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"version\"")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    socket.create_connection(("127.0.0.1", port), timeout=10).close()  # a port probe: no answer, not counted
    assert post(port, payload(alert(host="rtxpro-1")))[0] == 200  # still serving
    assert [e["alert"]["host"] for e in events] == ["b300-1", "rtxpro-1"]
    assert server.receiver.refused == 10


def test_a_slow_client_is_cut_off(receiver, monkeypatch):
    monkeypatch.setattr(am, "READ_TIMEOUT_S", 0.5)
    port, events, _server = receiver()
    start = time.monotonic()
    assert raw(port, b"POST /alerts HTTP/1.1\r\nContent-Length: 10\r\n\r\n{") == b"HTTP/1.1 408 Request Timeout"
    assert time.monotonic() - start < 5 and events == []


def test_with_a_token_only_the_bearer_of_it_is_heard(receiver, tmp_path):
    f = tmp_path / "token"
    f.write_text("0123456789abcdef0123\n")
    f.chmod(0o600)
    port, events, _server = receiver(token_file=str(f))
    assert post(port, payload(alert()))[0] == 401
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef012"})[0] == 401
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef0123\u00e9"})[0] == 401
    assert events == []
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef0123"})[0] == 200
    assert len(events) == 1


def test_headers_must_come_within_two_seconds(receiver):
    port, events, _server = receiver()  # READ_TIMEOUT_S as shipped (10 s): the header deadline cuts first
    start = time.monotonic()
    assert raw(port, b"POST /alerts HTTP/1.1\r\nContent-Length: 10\r\nX-Slow: ") == b"HTTP/1.1 408 Request Timeout"
    assert time.monotonic() - start < am.READ_TIMEOUT_S / 2 and am.HEADER_TIMEOUT_S <= 2 and events == []


def test_connections_are_capped_per_peer(receiver, monkeypatch):
    monkeypatch.setattr(am, "MAX_CONNECTIONS_PER_PEER", 2)
    port, events, _server = receiver()
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _n in range(2)]
    try:
        time.sleep(0.2)
        start = time.monotonic()
        assert raw(port, b"") == b"HTTP/1.1 503 Service Unavailable"  # answered at once, not after a deadline
        assert time.monotonic() - start < 1
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert post(port, payload(alert()))[0] == 200 and len(events) == 1
    assert am.MAX_CONNECTIONS > am.MAX_CONNECTIONS_PER_PEER


@pytest.mark.parametrize("length", [b"\xb2", b"1\xb9", "\u0661".encode(), b"+5", b"-1", b"0x10", b"12345678901", b" "])
def test_a_content_length_not_of_ascii_digits_is_refused_and_the_source_serves_on(receiver, length):
    port, events, _server = receiver()  # headers are read as Latin-1: b"\xb2" is '\u00b2', which str.isdigit() takes
    assert raw(port, b"POST /alerts HTTP/1.1\r\nContent-Length: " + length + b"\r\n\r\n") == b"HTTP/1.1 411 Length Required"
    assert post(port, payload(alert()))[0] == 200 and len(events) == 1


def test_any_error_in_a_request_is_answered_400_and_the_source_serves_on(receiver, monkeypatch):
    port, events, server = receiver()

    def boom(*_args):
        raise RuntimeError("surprise")
    monkeypatch.setattr(am, "check_payload", boom)
    assert post(port, payload(alert()))[0] == 400
    monkeypatch.undo()
    assert post(port, payload(alert()))[0] == 200 and len(events) == 1 and server.receiver.refused == 1


def test_without_a_token_it_starts_only_on_loopback_when_told_to():
    async def put(_event):
        pass

    async def start(args):
        server = await am.serve(put, dict({"port": 0}, **args))
        server.close()
        await server.wait_closed()
    for args in ({}, {"token_file": ""}, {"allow_unauthenticated": False}, {"allow_unauthenticated": "no"},
                 {"host": "0.0.0.0", "allow_unauthenticated": True}):
        with pytest.raises(ValueError, match="no token_file or token_env"):
            asyncio.run(start(args))
    for args in ({"allow_unauthenticated": True}, {"host": "::1", "allow_unauthenticated": "true"},
                 {"host": "localhost", "allow_unauthenticated": True}):
        asyncio.run(start(args))


def test_at_most_max_events_per_hour_firing_events_are_queued(receiver):
    port, events, _server = receiver(max_events_per_hour=2)
    status, answer = post(port, payload(*[alert(host="b300-%d" % i) for i in range(4)] + [alert(status="resolved")]))
    assert status == 200 and answer["accepted"] == 3
    assert [(e["alert"]["host"], e["alert"]["status"]) for e in events] == [
        ("b300-0", "firing"), ("b300-1", "firing"), ("b300-1", "resolved")]
    assert [d.split(":")[0] for d in answer["dropped"]] == [
        "GPUXidRefused host='b300-2' instance='' serving_group=''", "GPUXidRefused host='b300-3' instance='' serving_group=''"]
    assert all("over max_events_per_hour 2" in d for d in answer["dropped"])


@pytest.fixture
def prometheus():
    """A stand-in for Prometheus' /api/v1/query on 127.0.0.1: answers the ALERTS series in .firing, records queries."""
    import http.server
    import urllib.parse

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            server.queries.append((url.path, urllib.parse.parse_qs(url.query).get("query")))
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": dict({"__name__": "ALERTS", "alertstate": "firing"}, **m), "value": [1, "1"]}
                for m in server.firing]}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.firing, server.queries = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_with_prometheus_url_only_alerts_firing_in_prometheus_are_queued(receiver, prometheus):
    prometheus.firing = [{"alertname": "GPUXidRefused", "host": "b300-1", "gpu": "0", "severity": "critical"},
                         {"alertname": "SGLangAcceptLengthUnderFloor", "host": "rtxpro-1", "sglang_instance": "main"}]
    port, events, _server = receiver(prometheus_url="http://127.0.0.1:%d/" % prometheus.server_address[1])
    status, answer = post(port, payload(
        alert(host="b300-1"),                                                   # firing in Prometheus too
        alert(host="b300-2"),                                                   # forged at Alertmanager's API
        alert(alertname="SGLangAcceptLengthUnderFloor", host="rtxpro-1", sglang_instance="main"),
        alert(alertname="SGLangAcceptLengthUnderFloor", host="rtxpro-1", sglang_instance="other"),
        alert(status="resolved", host="b300-3")))                               # resolved: nothing to confirm
    assert status == 200, answer
    assert [(e["alert"]["host"], e["alert"]["instance"], e["alert"]["status"]) for e in events] == [
        ("b300-1", "", "firing"), ("rtxpro-1", "main", "firing"), ("b300-3", "", "resolved")]
    assert answer["accepted"] == 3 and len(answer["dropped"]) == 2
    assert "host='b300-2'" in answer["dropped"][0] and "not firing in Prometheus" in answer["dropped"][0]
    assert "instance='other'" in answer["dropped"][1]
    assert prometheus.queries == [("/api/v1/query", [
        'ALERTS{alertstate="firing",alertname=~"GPUXidRefused|SGLangAcceptLengthUnderFloor"}'])]


def test_prometheus_not_answering_queues_nothing_and_asks_for_a_retry(receiver):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once closed
    port, events, _server = receiver(prometheus_url="http://127.0.0.1:%d" % closed)
    status, answer = post(port, payload(alert(), alert(status="resolved")))
    assert status == 503 and "did not confirm" in answer["error"] and events == []
    with pytest.raises(ValueError, match="prometheus_url"):
        receiver(prometheus_url="file:///etc/passwd")
