"""ddtree-fleet: the ddtree.fleet jobs through ansible-runner, with a live progress display.

  ddtree-fleet JOB -i INVENTORY [--limit HOSTS] [-e VARS]... [--tags T] [--check]

Where the jobs come from: a checkout of the collection (the current directory when it holds
site.yml and galaxy.yml, or $DDTREE_FLEET_DIR) runs its playbooks with its ansible.cfg; otherwise
the installed collection (ansible-galaxy collection install ddtree-fleet-X.tar.gz) runs them as
ddtree.fleet.<playbook>, with your own Ansible configuration.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# job -> (playbook in playbooks/, what it does)
JOBS = {
    "facts": ("facts", "GPU facts, family and serving profile, preflight (GPU health included), what each GPU host "
                       "serves now, and the fleet report. Changes nothing."),
    "deploy": ("site", "the whole stack, stage by stage: base, facts and preflight, CUDA toolkit, serving venv, "
                       "models, SGLang patch series, service (health, correctness and acceptance gates), router, "
                       "monitoring targets, fleet report. A second run changes nothing."),
    "rollout": ("rollout", "a change across the GPU hosts behind the router: a canary, then batches; each host "
                           "drained, deployed, gated and rejoined; stops at the first failure. -e "
                           "ddtree_rollout_probe_concurrency=2 keeps requests running through the router and "
                           "fails on any that fails. Recorded in reports/rollouts/<id>.json."),
    "bench": ("bench", "per host: the autoregressive baseline and speculative decoding measured as releases of "
                       "the first instance; the configured release is restored. Results in reports/bench.json."),
    "report": ("facts", "the fleet report only (the facts job): reports/fleet.md and fleet.json."),
}
PLAYBOOKS = dict((job, "playbooks/%s.yml" % pb) for job, (pb, _what) in JOBS.items())

EXIT_CODES = "exit codes: 0 success, 2 a host failed, 3 a host was unreachable, 4 usage or runner error"


def checkout_dir():
    """The collection checkout to run from ($DDTREE_FLEET_DIR, else the current directory), or None."""
    d = os.path.abspath(os.environ.get("DDTREE_FLEET_DIR") or os.getcwd())
    if os.path.isfile(os.path.join(d, "site.yml")) and os.path.isfile(os.path.join(d, "galaxy.yml")):
        return d
    return None


def installed_collection():
    """Where Ansible loads ddtree.fleet from (ansible-galaxy's view: the configured collections paths), or None."""
    try:
        p = subprocess.run(["ansible-galaxy", "collection", "list", "ddtree.fleet", "--format", "json"],
                           capture_output=True, text=True, timeout=120, check=False)
        found = json.loads(p.stdout or "{}") if p.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    for path, collections in found.items():
        if "ddtree.fleet" in (collections or {}):
            return os.path.join(path, "ddtree", "fleet")
    return None


class Progress:
    """Turns runner events into a live display: one line per play, one line per task when it ends
    (hosts ok / changed / failed / skipped and its seconds), failures and unreachable hosts the
    moment they happen, retries (health gates) as they go, and the progress lines long tasks print
    (model download, venv stream: 'host: label: 1.25 of 4.00 GiB (31%), ...') as a bar redrawn in
    place on a terminal, or as plain lines when the output is not one."""

    KINDS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
             "runner_on_unreachable": "unreachable"}
    PROGRESS = re.compile(r"^(?P<host>\S+): (?P<label>.+?): (?P<done>[\d.]+) of (?P<total>[\d.]+) (?P<unit>\S+) "
                          r"\((?P<pct>\d+(?:\.\d+)?)%\)(?P<rest>.*)$")
    BAR = 30

    def __init__(self, out, tty=None):
        self.out, self.start, self.failures = out, time.time(), []
        self.tty = out.isatty() if tty is None and hasattr(out, "isatty") else bool(tty)
        self.task, self.task_start, self.counts = None, 0.0, {}
        self.plays = 0
        self.bar_open = False

    def line(self, text):
        self.close_bar()
        self.out.write("[%6.1fs] %s\n" % (time.time() - self.start, text))
        self.out.flush()

    def close_bar(self):
        if self.bar_open:
            self.out.write("\n")
            self.bar_open = False

    def progress(self, m):
        if not self.tty:
            self.line("    %s" % m.group(0))
            return
        filled = int(self.BAR * min(float(m.group("pct")), 100.0) / 100)
        text = "    %s %s [%s%s] %s%% %s/%s %s%s" % (
            m.group("host"), m.group("label"), "#" * filled, "-" * (self.BAR - filled), m.group("pct"),
            m.group("done"), m.group("total"), m.group("unit"), m.group("rest"))
        self.out.write("\r\x1b[2K" + text)  # redraw the bar's line in place
        self.out.flush()
        self.bar_open = True

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
        elif kind == "verbose":
            for text in (event.get("stdout") or "").splitlines():
                m = self.PROGRESS.match(text.strip())
                if m:
                    self.progress(m)
        elif kind == "playbook_on_stats":
            self.end_task()
            self.close_bar()
        return True


def rollout_summary(report_dir, since):
    """One line on the record this rollout wrote (reports/rollouts/<id>.json), if it wrote one."""
    d = os.path.join(report_dir, "rollouts")
    paths = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".json")] if os.path.isdir(d) else []
    paths = [p for p in paths if os.path.getmtime(p) >= since - 1]
    if not paths:
        return "rollout record: none written (the rollout stopped before its first host finished)\n"
    path = max(paths, key=os.path.getmtime)
    with open(path) as f:
        rec = json.load(f)
    probe = rec.get("probe") or {}
    return "rollout record: %s (%s; %d hosts; %s)\n" % (
        path, rec.get("outcome"), len(rec.get("hosts") or {}),
        ("probe: %s requests, %s failed" % (probe.get("requests"), probe.get("failed_requests"))) if probe else "no probe")


def parse(argv):
    jobs = "\n".join("  %-8s %s" % (job, what) for job, (_pb, what) in JOBS.items())
    ap = argparse.ArgumentParser(
        prog="ddtree-fleet", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a ddtree.fleet job against an inventory, with a live progress display.",
        epilog="jobs:\n%s\n\n%s\nReports (fleet.md, fleet.json, bench.json, rollouts/) go to $DDTREE_REPORT_DIR, else "
               "./reports.\n\n%s" % (jobs, __doc__.split("\n\n", 2)[2].strip(), EXIT_CODES))
    ap.add_argument("job", choices=list(JOBS), metavar="JOB", help="one of: %s (described below)" % ", ".join(JOBS))
    ap.add_argument("-i", "--inventory", required=True, help="the inventory file or directory of the fleet")
    ap.add_argument("-l", "--limit", help="only these hosts or groups (Ansible's --limit pattern)")
    ap.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                    help="variables as key=value, JSON, or @file (repeatable), e.g. -e ddtree_rollout_batch=2")
    ap.add_argument("-t", "--tags", help="only the stages or tasks with these tags, e.g. facts,service")
    ap.add_argument("-C", "--check", action="store_true", help="show what would change (check mode with --diff)")
    return ap.parse_args(argv)


def locate(job, out):
    """(project_dir, playbook, ansible.cfg or None), or None after saying what is missing."""
    proj = checkout_dir()
    if proj:
        return proj, os.path.join(proj, PLAYBOOKS[job]), os.path.join(proj, "ansible.cfg")
    if os.environ.get("DDTREE_FLEET_DIR"):
        out.write("ddtree-fleet: DDTREE_FLEET_DIR=%s is not a checkout of ddtree.fleet (no site.yml and galaxy.yml "
                  "there); point it at one, or unset it to use the installed collection\n" % os.environ["DDTREE_FLEET_DIR"])
        return None
    if installed_collection():
        return os.getcwd(), "ddtree.fleet.%s" % JOBS[job][0], None
    out.write("ddtree-fleet: the ddtree.fleet collection is not installed where Ansible looks for collections, and %s "
              "is not a checkout of it: install it (ansible-galaxy collection install ddtree-fleet-<version>.tar.gz), "
              "or run from a checkout (or set DDTREE_FLEET_DIR to one)\n" % os.getcwd())
    return None


def main(argv=None, out=sys.stdout):
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        import ansible_runner  # pylint: disable=import-outside-toplevel
    except ImportError:
        out.write("ddtree-fleet: ansible-runner is not installed (pip install ansible-runner)\n")
        return 4
    inventory = os.path.abspath(args.inventory)
    if not os.path.exists(inventory):
        out.write("ddtree-fleet: inventory %s does not exist (give the inventory file or directory of the fleet "
                  "with -i, e.g. -i inventories/b300)\n" % inventory)
        return 4
    where = locate(args.job, out)
    if where is None:
        return 4
    proj, playbook, cfg = where
    cmdline = ["--inventory", inventory]
    for e in args.extra_vars:
        cmdline += ["--extra-vars", e]
    if args.tags:
        cmdline += ["--tags", args.tags]
    if args.check:
        cmdline += ["--check", "--diff"]
    progress = Progress(out)
    env = {"DDTREE_REPORT_DIR": os.environ.get("DDTREE_REPORT_DIR") or os.path.join(os.getcwd(), "reports")}
    if cfg:
        env["ANSIBLE_CONFIG"] = cfg
    progress.line("%s: %s (%s)" % (args.job, playbook, "checkout " + proj if cfg else "installed collection"))
    with tempfile.TemporaryDirectory(prefix="ddtree-fleet-") as pdd:
        r = ansible_runner.run(private_data_dir=pdd, project_dir=proj, playbook=playbook, cmdline=" ".join(
            "'%s'" % c.replace("'", "'\\''") for c in cmdline), limit=args.limit, envvars=env,
            event_handler=progress, quiet=True, settings={"suppress_ansible_output": True})
        stats = r.stats or {}
    progress.close_bar()
    if r.rc != 0 and not stats.get("failures") and not stats.get("dark"):
        # no host failed: Ansible itself stopped (a playbook or inventory it could not load); say what it said
        tail = [ln for ln in (r.stdout.read() if r.stdout else "").splitlines() if ln.strip()][-8:]
        out.write("ddtree-fleet: ansible-playbook stopped (rc %s):\n%s\n" % (r.rc, "\n".join("  " + ln for ln in tail)))
    hosts = sorted(set().union(*[set(stats.get(k) or {}) for k in ("ok", "changed", "failures", "dark", "skipped")])) if stats else []
    for h in hosts:
        out.write("%-28s ok=%-4d changed=%-4d failed=%-3d unreachable=%d\n" % (
            h, (stats.get("ok") or {}).get(h, 0), (stats.get("changed") or {}).get(h, 0),
            (stats.get("failures") or {}).get(h, 0), (stats.get("dark") or {}).get(h, 0)))
    out.write("reports: %s\n" % env["DDTREE_REPORT_DIR"])
    if args.job == "rollout":
        out.write(rollout_summary(env["DDTREE_REPORT_DIR"], progress.start))
    if stats.get("dark"):
        return 3
    if stats.get("failures") or r.rc != 0:
        return 2 if stats.get("failures") else 4
    return 0
