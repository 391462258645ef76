"""ddtree-fleet: the collection's jobs through ansible-runner, with a live progress display.

  ddtree-fleet facts|deploy|rollout|bench|report -i INVENTORY [--limit HOSTS] [-e VARS]... [--check] [--tags T]

facts   GPU facts, profiles, preflight and the fleet report (playbooks/facts.yml)
deploy  the whole stack, stage by stage (site.yml)
rollout canary and batches behind the router (playbooks/rollout.yml)
bench   baseline vs speculative per host (playbooks/bench.yml)
report  the fleet report only: facts, and each GPU host's live release and health (playbooks/facts.yml)

Exit codes: 0 success, 2 a host failed, 3 a host was unreachable, 4 usage or runner error.
Reports (fleet.md, fleet.json, bench.json) go to $DDTREE_REPORT_DIR, else ./reports.
"""
import argparse
import os
import sys
import tempfile
import time

PLAYBOOKS = {"facts": "playbooks/facts.yml", "deploy": "site.yml", "rollout": "playbooks/rollout.yml",
             "bench": "playbooks/bench.yml", "report": "playbooks/facts.yml"}


def project_dir():
    """The collection checkout (where site.yml is): $DDTREE_FLEET_DIR, else the current directory."""
    d = os.environ.get("DDTREE_FLEET_DIR") or os.getcwd()
    return os.path.abspath(d)


class Progress:
    """Turns runner events into a live display: one line per play, one line per task when it ends
    (hosts ok / changed / failed / skipped and its seconds), failures and unreachable hosts the
    moment they happen, and retries (health gates, downloads) as they go."""

    KINDS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
             "runner_on_unreachable": "unreachable"}

    def __init__(self, out):
        self.out, self.start, self.failures = out, time.time(), []
        self.task, self.task_start, self.counts = None, 0.0, {}
        self.plays = 0

    def line(self, text):
        self.out.write("[%6.1fs] %s\n" % (time.time() - self.start, text))
        self.out.flush()

    def end_task(self):
        if self.task is None:
            return
        c = self.counts
        parts = ["%s %d" % (k, c[k]) for k in ("ok", "changed", "failed", "skipped", "unreachable") if c.get(k)]
        self.line("  %-60s %s (%.1fs)" % (self.task[:60], ", ".join(parts) or "no hosts", time.time() - self.task_start))
        self.task = None

    def __call__(self, event):
        kind, data = event.get("event"), event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.end_task()
            self.plays += 1
            self.line("PLAY %d: %s" % (self.plays, data.get("play", "")))
        elif kind == "playbook_on_task_start":
            self.end_task()
            self.task, self.task_start, self.counts = data.get("task", ""), time.time(), {}
        elif kind in self.KINDS:
            res = data.get("res") or {}
            state = self.KINDS[kind]
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                state = "ok"
            self.counts[state] = self.counts.get(state, 0) + 1
            if state == "ok" and res.get("changed"):
                self.counts["changed"] = self.counts.get("changed", 0) + 1
            if state == "failed":
                msg = (res.get("msg") or "").strip().splitlines()
                self.failures.append((data.get("host"), msg[0] if msg else ""))
                self.line("    FAILED %s: %s" % (data.get("host"), " | ".join(msg[:3])))
            elif state == "unreachable":
                self.line("    UNREACHABLE %s: %s" % (data.get("host"), (res.get("msg") or "").strip()[:200]))
        elif kind == "runner_retry":
            self.line("    waiting on %s (attempt %s of %s)" % (data.get("host"), (data.get("res") or {}).get("attempts", "?"),
                                                              (data.get("res") or {}).get("retries", "?")))
        elif kind == "playbook_on_stats":
            self.end_task()
        return True


def parse(argv):
    ap = argparse.ArgumentParser(prog="ddtree-fleet", description=__doc__.split("\n\n")[0])
    ap.add_argument("job", choices=sorted(PLAYBOOKS))
    ap.add_argument("-i", "--inventory", required=True)
    ap.add_argument("-l", "--limit")
    ap.add_argument("-e", "--extra-vars", action="append", default=[])
    ap.add_argument("-t", "--tags")
    ap.add_argument("-C", "--check", action="store_true")
    return ap.parse_args(argv)


def main(argv=None, out=sys.stdout):
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        import ansible_runner  # pylint: disable=import-outside-toplevel
    except ImportError:
        out.write("ddtree-fleet: ansible-runner is not installed (pip install ansible-runner)\n")
        return 4
    proj = project_dir()
    playbook = os.path.join(proj, PLAYBOOKS[args.job])
    inventory = os.path.abspath(args.inventory)
    if not os.path.exists(playbook) or not os.path.exists(inventory):
        out.write("ddtree-fleet: %s not found (run from the collection checkout or set DDTREE_FLEET_DIR)\n"
                  % (playbook if not os.path.exists(playbook) else inventory))
        return 4
    cmdline = ["--inventory", inventory]
    for e in args.extra_vars:
        cmdline += ["--extra-vars", e]
    if args.tags:
        cmdline += ["--tags", args.tags]
    if args.check:
        cmdline += ["--check", "--diff"]
    progress = Progress(out)
    env = {"ANSIBLE_CONFIG": os.path.join(proj, "ansible.cfg"),
           "DDTREE_REPORT_DIR": os.environ.get("DDTREE_REPORT_DIR") or os.path.join(os.getcwd(), "reports")}
    with tempfile.TemporaryDirectory(prefix="ddtree-fleet-") as pdd:
        r = ansible_runner.run(private_data_dir=pdd, project_dir=proj, playbook=playbook, cmdline=" ".join(
            "'%s'" % c.replace("'", "'\\''") for c in cmdline), limit=args.limit, envvars=env,
            event_handler=progress, quiet=True, settings={"suppress_ansible_output": True})
        stats = r.stats or {}
    hosts = sorted(set().union(*[set(stats.get(k) or {}) for k in ("ok", "changed", "failures", "dark", "skipped")])) if stats else []
    for h in hosts:
        out.write("%-28s ok=%-4d changed=%-4d failed=%-3d unreachable=%d\n" % (
            h, (stats.get("ok") or {}).get(h, 0), (stats.get("changed") or {}).get(h, 0),
            (stats.get("failures") or {}).get(h, 0), (stats.get("dark") or {}).get(h, 0)))
    out.write("reports: %s\n" % env["DDTREE_REPORT_DIR"])
    if stats.get("dark"):
        return 3
    if stats.get("failures") or r.rc != 0:
        return 2 if stats.get("failures") else 4
    return 0
