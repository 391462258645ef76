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

- The labels a rule uses, `host`, `instance` (label `sglang_instance`), `serving_group`, must have the form of an
  inventory host name or instance name (letters, digits, `.`, `_`, `-`, starting with a letter or digit) or be
  absent; an alert with another value is dropped (and logged), the others of the payload are kept. Labels no rule
  uses are neither checked nor carried (an odd one does not drop its alert); `severity`, `fingerprint`, `startsAt`
  are carried when of their form, else blank.
- With `hosts_file`, a `host` that is not in it (the inventory's gpu_hosts) drops its alert (logged).
- `summary` (annotation) is free text: cut to 300 characters, control characters, `{`, `}` and `$` removed (no
  Jinja delimiter, no `$ANSIBLE_VAULT` marker survives it).
- With `prometheus_url`, a firing alert is queued only when Prometheus has it firing too (`ALERTS{alertstate=
  "firing"}` with the same alertname, host, sglang_instance, serving_group): Alertmanager's API takes alerts from
  anyone who reaches it, so one posted there is dropped (logged). Prometheus not answering: 503, nothing queued
  (Alertmanager retries).
- At most `max_events_per_hour` firing events are queued an hour (a token bucket); the rest are dropped (logged).
- A payload that is not JSON, not an object, or not version "4", or over `max_body_bytes`, is answered 400 (or
  413) and nothing is queued; of one with more than `max_alerts` alerts the first `max_alerts` are taken (logged).
  Anything but POST to `path` is 405/404.
- With `token_file` or `token_env` set, a request must carry `Authorization: Bearer <token>` (Alertmanager's
  `http_config.authorization.credentials_file`), else 401. The token is read from that file or variable, never
  from the rulebook or the command line; it is printable ASCII, and the file is not readable by others (0600, or
  0640 with a group Alertmanager shares). Without a token the source refuses to start unless it listens on
  loopback and `allow_unauthenticated: true` is given.
- The request line and headers must come within 2 s, the whole request within 10 s; at most 8 connections at once
  per peer address, 64 in all.

Arguments (rulebook `sources:` entry `ddtree.fleet.alertmanager`):
  host: address to listen on (default 127.0.0.1)
  port: port to listen on (default 5000)
  path: the webhook's URL path (default /alerts)
  max_body_bytes: largest body accepted (default 1048576)
  max_alerts: most alerts taken of one payload (default 500)
  max_events_per_hour: most firing events queued an hour (default 30)
  token_file: path of a file holding the shared secret (first line)
  token_env: name of an environment variable holding it
  allow_unauthenticated: true to run without a token (loopback only)
  hosts_file: the allow-list of label host: one name a line, or JSON (a list, or `ansible-inventory --list`'s
    output, whose group gpu_hosts is taken)
  prometheus_url: Prometheus' base URL (e.g. http://127.0.0.1:9090): confirm each firing alert there first
The core (check_payload, alert_event, Receiver) is plain Python without ansible-rulebook, so the unit tests import
it and run it against a real HTTP client (tests/unit/test_day2_alertmanager_source.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import re
import stat
import time
from urllib.parse import urlencode, urlsplit
from urllib.request import ProxyHandler, build_opener

LOG = logging.getLogger("ddtree.fleet.alertmanager")

DEFAULTS = {"host": "127.0.0.1", "port": 5000, "path": "/alerts", "max_body_bytes": 1024 * 1024, "max_alerts": 500,
            "max_events_per_hour": 30}
MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT_S = 2.0  # the request line and the headers (a slow client holding a connection open: slowloris)
READ_TIMEOUT_S = 10.0  # the whole request, body and the Prometheus confirmation included
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_PEER = 8
SUMMARY_CAP = 300
PROMETHEUS_TIMEOUT_S = 5.0
MAX_PROMETHEUS_BYTES = 8 * 1024 * 1024
MAX_HOSTS_FILE_BYTES = 4 * 1024 * 1024
# the labels a rule of extensions/eda/rulebooks/day2.yml uses, checked; the other labels are neither checked nor carried
USED_LABELS = ("alertname", "host", "sglang_instance", "serving_group")

# an inventory host name or instance name: no leading '-', no whitespace, quotes, shell or Jinja characters
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
INSTANCE_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
ALERTNAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_:]{0,127}\Z")
LABEL_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
SEVERITY_RE = re.compile(r"\A[a-z]{1,16}\Z")
FINGERPRINT_RE = re.compile(r"\A[0-9a-f]{1,32}\Z")
TIME_RE = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)\Z")
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
    """Free text made safe to carry: printable characters but '{' and '}' (no Jinja delimiter) and '$' (no
    '$ANSIBLE_VAULT' marker, which ansible-rulebook would try to decrypt), cut to cap."""
    if not isinstance(value, str):
        return ""
    kept = "".join(c if c.isprintable() else " " for c in value if c not in "{}$")
    return " ".join(kept.split())[:cap]


def _mapping(alert, key):
    """labels or annotations: an object (absent: empty). Its entries are checked where they are used."""
    value = alert.get(key, {})
    if not isinstance(value, dict):
        raise AlertError("%s is %s, not an object" % (key, type(value).__name__))
    return value


def _optional(labels, name, pattern):
    """A label a rule uses: absent, or a string of the pattern's form (else the alert is dropped)."""
    value = labels.get(name, "")
    if not isinstance(value, str):
        raise AlertError("labels.%s is %s, not a string" % (name, type(value).__name__))
    if value and not pattern.match(value):
        raise AlertError("label %s=%s is not of the form %s" % (name, _short(value), pattern.pattern))
    return value


def _informative(value, pattern):
    """A field no rule uses, carried for the log: kept when of its form, else left blank (never a reason to drop)."""
    return value if isinstance(value, str) and pattern.match(value) else ""


def alert_event(alert, receiver="", hosts=None):
    """One event from one alert of the payload, with its checked fields only; AlertError when a field a rule uses
    (status, labels alertname, host, sglang_instance, serving_group, annotation summary) is missing or of another
    type or form, or when hosts (a set: the allow-list) is given and the label host is not in it. The other labels
    and annotations are neither checked nor carried: an unused odd label does not drop the alert."""
    if not isinstance(alert, dict):
        raise AlertError("an alert is %s, not an object" % type(alert).__name__)
    status = alert.get("status")
    if status not in STATUSES:
        raise AlertError("status %s is not one of %s" % (_short(status), ", ".join(STATUSES)))
    labels = _mapping(alert, "labels")
    annotations = _mapping(alert, "annotations")
    name = labels.get("alertname", "")
    if not isinstance(name, str) or not ALERTNAME_RE.match(name):
        raise AlertError("alertname %s is not of the form %s" % (_short(name), ALERTNAME_RE.pattern))
    summary = annotations.get("summary", "")
    if not isinstance(summary, str):
        raise AlertError("annotations.summary is %s, not a string" % type(summary).__name__)
    host = _optional(labels, "host", NAME_RE)
    if host and hosts is not None and host not in hosts:
        raise AlertError("label host=%s is not a host of the allow-list (hosts_file: the inventory's gpu_hosts)"
                         % _short(host))
    event = {
        "alertname": name,
        "status": status,
        "host": host,
        "instance": _optional(labels, "sglang_instance", INSTANCE_RE),
        "serving_group": _optional(labels, "serving_group", NAME_RE),
        "severity": _informative(labels.get("severity"), SEVERITY_RE),
        "summary": clean_text(summary),
        "fingerprint": _informative(alert.get("fingerprint"), FINGERPRINT_RE),
        "starts_at": _informative(alert.get("startsAt"), TIME_RE),
        "receiver": receiver,
    }
    return {"alert": event}


def _no_constants(name):
    raise PayloadError("the JSON holds %s, which is not JSON" % name)


def check_payload(body, max_alerts=DEFAULTS["max_alerts"], hosts=None):
    """(events, dropped) from a webhook body (bytes): one event per well-formed alert of the first max_alerts, and a
    reason per dropped one (or per alerts left out over max_alerts). hosts: the allow-list of label host (None: no
    list). PayloadError when the body as a whole is not Alertmanager's webhook payload version 4."""
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
    receiver = payload.get("receiver", "")
    receiver = receiver if isinstance(receiver, str) and NAME_RE.match(receiver) else ""
    events, dropped = [], []
    for index, alert in enumerate(alerts[:max_alerts]):
        try:
            events.append(alert_event(alert, receiver, hosts))
        except AlertError as exc:
            dropped.append("alert %d: %s" % (index, exc))
    if len(alerts) > max_alerts:
        dropped.append("alerts %d to %d: over max_alerts %d, left out (the first %d taken)"
                       % (max_alerts, len(alerts) - 1, max_alerts, max_alerts))
    return events, dropped


def _describe(event):
    alert = event["alert"]
    return "%s host=%s instance=%s serving_group=%s" % (alert["alertname"], _short(alert["host"], 40),
                                                        _short(alert["instance"], 40), _short(alert["serving_group"], 40))


def firing_query(names):
    """The PromQL of Prometheus' firing alerts of these names (alert names are [A-Za-z0-9_:], no regex or quote)."""
    return 'ALERTS{alertstate="firing",alertname=~"%s"}' % "|".join(sorted(set(names)))


def prometheus_firing(url, names, timeout=PROMETHEUS_TIMEOUT_S):
    """The label sets of Prometheus' firing alerts of these names (GET url/api/v1/query, ALERTS; blocking: run it in
    an executor). OSError or ValueError when Prometheus does not answer with a vector."""
    opener = build_opener(ProxyHandler({}))  # straight to it, whatever the environment's proxy
    with opener.open("%s/api/v1/query?%s" % (url.rstrip("/"), urlencode({"query": firing_query(names)})),
                     timeout=timeout) as answer:
        data = answer.read(MAX_PROMETHEUS_BYTES + 1)
    if len(data) > MAX_PROMETHEUS_BYTES:
        raise ValueError("Prometheus answered more than %d bytes" % MAX_PROMETHEUS_BYTES)
    reply = json.loads(data.decode("utf-8"))
    result = (reply.get("data") or {}).get("result") if isinstance(reply, dict) else None
    if reply.get("status") != "success" or not isinstance(result, list):
        raise ValueError("Prometheus answered no vector: %s" % _short(reply, 200))
    return [r["metric"] for r in result if isinstance(r, dict) and isinstance(r.get("metric"), dict)]


def confirmed(event, firing):
    """Whether one of Prometheus' firing alerts (label sets) is this event's alert: the same alertname, host,
    sglang_instance and serving_group (absent and empty alike)."""
    alert = event["alert"]
    want = {"alertname": alert["alertname"], "host": alert["host"], "sglang_instance": alert["instance"],
            "serving_group": alert["serving_group"]}
    return any(all(labels.get(k, "") == v for k, v in want.items()) for labels in firing)


class TokenBucket:
    """At most rate events an hour, rate at once: a bucket of rate tokens refilled continuously."""

    def __init__(self, rate, clock=time.monotonic):
        self.rate = float(rate)
        self.clock = clock
        self.tokens = self.rate
        self.last = clock()

    def take(self):
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate / 3600.0)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def read_hosts(path):
    """The allow-list of label host from a file: one name per line (# comments), or JSON: a list of names, or the
    output of `ansible-inventory -i INVENTORY --list` (the hosts of group gpu_hosts and of its children)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_HOSTS_FILE_BYTES + 1)
    if len(data) > MAX_HOSTS_FILE_BYTES:
        raise ValueError("hosts_file %s is over %d bytes" % (path, MAX_HOSTS_FILE_BYTES))
    text = data.decode("utf-8")
    if text.lstrip()[:1] in ("[", "{"):
        listing = json.loads(text)
        if isinstance(listing, dict):
            names, todo, seen = [], ["gpu_hosts"], set()
            while todo:
                group = todo.pop()
                if group in seen or not isinstance(listing.get(group), dict):
                    continue
                seen.add(group)
                names.extend(listing[group].get("hosts") or [])
                todo.extend(listing[group].get("children") or [])
        else:
            names = listing
    else:
        names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        names = [n for n in names if n]
    bad = [n for n in names if not isinstance(n, str) or not NAME_RE.match(n)]
    if bad:
        raise ValueError("hosts_file %s: names not of the form %s: %s" % (path, NAME_RE.pattern, _short(bad)))
    if not names:
        raise ValueError("hosts_file %s: no host (group gpu_hosts empty or missing)" % path)
    return frozenset(names)


def read_token(args, environ=None):
    """The shared secret named by token_file or token_env (None: no authentication). ValueError when it is named
    but empty, unreadable, not printable ASCII, or in a file others may read or write: a loop that was told to
    authenticate never runs open."""
    environ = os.environ if environ is None else environ
    if args.get("token_file") and args.get("token_env"):
        raise ValueError("set token_file or token_env, not both")
    if args.get("token_file"):
        with open(args["token_file"], "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if mode & (stat.S_IROTH | stat.S_IWOTH):
                raise ValueError("token_file %s is readable or writable by others (mode %o): chmod o-rw it (0600, or "
                                 "0640 with a group Alertmanager and the rulebook share)" % (args["token_file"],
                                                                                             stat.S_IMODE(mode)))
            token = handle.readline(4096).decode("latin-1").strip()
        where = "token_file %s" % args["token_file"]
    elif args.get("token_env"):
        token = environ.get(args["token_env"], "").strip()
        where = "token_env %s" % args["token_env"]
    else:
        return None
    if len(token) < 16:
        raise ValueError("%s holds no token of 16 characters or more" % where)
    if not all("!" <= c <= "~" for c in token):
        raise ValueError("%s holds a token that is not printable ASCII (letters, digits, punctuation)" % where)
    return token


def _flag(value):
    """An explicit yes: True, or the text true/yes (a rulebook variable may arrive as either)."""
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "yes"))


def _loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
           431: "Request Header Fields Too Large", 501: "Not Implemented", 503: "Service Unavailable"}
LENGTH_RE = re.compile(r"[0-9]{1,10}")


class Receiver:
    """The webhook's HTTP/1.1 server on asyncio streams: one request per connection, every size capped and every
    read bounded in time, connections capped per peer and in all. put is a coroutine function taking an event (the
    rulebook's queue.put). hosts: the allow-list of label host (None: none); prometheus_url: where a firing alert is
    confirmed before it is queued (None: not confirmed); max_events_per_hour: the firing events queued at most."""

    def __init__(self, put, path=DEFAULTS["path"], max_body_bytes=DEFAULTS["max_body_bytes"],
                 max_alerts=DEFAULTS["max_alerts"], token=None, hosts=None, prometheus_url=None,
                 max_events_per_hour=DEFAULTS["max_events_per_hour"]):
        self.put = put
        self.path = path
        self.max_body_bytes = int(max_body_bytes)
        self.max_alerts = int(max_alerts)
        self.token = token
        self.hosts = hosts
        self.prometheus_url = prometheus_url
        self.bucket = TokenBucket(max_events_per_hour)
        self.connections = 0
        self.peers = {}
        self.received = 0
        self.refused = 0

    async def handle(self, reader, writer):
        peer = (writer.get_extra_info("peername") or ("?",))[0]
        self.connections += 1
        self.peers[peer] = self.peers.get(peer, 0) + 1
        try:
            if self.connections > MAX_CONNECTIONS:
                status, answer = 503, {"error": "too many connections (%d)" % MAX_CONNECTIONS}
            elif self.peers[peer] > MAX_CONNECTIONS_PER_PEER:
                status, answer = 503, {"error": "too many connections from %s (%d)" % (peer, MAX_CONNECTIONS_PER_PEER)}
            else:
                status, answer = await asyncio.wait_for(self._request(reader), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            status, answer = 408, {"error": "the request was not read in time (headers %g s, all %g s)"
                                            % (HEADER_TIMEOUT_S, READ_TIMEOUT_S)}
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            status, answer = 400, {"error": "the request ended early or is malformed: %s" % type(exc).__name__}
        except Exception as exc:  # pylint: disable=broad-except # any other surprise of a hostile request: 400, serve on
            LOG.exception("alertmanager source: a request raised %s", type(exc).__name__)
            status, answer = 400, {"error": "the request is malformed: %s" % type(exc).__name__}
        finally:
            self.connections -= 1
            self.peers[peer] -= 1
            if not self.peers[peer]:
                del self.peers[peer]
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
            # the stream's limit caps the headers at MAX_HEADER_BYTES, this deadline their time
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
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
            if not hmac.compare_digest(given.encode("latin-1"), ("Bearer " + self.token).encode("ascii")):
                return 401, {"error": "no valid Authorization: Bearer token"}
        if "transfer-encoding" in headers:
            return 501, {"error": "chunked bodies are not taken: send Content-Length"}
        length = headers.get("content-length", "")
        if not LENGTH_RE.fullmatch(length):  # ASCII digits only: str.isdigit() takes '²' too
            return 411, {"error": "Content-Length (ASCII digits) is needed"}
        if int(length) > self.max_body_bytes:
            return 413, {"error": "the body of %s bytes is over max_body_bytes %d" % (length, self.max_body_bytes)}
        ctype = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if ctype != "application/json":
            return 415, {"error": "Content-Type %s is not application/json" % _short(ctype, 40)}
        body = await reader.readexactly(int(length))
        try:
            events, dropped = check_payload(body, self.max_alerts, self.hosts)
        except PayloadError as exc:
            return 400, {"error": str(exc)}
        firing = [e for e in events if e["alert"]["status"] == "firing"]
        if self.prometheus_url and firing:
            try:
                alerts = await asyncio.get_running_loop().run_in_executor(
                    None, prometheus_firing, self.prometheus_url, [e["alert"]["alertname"] for e in firing])
            except (OSError, ValueError) as exc:
                # nothing queued; Alertmanager retries a 5xx notification
                return 503, {"error": "Prometheus at %s did not confirm the alerts (%s): nothing queued"
                                      % (self.prometheus_url, _short(str(exc), 160))}
            for event in firing:
                if not confirmed(event, alerts):
                    dropped.append("%s: not firing in Prometheus (ALERTS at %s)" % (_describe(event), self.prometheus_url))
                    events.remove(event)
        for event in list(events):
            if event["alert"]["status"] == "firing" and not self.bucket.take():
                dropped.append("%s: over max_events_per_hour %g" % (_describe(event), self.bucket.rate))
                events.remove(event)
        for reason in dropped:
            LOG.warning("alertmanager source: dropped %s", reason)
        for event in events:
            await self.put(event)
        self.received += len(events)
        return 200, {"accepted": len(events), "dropped": dropped}


async def serve(put, args):
    """Start the receiver; returns the asyncio server (its sockets say the port, port 0 picks one). ValueError when
    the arguments would run it open: no token unless listening on loopback with allow_unauthenticated: true."""
    opts = dict(DEFAULTS)
    opts.update(dict((k, v) for k, v in args.items() if v is not None and v != ""))
    path = str(opts["path"])
    if not path.startswith("/"):
        raise ValueError("path %s does not start with /" % _short(path))
    host = str(opts["host"])
    token = read_token(opts)
    if token is None and not (_loopback(host) and _flag(opts.get("allow_unauthenticated"))):
        raise ValueError("no token_file or token_env: the webhook would take alerts from anyone who reaches %s. Give "
                         "it a token (Alertmanager's credentials_file), or listen on loopback (127.0.0.1) and set "
                         "allow_unauthenticated: true" % host)
    url = opts.get("prometheus_url")
    if url and (urlsplit(str(url)).scheme not in ("http", "https") or not urlsplit(str(url)).netloc):
        raise ValueError("prometheus_url %s is not an http(s) URL" % _short(url))
    hosts = read_hosts(opts["hosts_file"]) if opts.get("hosts_file") else None
    receiver = Receiver(put, path=path, max_body_bytes=opts["max_body_bytes"], max_alerts=opts["max_alerts"],
                        token=token, hosts=hosts, prometheus_url=str(url) if url else None,
                        max_events_per_hour=int(opts["max_events_per_hour"]))
    server = await asyncio.start_server(receiver.handle, host, int(opts["port"]), limit=MAX_HEADER_BYTES)
    server.receiver = receiver
    LOG.info("alertmanager source: listening on %s:%s%s (authentication %s; allow-list %s; confirmation in "
             "Prometheus %s; at most %d firing events an hour)", host, opts["port"], path,
             "on" if token else "OFF (loopback, allow_unauthenticated)",
             "%d hosts" % len(hosts) if hosts is not None else "off", url or "off", int(opts["max_events_per_hour"]))
    if hosts is None or not url:
        LOG.warning("alertmanager source: %s", "; ".join(w for w in (
            "no hosts_file: any host name of the right form is queued" if hosts is None else "",
            "no prometheus_url: an alert is not confirmed in Prometheus before it is queued" if not url else "") if w))
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
    asyncio.run(main(_Print(), {"port": int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULTS["port"],
                                "allow_unauthenticated": True}))
