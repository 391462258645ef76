#!/usr/bin/env python3
"""TEST DOUBLE: a local Hugging Face Hub mirror (the hub is not reachable from here).

Serves repositories from ROOT/<owner>/<name>/ (files as they would be in the repo) with the
hub's API shape and download paths:

  GET /api/models/<repo>/revision/<rev>?blobs=true   {id, sha, siblings: [{rfilename, size, blobId, lfs?}]}
  GET /api/models/<repo>/tree/<rev>?recursive=true   [{type, path, oid, size, lfs?}] (huggingface_hub lists it)
  GET|HEAD /<repo>/resolve/<rev>/<path>              the file, with Range (206), ETag, Content-Length,
                                                     X-Repo-Commit, X-Linked-Etag/-Size (what huggingface_hub reads)

Files of 1 MiB and more are "LFS" (siblings carry lfs.sha256 and lfs.size, as the hub does for
weights); smaller ones only carry blobId, git's sha1 of the blob. The revision sha is a hash of
the file list, so changing a file changes it.

Options (argv): --root DIR --port N [--gated REPO --token T]... [--rate BYTES_PER_S] (per
connection, like a CDN) [--corrupt REPO/PATH]... (serves flipped bytes, hashes unchanged)
[--log FILE] (one JSON line per file response: path, bytes sent, peer).

Misbehaviour on purpose (a careless or hostile mirror), for the trust tests of model_fetch:
  --hostile-name NAME          list NAME as one more file of every repo (e.g. ../../escaped.txt) and
                               serve it (a name that tries to leave the destination)
  --redirect BASE              answer files of --redirect-min bytes and more with 302 to
                               BASE/<repo>/resolve/<rev>/<path> (another host, as the hub does to its CDN);
                               BASE 'self' redirects to /cdn/... on this server (a same-host redirect)
  --header-log FILE            one JSON line per request: method, path, whether Authorization arrived
  --wrong-size REPO/PATH       serve the file with bytes beyond the listed size
  --change-after-listing       once a listing was answered, serve every file changed (a repo updated
                               between the API call and the download, served under the old revision)
  --drop REPO/PATH:N           the first N GETs of that file break off halfway (dropped connections)
"""
import argparse
import hashlib
import io
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS_MIN = 1 << 20


def blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, path, repo_id):
        self.path, self.id = path, repo_id
        self.files = {}
        for d, _dirs, names in os.walk(path):
            for n in sorted(names):
                full = os.path.join(d, n)
                rel = os.path.relpath(full, path)
                with open(full, "rb") as f:
                    data = f.read()
                info = {"rfilename": rel, "size": len(data), "blobId": blob_sha1(data)}
                if len(data) >= LFS_MIN:
                    info["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                self.files[rel] = info
        self.sha = hashlib.sha1(json.dumps(sorted(self.files.items())).encode()).hexdigest()


def load(root):
    repos = {}
    for owner in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, owner))):
            rid = "%s/%s" % (owner, name)
            repos[rid] = Repo(os.path.join(root, owner, name), rid)
    return repos


HOSTILE = b"written outside the destination\n"


def make_handler(opts, repos, log_lock):
    state = {"listed": False, "drops": dict((d.rsplit(":", 1)[0], int(d.rsplit(":", 1)[1])) for d in opts.drop)}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def json(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def allowed(self, repo):
            if repo not in opts.gated:
                return True
            return self.headers.get("Authorization") == "Bearer %s" % opts.token

        def find(self, parts):
            # <owner>/<name>/resolve/<rev>/<path...>
            if len(parts) >= 5 and parts[2] == "resolve":
                return "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            return None, None, None

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urlparse(self.path)
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            if opts.header_log:
                with log_lock, open(opts.header_log, "a") as lf:
                    lf.write(json.dumps({"method": self.command, "path": url.path, "port": opts.port,
                                         "auth": "Authorization" in self.headers}) + "\n")
            cdn = parts[:1] == ["cdn"]
            if cdn:
                parts = parts[1:]
            if parts[:2] == ["api", "models"]:
                rid = "/".join(parts[2:4])
                repo = repos.get(rid)
                if repo is None:
                    return self.json(404, {"error": "Repository Not Found"})
                if not self.allowed(rid):
                    return self.json(401, {"error": "Access to model %s is restricted. You must be authenticated." % rid})
                if len(parts) > 5 and parts[4] == "tree":  # what huggingface_hub's snapshot_download lists
                    return self.json(200, [dict({"type": "file", "path": k, "oid": v["blobId"], "size": v["size"]},
                                                **({"lfs": {"oid": v["lfs"]["sha256"], "size": v["size"],
                                                            "pointerSize": 134}} if "lfs" in v else {}))
                                           for k, v in sorted(repo.files.items())])
                state["listed"] = True
                hostile = [{"rfilename": n, "size": len(HOSTILE), "blobId": blob_sha1(HOSTILE)} for n in opts.hostile_name]
                return self.json(200, {"id": rid, "modelId": rid, "sha": repo.sha, "private": False,
                                       "gated": "manual" if rid in opts.gated else False,
                                       "siblings": [repo.files[k] for k in sorted(repo.files)] + hostile})
            rid, rev, path = self.find(parts)
            repo = repos.get(rid)
            if repo is not None and path in opts.hostile_name:
                self.send_response(200)
                self.send_header("Content-Length", str(len(HOSTILE)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(HOSTILE)
                return None
            if repo is None or path not in repo.files:
                return self.json(404, {"error": "Entry not found"})
            if not self.allowed(rid):
                return self.json(401, {"error": "Access restricted"})
            if opts.redirect and not cdn and repo.files[path]["size"] >= opts.redirect_min:
                base = "" if opts.redirect == "self" else opts.redirect.rstrip("/")
                self.send_response(302)
                self.send_header("Location", "%s/cdn/%s/resolve/%s/%s" % (base, rid, rev, path))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            data = None
            key = "%s/%s" % (rid, path)
            if key in opts.wrong_size or state["listed"] and opts.change_after_listing:
                with open(os.path.join(repo.path, path), "rb") as f:
                    data = f.read() + b"\nchanged or padded by the mirror\n"
            size = len(data) if data is not None else repo.files[path]["size"]
            start, end = 0, size - 1
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, b = rng[6:].split("-", 1)
                start = int(a) if a else max(size - int(b), 0)
                end = int(b) if (a and b) else size - 1
            length = max(end - start + 1, 0)
            self.send_response(206 if rng else 200)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            etag = '"%s"' % repo.files[path].get("lfs", {}).get("sha256", repo.files[path]["blobId"])
            self.send_header("ETag", etag)
            # what huggingface_hub reads before it downloads (the hub sends them, LFS files by redirect)
            self.send_header("X-Repo-Commit", repo.sha)
            self.send_header("X-Linked-Etag", etag)
            self.send_header("X-Linked-Size", str(size))
            if rng:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            if self.command == "HEAD":
                return None
            sent = 0
            corrupt = key in opts.corrupt
            drop = None
            with log_lock:
                if state["drops"].get(key, 0) > 0 and self.command == "GET":
                    state["drops"][key] -= 1
                    drop = length // 2
            with (io.BytesIO(data) if data is not None else open(os.path.join(repo.path, path), "rb")) as f:
                f.seek(start)
                t0 = time.time()
                while sent < length:
                    chunk = f.read(min(65536, length - sent))
                    if not chunk:
                        break
                    if corrupt:
                        chunk = bytes(b ^ 0xFF for b in chunk)
                    if drop is not None and sent + len(chunk) > drop:
                        self.wfile.write(chunk[:max(drop - sent, 0)])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return None
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        break
                    sent += len(chunk)
                    if opts.rate:
                        ahead = sent / opts.rate - (time.time() - t0)
                        if ahead > 0:
                            time.sleep(ahead)
            if opts.log:
                with log_lock, open(opts.log, "a") as lf:
                    lf.write(json.dumps({"repo": rid, "path": path, "bytes": sent, "peer": self.client_address[0]}) + "\n")
            return None

    return Handler


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--gated", action="append", default=[])
    ap.add_argument("--token", default="")
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--log", default="")
    ap.add_argument("--hostile-name", action="append", default=[])
    ap.add_argument("--redirect", default="")
    ap.add_argument("--redirect-min", type=int, default=LFS_MIN)
    ap.add_argument("--header-log", default="")
    ap.add_argument("--wrong-size", action="append", default=[])
    ap.add_argument("--change-after-listing", action="store_true")
    ap.add_argument("--drop", action="append", default=[])
    opts = ap.parse_args(argv)
    repos = load(opts.root)
    server = ThreadingHTTPServer((opts.bind, opts.port), make_handler(opts, repos, threading.Lock()))
    sys.stderr.write("hub mirror: %d repos on :%d\n" % (len(repos), opts.port))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
