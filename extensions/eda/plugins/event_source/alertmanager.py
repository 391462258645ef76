# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree.fleet.alertmanager: an ansible-rulebook event source that receives Alertmanager's webhook (payload
version 4) and puts one event per alert on the rulebook's queue.

The payload is untrusted input: its labels are what Prometheus scraped from the fleet's hosts. So the body is
capped before it is read, every field used is checked for type and form, and an event carries only the checked
fields, never the raw payload (ansible-rulebook hands the event to ansible-playbook as the extra var
`ansible_eda`, and extra vars are templated where a playbook uses them):

    {"alert": {"alertname": "GPUXidRefused", "status": "firing", "host": "b300-1", "instance": "",
               "serving_group": "", "severity": "critical", "summary": "GPU 0 on b300-1 reported Xid 79: ...",
               "fingerprint": "8a1c...", "starts_at": "2026-12-08T10:00:00Z", "receiver": "ddtree-day2"}}

- `host`, `instance` (label `sglang_instance`), `serving_group` must have the form of an inventory host name or
  instance name (letters, digits, `.`, `_`, `-`, starting with a letter or digit) or be absent; an alert with
  another value is dropped (and logged), the others of the payload are kept.
- `summary` (annotation) is free text: cut to 300 characters, control characters and `{`, `}` removed (no
  Jinja delimiter survives it).
- A payload that is not JSON, not an object, not version "4", over `max_body_bytes`, or with more than
  `max_alerts` alerts is answered 400 (or 413) and nothing is queued. Anything but POST to `path` is 405/404.
- With `token_file` or `token_env` set, a request must carry `Authorization: Bearer <token>` (Alertmanager's
  `http_config.authorization.credentials_file`), else 401. The token is read from that file or variable, never
  from the rulebook or the command line.

Arguments (rulebook `sources:` entry `ddtree.fleet.alertmanager`):
  host: address to listen on (default 127.0.0.1)
  port: port to listen on (default 5000)
  path: the webhook's URL path (default /alerts)
  max_body_bytes: largest body accepted (default 1048576)
  max_alerts: most alerts in one payload (default 500)
  token_file: path of a file holding the shared secret (first line)
  token_env: name of an environment variable holding it
The core (check_payload, alert_event, Receiver) is plain Python without ansible-rulebook, so the unit tests import
it and run it against a real HTTP client (tests/unit/test_day2_alertmanager_source.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import hmac
import json
import logging
import os
import re

LOG = logging.getLogger("ddtree.fleet.alertmanager")

DEFAULTS = {"host": "127.0.0.1", "port": 5000, "path": "/alerts", "max_body_bytes": 1024 * 1024, "max_alerts": 500}
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
SUMMARY_CAP = 300

# an inventory host name or instance name: no leading '-', no whitespace, quotes, shell or Jinja characters
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
INSTANCE_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
ALERTNAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_:]{0,127}\Z")
LABEL_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
SEVERITY_RE = re.compile(r"\A[a-z]{1,16}\Z")
FINGERPRINT_RE = re.compile(r"\A[0-9a-f]{1,32}\Z")
TIME_RE = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)\Z")
MAX_LABELS = 64
MAX_VALUE_LEN = 4096
STATUSES = ("firing", "resolved")


class PayloadError(ValueError):
    """The whole payload is refused (HTTP 400)."""


class AlertError(ValueError):
    """One alert of the payload is dropped."""


def _short(value, cap=80):
    """A value for a log line: repr, cut."""
    text = repr(value)
    return text if len(text) <= cap else text[:cap] + "..."


def clean_text(value, cap=SUMMARY_CAP):
    """Free text made safe to carry: printable characters but '{' and '}' (no Jinja delimiter), cut to cap."""
    if not isinstance(value, str):
        return ""
    kept = "".join(c if c.isprintable() else " " for c in value if c not in "{}")
    return " ".join(kept.split())[:cap]


def _string_map(alert, key):
    """labels or annotations: a mapping of label names to strings (absent: empty)."""
    value = alert.get(key, {})
    if not isinstance(value, dict):
        raise AlertError("%s is %s, not an object" % (key, type(value).__name__))
    if len(value) > MAX_LABELS:
        raise AlertError("%s has %d entries, more than %d" % (key, len(value), MAX_LABELS))
    for name, text in value.items():
        if not LABEL_NAME_RE.match(name):
            raise AlertError("%s has a name that is not a label name: %s" % (key, _short(name)))
        if not isinstance(text, str) or len(text) > MAX_VALUE_LEN:
            raise AlertError("%s.%s is not a string of at most %d characters" % (key, name, MAX_VALUE_LEN))
    return value


def _optional(labels, name, pattern):
    value = labels.get(name, "")
    if value and not pattern.match(value):
        raise AlertError("label %s=%s is not of the form %s" % (name, _short(value), pattern.pattern))
    return value


def alert_event(alert, receiver=""):
    """One event from one alert of the payload, with its checked fields only; AlertError when a field used is
    missing or of another type or form."""
    if not isinstance(alert, dict):
        raise AlertError("an alert is %s, not an object" % type(alert).__name__)
    status = alert.get("status")
    if status not in STATUSES:
        raise AlertError("status %s is not one of %s" % (_short(status), ", ".join(STATUSES)))
    labels = _string_map(alert, "labels")
    annotations = _string_map(alert, "annotations")
    name = labels.get("alertname", "")
    if not ALERTNAME_RE.match(name):
        raise AlertError("alertname %s is not of the form %s" % (_short(name), ALERTNAME_RE.pattern))
    event = {
        "alertname": name,
        "status": status,
        "host": _optional(labels, "host", NAME_RE),
        "instance": _optional(labels, "sglang_instance", INSTANCE_RE),
        "serving_group": _optional(labels, "serving_group", NAME_RE),
        "severity": _optional(labels, "severity", SEVERITY_RE),
        "summary": clean_text(annotations.get("summary", "")),
        "fingerprint": "",
        "starts_at": "",
        "receiver": receiver,
    }
    for key, field, pattern in (("fingerprint", "fingerprint", FINGERPRINT_RE), ("startsAt", "starts_at", TIME_RE)):
        value = alert.get(key, "")
        if not isinstance(value, str) or (value and not pattern.match(value)):
            raise AlertError("%s %s is not of the form %s" % (key, _short(value), pattern.pattern))
        event[field] = value
    return {"alert": event}


def _no_constants(name):
    raise PayloadError("the JSON holds %s, which is not JSON" % name)


def check_payload(body, max_alerts=DEFAULTS["max_alerts"]):
    """(events, dropped) from a webhook body (bytes): one event per well-formed alert, and a reason per dropped one.
    PayloadError when the body as a whole is not Alertmanager's webhook payload version 4."""
    try:
        payload = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except PayloadError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PayloadError("the body is not JSON: %s" % _short(str(exc), 120))
    if not isinstance(payload, dict):
        raise PayloadError("the payload is %s, not an object" % type(payload).__name__)
    if payload.get("version") != "4":
        raise PayloadError("the payload's version is %s, not \"4\" (Alertmanager's webhook)" % _short(payload.get("version")))
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("alerts is %s, not a list" % type(alerts).__name__)
    if len(alerts) > max_alerts:
        raise PayloadError("%d alerts, more than max_alerts %d" % (len(alerts), max_alerts))
    receiver = payload.get("receiver", "")
    receiver = receiver if isinstance(receiver, str) and NAME_RE.match(receiver) else ""
    events, dropped = [], []
    for index, alert in enumerate(alerts):
        try:
            events.append(alert_event(alert, receiver))
        except AlertError as exc:
            dropped.append("alert %d: %s" % (index, exc))
    return events, dropped


def read_token(args, environ=None):
    """The shared secret named by token_file or token_env (None: no authentication). ValueError when it is named
    but empty or unreadable: a loop that was told to authenticate never runs open."""
    environ = os.environ if environ is None else environ
    if args.get("token_file") and args.get("token_env"):
        raise ValueError("set token_file or token_env, not both")
    if args.get("token_file"):
        with open(args["token_file"], "r", encoding="utf-8") as handle:
            token = handle.readline().strip()
        where = "token_file %s" % args["token_file"]
    elif args.get("token_env"):
        token = environ.get(args["token_env"], "").strip()
        where = "token_env %s" % args["token_env"]
    else:
        return None
    if len(token) < 16:
        raise ValueError("%s holds no token of 16 characters or more" % where)
    return token


REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
           431: "Request Header Fields Too Large", 501: "Not Implemented", 503: "Service Unavailable"}


class Receiver:
    """The webhook's HTTP/1.1 server on asyncio streams: one request per connection, every size capped and every
    read bounded in time. put is a coroutine function taking an event (the rulebook's queue.put)."""

    def __init__(self, put, path=DEFAULTS["path"], max_body_bytes=DEFAULTS["max_body_bytes"],
                 max_alerts=DEFAULTS["max_alerts"], token=None):
        self.put = put
        self.path = path
        self.max_body_bytes = int(max_body_bytes)
        self.max_alerts = int(max_alerts)
        self.token = token
        self.connections = 0
        self.received = 0
        self.refused = 0

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            if self.connections > MAX_CONNECTIONS:
                status, answer = 503, {"error": "too many connections"}
            else:
                status, answer = await asyncio.wait_for(self._request(reader), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            status, answer = 408, {"error": "the request was not read within %d s" % READ_TIMEOUT_S}
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            status, answer = 400, {"error": "the request ended early or is malformed: %s" % type(exc).__name__}
        finally:
            self.connections -= 1
        if status is None:
            writer.close()
            return
        if status != 200:
            self.refused += 1
            LOG.warning("alertmanager source: answered %d: %s", status, answer.get("error"))
        await self._answer(writer, status, answer)

    async def _answer(self, writer, status, answer):
        body = (json.dumps(answer) + "\n").encode()
        head = "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
            status, REASONS.get(status, ""), len(body))
        try:
            writer.write(head.encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _request(self, reader):
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # the stream's limit caps it at MAX_HEADER_BYTES
        except asyncio.LimitOverrunError:
            return 431, {"error": "headers over %d bytes" % MAX_HEADER_BYTES}
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None, None  # connected and closed without a byte (a port probe): nothing to answer
            raise
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, {"error": "not an HTTP/1.x request line"}
        method, target = parts[0], parts[1]
        headers = {}
        for line in lines[1:]:
            if line:
                name, sep, value = line.partition(":")
                if not sep:
                    return 400, {"error": "a header line without ':'"}
                headers[name.strip().lower()] = value.strip()
        if target.split("?", 1)[0] != self.path:
            return 404, {"error": "no such path (the webhook is POST %s)" % self.path}
        if method != "POST":
            return 405, {"error": "only POST"}
        if self.token is not None:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode("latin-1"), ("Bearer " + self.token).encode("latin-1", "replace")):
                return 401, {"error": "no valid Authorization: Bearer token"}
        if "transfer-encoding" in headers:
            return 501, {"error": "chunked bodies are not taken: send Content-Length"}
        length = headers.get("content-length", "")
        if not length.isdigit():
            return 411, {"error": "Content-Length is needed"}
        if int(length) > self.max_body_bytes:
            return 413, {"error": "the body of %s bytes is over max_body_bytes %d" % (length, self.max_body_bytes)}
        ctype = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if ctype != "application/json":
            return 415, {"error": "Content-Type %s is not application/json" % _short(ctype, 40)}
        body = await reader.readexactly(int(length))
        try:
            events, dropped = check_payload(body, self.max_alerts)
        except PayloadError as exc:
            return 400, {"error": str(exc)}
        for reason in dropped:
            LOG.warning("alertmanager source: dropped %s", reason)
        for event in events:
            await self.put(event)
        self.received += len(events)
        return 200, {"accepted": len(events), "dropped": dropped}


async def serve(put, args):
    """Start the receiver; returns the asyncio server (its sockets say the port, port 0 picks one)."""
    opts = dict(DEFAULTS)
    opts.update(dict((k, v) for k, v in args.items() if v is not None))
    path = str(opts["path"])
    if not path.startswith("/"):
        raise ValueError("path %s does not start with /" % _short(path))
    receiver = Receiver(put, path=path, max_body_bytes=opts["max_body_bytes"], max_alerts=opts["max_alerts"],
                        token=read_token(opts))
    server = await asyncio.start_server(receiver.handle, str(opts["host"]), int(opts["port"]), limit=MAX_HEADER_BYTES)
    server.receiver = receiver
    LOG.info("alertmanager source: listening on %s:%s%s (authentication %s)", opts["host"], opts["port"], path,
             "on" if receiver.token else "off")
    return server


async def main(queue, args):
    """ansible-rulebook's entry point: serve until cancelled."""
    server = await serve(queue.put, args or {})
    try:
        async with server:
            await server.serve_forever()
    finally:
        server.close()


if __name__ == "__main__":
    # By hand: python alertmanager.py [PORT], then POST a payload; the events are printed.

    class _Print:
        @staticmethod
        async def put(event):
            print(json.dumps(event))

    import sys
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_Print(), {"port": int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULTS["port"]}))
