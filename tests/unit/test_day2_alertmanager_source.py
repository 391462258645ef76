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
    ("severity", "CRIT'"),
])
def test_a_hostile_label_drops_its_alert_and_keeps_the_others(label, value):
    events, dropped = am.check_payload(payload(alert(**{label: value}), alert(host="b300-2")))
    assert [e["alert"]["host"] for e in events] == ["b300-2"]
    assert len(dropped) == 1 and dropped[0].startswith("alert 0: ") and label.replace("sglang_", "") in dropped[0], dropped


@pytest.mark.parametrize("change, says", [
    ({"status": "pending"}, "status 'pending'"),
    ({"status": None}, "status None"),
    ({"labels": ["alertname"]}, "labels is list"),
    ({"labels": {"alertname": "A", "host": 7}}, "labels.host is not a string"),
    ({"labels": {"alertname": "A", "bad-name": "x"}}, "not a label name"),
    ({"labels": dict([("alertname", "A")] + [("l%d" % i, "v") for i in range(70)])}, "more than 64"),
    ({"annotations": {"summary": "x" * 5000}}, "annotations.summary is not a string"),
    ({"fingerprint": "zz"}, "fingerprint 'zz'"),
    ({"startsAt": "yesterday; id"}, "startsAt"),
    ({"startsAt": 5}, "startsAt 5"),
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
    (payload(*[alert()] * 501), "501 alerts, more than max_alerts 500"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
])
def test_a_payload_that_is_not_alertmanagers_is_refused_whole(body, says):
    with pytest.raises(am.PayloadError, match=".*") as err:
        am.check_payload(body)
    assert says in str(err.value)


def test_the_token_comes_from_a_file_or_the_environment_never_empty(tmp_path):
    assert am.read_token({}) is None
    f = tmp_path / "token"
    f.write_text("s3cret-s3cret-s3cret\nignored\n")
    assert am.read_token({"token_file": str(f)}) == "s3cret-s3cret-s3cret"
    assert am.read_token({"token_env": "AM_TOKEN"}, {"AM_TOKEN": "t" * 20}) == "t" * 20
    for args, env in (({"token_env": "AM_TOKEN"}, {}), ({"token_env": "AM_TOKEN"}, {"AM_TOKEN": "short"}),
                      ({"token_file": str(f), "token_env": "AM_TOKEN"}, {})):
        with pytest.raises(ValueError):
            am.read_token(args, env)
    with pytest.raises(OSError):
        am.read_token({"token_file": str(tmp_path / "absent")})


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
        server = asyncio.run_coroutine_threadsafe(am.serve(put, dict({"port": 0}, **args)), loop).result(10)
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
    port, events, _server = receiver(token_file=str(f))
    assert post(port, payload(alert()))[0] == 401
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef012"})[0] == 401
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef0123\u00e9"})[0] == 401
    assert events == []
    assert post(port, payload(alert()), headers={"Authorization": "Bearer 0123456789abcdef0123"})[0] == 200
    assert len(events) == 1
