"""model_fetch runs for real: aria2c against the hub mirror double serving a small real model."""
import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port

DOUBLES = Path(__file__).resolve().parents[3] / "doubles"
REPO = "ddtree-test/tiny-model"


@pytest.fixture
def hub(tmp_path):
    root = tmp_path / "hub"
    subprocess.run([sys.executable, str(DOUBLES / "make_model.py"), str(root / REPO), "--shards", "3", "--shard-mib", "2"], check=True)
    procs = []

    def start(*extra):
        port = free_port()
        log = tmp_path / ("hub-%d.log" % port)
        procs.append(subprocess.Popen([sys.executable, str(DOUBLES / "hf_hub.py"), "--root", str(root), "--port", str(port),
                                       "--bind", "127.0.0.1", "--log", str(log), *extra]))
        for _attempt in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        return "http://127.0.0.1:%d" % port, log
    yield start, root / REPO
    for p in procs:
        p.kill()
        p.wait()


def sha256(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_fetch_verify_publish_and_no_second_download(run_module, hub, tmp_path):
    start, src = hub
    url, log = start()
    dest = tmp_path / "models" / "tiny"
    args = dict(repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0, connections=4)
    assert run_module("model_fetch", check=True, **args)["changed"] and not dest.exists()
    r = run_module("model_fetch", **args)
    assert r["changed"] and r["files"] == 7 and r["downloaded_bytes"] == r["bytes"]
    for f in src.iterdir():
        assert sha256(dest / f.name) == sha256(f)
    man = json.loads((dest / ".ddtree-manifest.json").read_text())
    assert man["repo_id"] == REPO and len(man["revision"]) == 40
    lfs = [e for e in man["files"] if e["sha256"]]
    assert len(lfs) == 3 and all(e["path"].endswith(".safetensors") for e in lfs)
    assert not Path(str(dest) + ".partial").exists()
    served = len(log.read_text().splitlines())
    again = run_module("model_fetch", **args)
    assert not again["changed"] and len(log.read_text().splitlines()) == served  # nothing fetched
    full = run_module("model_fetch", verify="full", **args)
    assert not full["changed"]
    (dest / "config.json").write_text("{}")  # damage: full verification notices
    assert run_module("model_fetch", verify="full", **args)["changed"]
    assert sha256(dest / "config.json") == sha256(src / "config.json")
    assert Path(str(dest) + ".previous").is_dir()


def test_include_exclude(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "m"), margin_gib=0,
                   include=["*.json"], exclude=["tokenizer*"])
    assert r["files"] == 3 and sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        ".ddtree-manifest.json", "config.json", "generation_config.json", "model.safetensors.index.json"]


def test_gated_repo_needs_the_token_which_never_shows(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start("--gated", REPO, "--token", "hf_secret_test_token")
    dest = tmp_path / "g"
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0)
    assert r["failed"] and "401" in r["msg"] and "the token is missing" in r["msg"]
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0, token="hf_secret_test_token")
    assert r["changed"] and "hf_secret_test_token" not in json.dumps(r)
    assert not list(Path(str(dest) + ".partial").glob("*")) if Path(str(dest) + ".partial").exists() else True
    assert "hf_secret_test_token" not in "".join(p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file() and p.suffix == ".json")


def test_missing_file_is_named(run_module, hub, tmp_path):
    start, src = hub
    url, _log = start()
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "a"), margin_gib=0)
    man = json.loads((tmp_path / "a" / ".ddtree-manifest.json").read_text())
    man["files"].append({"path": "model-00009-of-00009.safetensors", "size": 10, "sha256": "0" * 64, "sha1": None})
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps(man))
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "b"), margin_gib=0, manifest=str(pinned))
    assert r["failed"] and "model-00009-of-00009.safetensors: HTTP 404" in r["msg"]
    assert not (tmp_path / "b").exists()  # nothing published


def test_corrupt_file_is_fetched_again_then_named(run_module, hub, tmp_path):
    start, _src = hub
    url, log = start("--corrupt", REPO + "/config.json")
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "c"), margin_gib=0)
    assert r["failed"] and "config.json is" in r["msg"] and "the hub says" in r["msg"]
    assert sum(1 for ln in log.read_text().splitlines() if json.loads(ln)["path"] == "config.json") == 2
    assert not (tmp_path / "c").exists()


def test_corrupt_shard_caught_by_aria2c_is_fetched_again_then_named(run_module, hub, tmp_path):
    start, src = hub
    shard = sorted(p.name for p in src.glob("*.safetensors"))[1]
    url, log = start("--corrupt", REPO + "/" + shard)
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "c"), margin_gib=0)
    assert r["failed"] and "checksum mismatch after fetching again" in r["msg"], r["msg"]
    assert "%s is something else (aria2c's sha-256 check failed), the hub says %s" % (shard, sha256(src / shard)) in r["msg"]
    assert "did not complete" not in r["msg"]
    sent = sum(json.loads(ln)["bytes"] for ln in log.read_text().splitlines() if json.loads(ln)["path"] == shard)
    size = (src / shard).stat().st_size
    assert 2 * size <= sent < 3 * size  # fetched once more, not more
    assert not (tmp_path / "c").exists()  # nothing published


def test_progress_file_is_marked_finished_on_success_and_on_failure(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"finished": True, "bytes": 1, "total": 1}))  # an earlier run's mark
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "p"), margin_gib=0, progress_file=str(progress))
    state = json.loads(progress.read_text())
    assert r["changed"] and state["finished"] and state["bytes"] == state["total"] == r["bytes"]
    failed = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "q"), margin_gib=100000,
                        progress_file=str(progress))
    state = json.loads(progress.read_text())
    assert failed["failed"] and state["finished"] and state["bytes"] == 0  # reset at the start, marked at the end


def test_not_enough_space_fails_before_download(run_module, hub, tmp_path):
    start, _src = hub
    url, log = start()
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "d"), margin_gib=100000)
    assert r["failed"] and "needs" in r["msg"] and "GiB free" in r["msg"]
    assert not log.exists() or log.read_text() == ""


def test_peers_serve_first_and_the_origin_is_the_fallback(run_module, hub, tmp_path):
    start, _src = hub
    url, log = start()
    seed = tmp_path / "seed" / "tiny"
    assert run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(seed), margin_gib=0)["changed"]
    (seed / "config.json").unlink()  # the peer lacks one file: it must come from the origin
    port = free_port()
    peer = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                             str(tmp_path / "seed")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        mark = len(log.read_text().splitlines())
        r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "other" / "tiny"), margin_gib=0,
                       peers=["http://127.0.0.1:%d/tiny" % port])
    finally:
        peer.kill()
        peer.wait()
    assert r["changed"] and "config.json" not in r["from_peers"] and len(r["from_peers"]) == 6
    from_origin = [json.loads(ln)["path"] for ln in log.read_text().splitlines()[mark:]]
    assert from_origin == ["config.json"]
    assert (tmp_path / "other" / "tiny" / "config.json").read_bytes() == (_src / "config.json").read_bytes()


# --- a careless or hostile hub/mirror (tests/doubles/hf_hub.py misbehaving on purpose) ---

def _previous_model(run_module, url, dest):
    """A model already published at dest: a failed run must leave it in place."""
    assert run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0)["changed"]
    return {p.name: sha256(p) for p in dest.iterdir()}


@pytest.mark.parametrize("name", ["../../escaped.txt", "../escaped-one-up.txt", "/tmp/ddtree-escaped-abs.txt",
                                  "sub/../../escaped.txt", "a\\b.txt", "ok/./x.txt", "evil\nname", ""])
def test_hostile_names_in_the_listing_fail_before_any_byte(run_module, hub, tmp_path, name):
    start, _src = hub
    url, log = start("--hostile-name", name)
    dest = tmp_path / "deep" / "models" / "tiny"
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0)
    assert r["failed"] and "unsafe file" in r["msg"] and repr(name) in r["msg"] and url in r["msg"], r["msg"]
    assert "nothing was downloaded or published" in r["msg"]
    assert not dest.exists() and not Path(str(dest) + ".partial").exists()
    assert not list(tmp_path.rglob("escaped*")) and not Path("/tmp/ddtree-escaped-abs.txt").exists()
    assert not log.exists() or log.read_text() == ""  # not one file was requested


def test_hostile_names_in_a_pinned_manifest_fail(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    prev = _previous_model(run_module, url, tmp_path / "m")
    man = json.loads((tmp_path / "m" / ".ddtree-manifest.json").read_text())
    man["files"].append({"path": "../../etc/cron.d/x", "size": 3, "sha256": None, "sha1": "0" * 40})
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps(man))
    man["revision"] = "x"  # the published one differs: a fetch would be needed
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(tmp_path / "m"), margin_gib=0, manifest=str(pinned))
    assert r["failed"] and "the pinned manifest" in r["msg"] and "'../../etc/cron.d/x'" in r["msg"], r["msg"]
    assert {p.name: sha256(p) for p in (tmp_path / "m").iterdir()} == prev


def test_a_link_in_staging_that_leads_out_is_refused(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    dest = tmp_path / "models" / "tiny"
    outside = tmp_path / "outside"
    outside.mkdir()
    staging = Path(str(dest) + ".partial")
    staging.mkdir(parents=True)
    (staging / "config.json").symlink_to(outside / "config.json")  # planted by someone else
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0)
    assert r["failed"] and "leads out of" in r["msg"] and "config.json" in r["msg"], r["msg"]
    assert not list(outside.iterdir()) and not dest.exists()


def _two_hosts(hub, tmp_path, *origin_extra):
    """An origin on 127.0.0.1 gated by a token whose weights redirect to a 'CDN' on localhost (another
    host and port), each logging the headers that arrive."""
    start, src = hub
    cdn = start("--header-log", str(tmp_path / "cdn-headers.log"))[0]
    cdn = cdn.replace("127.0.0.1", "localhost")
    url = start("--gated", REPO, "--token", "hf_secret_test_token", "--redirect", cdn,
                "--header-log", str(tmp_path / "origin-headers.log"), *origin_extra)[0]
    return url, src


def _headers(path):
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_token_never_follows_a_redirect_to_another_host(run_module, hub, tmp_path):
    url, src = _two_hosts(hub, tmp_path)
    dest = tmp_path / "t"
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0, token="hf_secret_test_token")
    assert r["changed"], r.get("msg")
    for f in src.iterdir():
        assert sha256(dest / f.name) == sha256(f)
    cdn = _headers(tmp_path / "cdn-headers.log")
    shards = [h for h in cdn if h["path"].endswith(".safetensors")]
    assert len({h["path"] for h in shards}) == 3  # every weight came from the other host...
    assert not any(h["auth"] for h in cdn), cdn  # ...and not one request there carried the token
    origin = _headers(tmp_path / "origin-headers.log")
    assert origin and all(h["auth"] for h in origin)  # the endpoint's own host did get it (gated)


def test_same_host_redirect_keeps_the_token(run_module, hub, tmp_path):
    start, src = hub
    url, _log = start("--gated", REPO, "--token", "hf_secret_test_token", "--redirect", "self",
                      "--header-log", str(tmp_path / "h.log"))
    dest = tmp_path / "s"
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0, token="hf_secret_test_token")
    assert r["changed"], r.get("msg")
    cdn = [h for h in _headers(tmp_path / "h.log") if h["path"].startswith("/cdn/") and h["method"] == "GET"]
    assert cdn and all(h["auth"] for h in cdn)  # the gated same-host target needs it, and got it


def test_wrong_size_is_named_and_the_previous_model_stays(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    dest = tmp_path / "w"
    prev = _previous_model(run_module, url, dest)
    url2, _log = start("--wrong-size", REPO + "/tokenizer.json", "--corrupt", REPO + "/config.json")
    r = run_module("model_fetch", repo_id=REPO, endpoint=url2, dest=str(dest), margin_gib=0, verify="full",
                   revision="main")
    # the published copy matches the listing (same repo content): verify=full re-hashes it and keeps it
    assert not r.get("failed") and not r["changed"], r
    (dest / "config.json").write_text("{}")  # now a fetch is needed, from the careless mirror
    r = run_module("model_fetch", repo_id=REPO, endpoint=url2, dest=str(dest), margin_gib=0, verify="full")
    assert r["failed"], r
    assert "tokenizer.json" in r["msg"] and ("wrong size" in r["msg"] or "the hub says" in r["msg"]), r["msg"]
    prev["config.json"] = sha256(dest / "config.json")
    assert {p.name: sha256(p) for p in dest.iterdir()} == prev  # nothing published over it


def test_listing_that_changes_before_the_download_fails_and_keeps_the_previous(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    dest = tmp_path / "c"
    prev = _previous_model(run_module, url, dest)
    (dest / "config.json").write_text("{}")
    prev["config.json"] = sha256(dest / "config.json")
    url2, _log = start("--change-after-listing")
    r = run_module("model_fetch", repo_id=REPO, endpoint=url2, dest=str(dest), margin_gib=0, verify="full")
    assert r["failed"] and "config.json" in r["msg"], r
    assert {p.name: sha256(p) for p in dest.iterdir()} == prev


def test_dropped_connections_resume(run_module, hub, tmp_path):
    start, src = hub
    shard = sorted(p.name for p in src.glob("*.safetensors"))[0]
    url, _log = start("--drop", "%s/%s:3" % (REPO, shard), "--drop", REPO + "/config.json:2")
    dest = tmp_path / "d"
    r = run_module("model_fetch", repo_id=REPO, endpoint=url, dest=str(dest), margin_gib=0, connections=1)
    assert r["changed"], r.get("msg")
    assert sha256(dest / shard) == sha256(src / shard)


def test_a_stalled_server_fails_clearly_and_keeps_the_previous(run_module, hub, tmp_path):
    start, _src = hub
    url, _log = start()
    dest = tmp_path / "slow"
    prev = _previous_model(run_module, url, dest)
    for f in dest.glob("*.safetensors"):
        f.write_bytes(b"x")  # damaged: a fetch is needed
    prev = {p.name: sha256(p) for p in dest.iterdir()}
    slow, _log = start("--rate", "2000")
    r = run_module("model_fetch", repo_id=REPO, endpoint=slow, dest=str(dest), margin_gib=0, verify="full",
                   lowest_speed="500K", max_tries=2)
    assert r["failed"] and "did not complete" in r["msg"] and ".safetensors" in r["msg"], r
    assert "next run resumes" in r["msg"]
    assert {p.name: sha256(p) for p in dest.iterdir()} == prev
