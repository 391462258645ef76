#!/usr/bin/env python3
"""TEST DOUBLE: a stand-in for `python -m sglang.launch_server` (the real server needs a big GPU).

Used only by tests and the lab, never by a production code path: the lab and molecule set
ddtree_service_launcher to run this file with the venv's python instead of `-m sglang.launch_server`.
It takes the same command line (every `--flag [value]`, plus `--config FILE` for the API key),
and speaks the parts of SGLang 0.5.23's HTTP API the collection uses:

  GET  /health /health_generate /ready      200 once "loaded" (503 before; no API key needed)
  GET  /v1/models                           the served model name
  GET  /server_info /get_server_info        the parsed flags, version, internal_states
  GET  /model_info /get_model_info          model path, is_generation
  GET  /metrics                             Prometheus text (running requests, totals, spec accept)
  POST /generate /v1/completions /v1/chat/completions
                                            a deterministic answer after max_new_tokens x per-token delay
                                            (/generate streams SSE with "stream": true; the delay is
                                            2.15x shorter when a speculative algorithm is set)

Failure injection: a JSON file (env DDTREE_SGLANG_DOUBLE_FAULTS, default
/etc/ddtree-sglang-double/faults.json) holding a list of {"match": "<substring of the joined
argv>", "mode": ...}; the first entry whose match is in the command line applies:
  crash            exit 3 right away (like a bad flag or an import error)
  crash_after:N    serve, then exit 3 after N seconds
  unhealthy        /health_generate answers 503 forever (the gate must fail)
  slow_start:N     load for N seconds before /health_generate answers 200
  wrong_model      /v1/models lists another name
  drift:KEY=VALUE  /server_info reports KEY=VALUE instead of the flag's value
  wrong_tokens_after:N  with a speculative algorithm, greedy output ids depart from the
                   autoregressive ones from position N on (a kernel or CUDA-graph bug that keeps
                   the server "healthy")
  wrong_tokens_batched:N  the same, but only in a request that ran beside another one (a speculative-decoding
                   bug in a batched CUDA graph, TensorRT-LLM #17110: one request at a time stays right)
  accept_collapsed with a speculative algorithm, accept length 1.0 (no draft token accepted)
  accept_collapsed_while:PATH  the same while the file PATH exists: a server admitted with a good accept length
                   whose acceptance collapses later (the day-two fallback's case; /metrics shows it too)
  hang             a hung scheduler (sglang #21486, rank 0 after NCCL aborted a rank): /health and /ready
                   still answer 200, while /health_generate and every generation never answer
  hang_after:N     serve, then hang as above after N seconds
  hang_while:PATH  hang as above while the file PATH exists (a test hangs and frees a running server)
  hang_on_member_loss  rank 0 of a group: a joined rank that goes away leaves rank 0 hung as above (the
                   field's failure) instead of taking it down
Multi-node serving groups (--nnodes N --node-rank R --dist-init-addr HOST:PORT), modelled on SGLang's:
  rank 0 listens on the init address; every other rank connects to it (retrying until it answers, as
  torch.distributed does), says its rank and nnodes, and is refused when they do not fit (then exits 3,
  a misconfigured member). Rank 0's /health_generate answers 200 only once every rank has joined; a
  joined rank that goes away takes the group down (rank 0 exits 3, like an aborted NCCL communicator),
  and a rank that loses rank 0 exits 3. Ranks >= 1 serve only /health, /health_generate, /ping and
  /metrics (SGLang's stand-alone health server of non-zero ranks), once joined.
Greedy output: /generate returns output_ids, a deterministic function of the prompt and the
position (the same with and without speculation, as greedy decoding must be).
JIT caches (warm start): where SGLang would compile kernels into its cache directory (SGLANG_CACHE_DIR, else
TRITON_CACHE_DIR's parent), the stand-in "compiles" one kernel file per model and tensor-parallel size while it
loads - DDTREE_SGLANG_DOUBLE_COMPILE_S seconds (default 0) more load time - unless the file is already there,
and its start line and /server_info say which (jit=compiled | cached | none; ddtree_double_jit).
Load time: --double-load-seconds is not used (unknown flags are refused by the flag contract);
the env DDTREE_SGLANG_DOUBLE_LOAD_S (default 1) sets it.
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.5.23"
TOKEN_DELAY = float(os.environ.get("DDTREE_SGLANG_DOUBLE_TOKEN_S", "0.01"))
SPEC_SPEEDUP = 2.15


def parse(argv):
    args, i = {}, 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            i += 1
            continue
        key = tok[2:].replace("-", "_")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            vals = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                vals.append(argv[i])
                i += 1
            val = vals[0] if len(vals) == 1 else vals
            try:
                val = int(val)
            except (TypeError, ValueError):
                try:
                    val = float(val)
                except (TypeError, ValueError):
                    pass
            args[key] = val
        else:
            args[key] = True
            i += 1
    return args


def read_config(path):
    """--config YAML: only flat `key: value` lines are needed (the API key)."""
    out = {}
    with open(path) as f:
        for line in f:
            if ":" in line and not line.lstrip().startswith("#"):
                k, v = line.split(":", 1)
                out[k.strip().replace("-", "_")] = v.strip().strip("'\"")
    return out


def fault_for(argv_text):
    path = os.environ.get("DDTREE_SGLANG_DOUBLE_FAULTS", "/etc/ddtree-sglang-double/faults.json")
    try:
        with open(path) as f:
            faults = json.load(f)
    except (OSError, ValueError):
        return None
    for f in faults:
        if f.get("match", "") in argv_text:
            return f["mode"]
    return None


def warm_up(args):
    """The stand-in's JIT kernel: compiled into the cache directory, or found there."""
    cache = os.environ.get("SGLANG_CACHE_DIR") or os.path.dirname(os.environ.get("TRITON_CACHE_DIR", "").rstrip("/"))
    if not cache:
        return "none"
    name = "%s-tp%s" % (os.path.basename(str(args.get("model_path", "model")).rstrip("/")), args.get("tp_size") or 1)
    kernel = os.path.join(cache, "triton", "ddtree-double", name + ".cubin")
    if os.path.exists(kernel):
        return "cached"  # untouched: its mtime stays before this start (no journal line: tests count them)
    try:
        os.makedirs(os.path.dirname(kernel), exist_ok=True)
        with open(kernel + ".tmp", "wb") as f:
            f.write(("kernel for %s\n" % name).encode() * 64)
        os.replace(kernel + ".tmp", kernel)
    except OSError as exc:
        sys.stderr.write("sglang-double: cannot write the JIT cache %s: %s\n" % (kernel, exc))
        return "none"
    return "compiled"


class State:
    def __init__(self, args, fault, jit="none"):
        self.args, self.fault = args, fault or ""
        self.started = time.time()
        load = float(os.environ.get("DDTREE_SGLANG_DOUBLE_LOAD_S", "1"))
        if self.fault.startswith("slow_start:"):
            load = float(self.fault.split(":", 1)[1])
        self.jit = jit
        if self.jit == "compiled":
            load += float(os.environ.get("DDTREE_SGLANG_DOUBLE_COMPILE_S", "0"))
        self.ready_at = self.started + load
        self.running = 0
        self.total = 0
        self.lock = threading.Lock()

        self.nnodes = int(args.get("nnodes") or 1)
        self.joined = set()
        self.member = False
        self.hung = self.fault == "hang"

    def is_hung(self):
        if self.fault.startswith("hang_while:"):
            return os.path.exists(self.fault.split(":", 1)[1])
        return self.hung

    def ready(self):
        return time.time() >= self.ready_at and len(self.joined) >= self.nnodes - 1

    def accept_length(self):
        """What SGLang reports per request: None without speculation, 1.0 when every draft is rejected."""
        if not self.args.get("speculative_algorithm"):
            return None
        if self.fault.startswith("accept_collapsed_while:"):
            return 1.0 if os.path.exists(self.fault.split(":", 1)[1]) else 3.4
        return 1.0 if self.fault == "accept_collapsed" else 3.4

    def output_ids(self, prompt, n, batched=False):
        """Greedy token ids: a function of the prompt and the position alone, unless a fault says otherwise."""
        seed = sum(prompt.encode()) % 997
        ids = [(seed * 31 + 7 * i) % 50000 for i in range(n)]
        wrong = self.fault.startswith("wrong_tokens_after:") or (self.fault.startswith("wrong_tokens_batched:") and batched)
        if wrong and self.args.get("speculative_algorithm"):
            cut = int(self.fault.split(":", 1)[1])
            ids = ids[:cut] + [(x + 1) % 50000 for x in ids[cut:]]
        return ids

    def served_name(self):
        if self.fault == "wrong_model":
            return "not-the-model"
        return str(self.args.get("served_model_name") or self.args.get("model_path"))

    def server_info(self):
        info = dict(self.args)
        info.pop("api_key", None)
        info.pop("config", None)
        if self.fault.startswith("drift:"):
            k, v = self.fault.split(":", 1)[1].split("=", 1)
            info[k] = int(v) if v.isdigit() else v
        info.update(version=VERSION, ddtree_double_jit=self.jit, internal_states=[{"avg_spec_accept_length": self.accept_length() or 1.0}])
        return info


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            sys.stderr.write("sglang-double: %s\n" % (fmt % a))

        def send(self, code, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else (json.dumps(body) if ctype == "application/json" else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self):
            key = state.args.get("api_key")
            return not key or self.headers.get("Authorization") == "Bearer %s" % key

        def do_GET(self):
            path = self.path.split("?")[0]
            if state.member:  # a non-zero rank: SGLang's stand-alone health server
                if path in ("/health", "/health_generate", "/ping"):
                    return self.send(200, b"", "text/plain")
                if path == "/metrics":
                    return self.send(200, "# non-zero rank: no request metrics\n", "text/plain; version=0.0.4")
                return self.send(404, {"detail": "Not Found"})
            if path == "/health_generate" and state.ready() and state.is_hung() and self.hang():
                return None
            if path in ("/health", "/health_generate", "/ready"):
                ok = state.ready() and not (path != "/ready" and state.fault == "unhealthy")
                return self.send(200 if ok else 503, {} if ok else {"error": "not ready"})
            if path == "/metrics":
                spec = state.server_info()["internal_states"][0]["avg_spec_accept_length"]
                text = ("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"%s\"} %d\n"
                        "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{model_name=\"%s\"} %d\n"
                        "# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name=\"%s\"} %s\n"
                        % (state.served_name(), state.running, state.served_name(), state.total, state.served_name(), spec))
                return self.send(200, text, "text/plain; version=0.0.4")
            if not self.authorized():
                return self.send(401, {"error": "Unauthorized"})
            if not state.ready():
                return self.send(503, {"error": "loading"})
            if path == "/v1/models":
                return self.send(200, {"object": "list", "data": [
                    {"id": state.served_name(), "object": "model", "owned_by": "sglang", "root": state.args.get("model_path")}]})
            if path in ("/server_info", "/get_server_info"):
                return self.send(200, state.server_info())
            if path in ("/model_info", "/get_model_info"):
                return self.send(200, {"model_path": state.args.get("model_path"), "is_generation": True,
                                       "has_image_understanding": False})
            return self.send(404, {"error": "not found"})

        def hang(self):
            """No answer while the server is hung: True once the client gave up (the connection is then closed
            here), False when the hang ended first (the request goes on)."""
            while state.is_hung():
                time.sleep(0.5)
                try:
                    if self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                        self.close_connection = True
                        return True  # the client went away
                except BlockingIOError:
                    continue
                except OSError:
                    self.close_connection = True
                    return True
            return False

        def stream(self, n, delay):
            """SGLang's native streaming: SSE lines `data: {json}` with cumulative text, then [DONE]."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            start = time.monotonic()
            for k in range(1, n + 1):
                # paced against the start, so the per-token work does not add up (on a loaded host
                # it used to bring the 2.15x model down to 1.5x)
                time.sleep(max(0.0, start + k * delay - time.monotonic()))
                meta = {"completion_tokens": k, "prompt_tokens": 8, "spec_accept_length": state.accept_length()}
                chunk = {"text": " ".join(["tok"] * k), "meta_info": meta}
                self.wfile.write(("data: %s\n\n" % json.dumps(chunk)).encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def do_POST(self):
            if state.member:
                return self.send(404, {"detail": "Not Found"})
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.authorized():
                return self.send(401, {"error": "Unauthorized"})
            if not state.ready() or state.fault == "unhealthy":
                return self.send(503, {"error": "not ready"})
            n = int(body.get("max_tokens") or (body.get("sampling_params") or {}).get("max_new_tokens") or 16)
            # speculative decoding makes decode faster: the report's 2.15x at concurrency 1
            delay = TOKEN_DELAY / (SPEC_SPEEDUP if state.args.get("speculative_algorithm") else 1.0)
            if state.is_hung() and self.hang():  # a hung scheduler: no answer while it hangs
                return None
            with state.lock:
                state.running += 1
                peak = state.running
            try:
                if body.get("stream") and self.path.startswith("/generate"):
                    return self.stream(n, delay)
                time.sleep(n * delay)
            finally:
                with state.lock:
                    peak = max(peak, state.running)
                    state.running -= 1
                    state.total += 1
            text = " ".join(["tok"] * n)
            usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
            if self.path.startswith("/v1/chat/completions"):
                return self.send(200, {"id": "chatcmpl-double", "object": "chat.completion", "model": state.served_name(),
                                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                    "finish_reason": "length"}], "usage": usage})
            if self.path.startswith("/v1/completions"):
                return self.send(200, {"id": "cmpl-double", "object": "text_completion", "model": state.served_name(),
                                       "choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage})
            if self.path.startswith("/generate"):
                meta = {"completion_tokens": n, "prompt_tokens": 8}
                if state.accept_length() is not None:
                    meta["spec_accept_length"] = state.accept_length()
                return self.send(200, {"text": text, "output_ids": state.output_ids(str(body.get("text") or ""), n, peak > 1),
                                       "meta_info": meta})
            return self.send(404, {"error": "not found"})

    return Handler


def _init_addr(args):
    host, port = str(args["dist_init_addr"]).rsplit(":", 1)
    return host.strip("[]"), int(port)


def rendezvous(state):
    """Rank 0: accept the other ranks on the init address; exit when a joined rank goes away."""
    host, port = _init_addr(state.args)
    srv = socket.create_server(("", port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, reuse_port=False)

    def serve(conn):
        words = conn.makefile("r").readline().split()
        rank = int(words[1]) if len(words) == 3 and words[1].isdigit() else -1
        nnodes = int(words[2]) if len(words) == 3 and words[2].isdigit() else -1
        if nnodes != state.nnodes or not 0 < rank < state.nnodes or rank in state.joined:
            sys.stderr.write("sglang-double: refused %s (this group: nnodes %d, joined %s)\n" % (words, state.nnodes, sorted(state.joined)))
            conn.sendall(b"refused nnodes %d\n" % state.nnodes)
            conn.close()
            return
        conn.sendall(b"ok\n")
        state.joined.add(rank)
        sys.stderr.write("sglang-double: rank %d joined (%d of %d)\n" % (rank, len(state.joined) + 1, state.nnodes))
        while conn.recv(64):
            pass
        if state.fault == "hang_on_member_loss":
            sys.stderr.write("sglang-double: rank %d left the group: the scheduler hangs, /health still answers\n" % rank)
            state.hung = True
            return
        sys.stderr.write("sglang-double: rank %d left the group: communicator aborted\n" % rank)
        os._exit(3)

    def accept():
        while True:
            conn = srv.accept()[0]
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()


def join(args):
    """Rank >= 1: join rank 0 (retrying), or exit 3 when it refuses; exit 3 when rank 0 goes away later."""
    host, port = _init_addr(args)
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            time.sleep(0.5)
    conn.settimeout(None)
    conn.sendall(b"join %d %d\n" % (int(args.get("node_rank") or 0), int(args.get("nnodes") or 1)))
    answer = conn.makefile("r").readline().strip()
    if answer != "ok":
        sys.stderr.write("sglang-double: rank 0 at %s:%d refused this rank: %s\n" % (host, port, answer))
        sys.exit(3)
    sys.stderr.write("sglang-double: joined rank 0 at %s:%d\n" % (host, port))

    def watch():
        while conn.recv(64):
            pass
        sys.stderr.write("sglang-double: lost rank 0: communicator aborted\n")
        os._exit(3)
    threading.Thread(target=watch, daemon=True).start()


def main(argv):
    args = parse(argv)
    if "config" in args:
        args.update(read_config(args["config"]))
    fault = fault_for(" ".join(argv))
    jit = warm_up(args) if os.path.isdir(str(args.get("model_path", ""))) else "none"
    sys.stderr.write("sglang-double %s: model %s on %s:%s fault=%s jit=%s\n"
                     % (VERSION, args.get("model_path"), args.get("host"), args.get("port"), fault, jit))
    if fault == "crash":
        sys.stderr.write("sglang-double: injected crash at start\n")
        return 3
    if "model_path" not in args or not os.path.isdir(str(args["model_path"])):
        sys.stderr.write("sglang-double: --model-path %s is not a directory\n" % args.get("model_path"))
        return 2
    state = State(args, fault, jit)
    if state.nnodes > 1 and int(args.get("node_rank") or 0) > 0:
        join(args)  # then the stand-alone health server of a non-zero rank
        state.member = True
    elif state.nnodes > 1:
        rendezvous(state)
    server = ThreadingHTTPServer((str(args.get("host", "127.0.0.1")), int(args.get("port", 30000))), make_handler(state))
    if fault and fault.startswith("crash_after:"):
        threading.Timer(float(fault.split(":", 1)[1]), lambda: os._exit(3)).start()
    if fault and fault.startswith("hang_after:"):
        threading.Timer(float(fault.split(":", 1)[1]), lambda: setattr(state, "hung", True)).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
