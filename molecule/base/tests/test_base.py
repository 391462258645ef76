"""Verify the base role on real systemd hosts: effects, not task results."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import names_only_inventory, other, playbook  # noqa: E402

testinfra_hosts = ["ansible://all"]

HOSTS = ["base-a", "base-b", "base-c"]
PEERS = {"base-a": "base-b", "base-b": "base-c", "base-c": "base-a"}
CONVERGE = "molecule/base/converge.yml"


class Ssh:
    def __init__(self, rc, stdout, stderr):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


def ssh_as_service_user(host, peer):
    """(rc, stdout, stderr) of the service user's ssh to peer; ssh's own 255 is folded into the output,
    since testinfra's ssh backend takes an exit status of 255 for its own connection failing."""
    r = host.run("su - ddtree -c 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 %s hostname'"
                 " ; echo \"rc=$?\"" % peer)
    lines = r.stdout.strip().splitlines()
    rc = int(lines[-1].split("=", 1)[1]) if lines and lines[-1].startswith("rc=") else r.rc
    return Ssh(rc, "\n".join(lines[:-1]), r.stderr)


def managed(host, path):
    text = host.file(path).content_string
    inside, out = False, []
    for line in text.splitlines():
        if line.startswith("# BEGIN ddtree.fleet base"):
            inside = True
        elif line.startswith("# END ddtree.fleet base"):
            inside = False
        elif inside:
            out.append(line)
    return out


def test_service_user(host):
    user = host.user("ddtree")
    assert user.exists
    assert user.group == "ddtree"
    assert user.home == "/var/lib/ddtree"
    assert host.file("/var/lib/ddtree/.ssh/id_ed25519").mode == 0o600


def test_prefix(host):
    prefix = host.file("/opt/ddtree")
    assert prefix.is_directory
    assert prefix.group == "ddtree" and prefix.user == "root"
    assert prefix.mode == 0o755  # the service user runs model code: it must not rename what root put here


def test_sshd_serves(host):
    assert host.service("ssh").is_running
    assert host.service("ssh").is_enabled
    assert host.socket("tcp://0.0.0.0:22").is_listening


def test_authorized_keys_lists_every_fleet_host(host):
    keys = host.file("/var/lib/ddtree/.ssh/authorized_keys").content_string
    comments = sorted(line.split()[-1] for line in keys.splitlines() if line.startswith("ssh-"))
    assert comments == ["ddtree.fleet:" + h for h in HOSTS]


def test_known_hosts_has_name_and_address(host):
    known = host.file("/etc/ssh/ssh_known_hosts").content_string
    for name in PEERS:
        assert any(line.split()[0].split(",")[0] == name for line in known.splitlines()), name


def test_host_to_host_ssh(host):
    me = host.check_output("hostname")
    for peer in HOSTS:
        r = ssh_as_service_user(host, peer)
        assert r.rc == 0 and r.stdout.strip() == peer, (me, peer, r.stderr)


def test_local_fact_reports_what_the_role_manages(host):
    """The role's executable local fact (read at fact gathering) lets a no-op run skip its look-ups."""
    fact = host.file("/etc/ansible/facts.d/ddtree_base.fact")
    assert fact.user == "root" and fact.mode == 0o755
    data = json.loads(host.check_output("/etc/ansible/facts.d/ddtree_base.fact"))
    assert data["group_exists"] and data["ssh_enabled"] and data["ssh_active"]
    assert data["user"] == {"group": "ddtree", "home": "/var/lib/ddtree", "shell": "/bin/bash", "home_is_dir": True}
    assert data["prefix"] == {"is_dir": True, "owner": 0, "group": "ddtree", "mode": "0755"}
    assert data["user_pubkey"] == host.file("/var/lib/ddtree/.ssh/id_ed25519.pub").content_string.strip()
    assert "dpkg" not in data  # packages are ddtree.fleet.packages' business, read once per run


def test_base_packages_are_installed(host):
    for name in ["openssh-server", "openssh-client", "zstd", "ca-certificates"]:
        assert host.package(name).is_installed, name


def test_drift_is_seen_through_the_fact_and_repaired(host):
    """What the fact shows out of place is repaired by the next run (and only that changes)."""
    if host.check_output("hostname") != "base-a":
        return
    # (sshd is disabled, not stopped: the run itself comes in over ssh)
    host.run_expect([0], "chmod 0700 /opt/ddtree && usermod -s /bin/sh ddtree && systemctl disable ssh")
    assert host.file("/opt/ddtree").mode == 0o700 and not host.service("ssh").is_enabled
    r = playbook("molecule/base/converge.yml")
    assert r.returncode == 0, r.text
    assert host.file("/opt/ddtree").mode == 0o755 and host.user("ddtree").shell == "/bin/bash"
    assert host.service("ssh").is_enabled and host.service("ssh").is_running
    again = playbook("molecule/base/converge.yml")
    assert again.returncode == 0 and again.text.count("changed=0") == 3, again.text


def test_limit_keeps_the_fleet_trust_and_adds_a_rekeyed_host(host):
    """--limit is how operators add or redo a host. base-c is re-made (new service-user key, new ssh
    host keys) and converged alone with --limit base-c: it must trust, and be trusted by, the hosts
    outside the limit, whose other lines stay as they were."""
    if host.check_output("hostname") != "base-a":
        return
    c = other("base-c")
    before_a = managed(host, "/etc/ssh/ssh_known_hosts")
    c.run_expect([0], "rm -f /var/lib/ddtree/.ssh/id_ed25519* /etc/ssh/ssh_host_* && ssh-keygen -A && systemctl restart ssh")
    assert ssh_as_service_user(host, "base-c").rc != 0  # base-a does not know the new host key yet
    r = playbook(CONVERGE, limit="base-c")
    assert r.returncode == 0, r.text
    for h in HOSTS:
        assert sorted(line.split()[0].split(",")[0] for line in managed(other(h), "/etc/ssh/ssh_known_hosts")) == HOSTS, h
    after_a = managed(host, "/etc/ssh/ssh_known_hosts")
    assert [x for x in after_a if not x.startswith("base-c")] == [x for x in before_a if not x.startswith("base-c")]
    assert after_a != before_a  # base-c's new host key reached base-a
    for src, dst in (("base-c", "base-a"), ("base-c", "base-b"), ("base-a", "base-c"), ("base-b", "base-c")):
        r = ssh_as_service_user(other(src), dst)
        assert r.rc == 0 and r.stdout.strip() == dst, (src, dst, r.stderr)
    again = playbook(CONVERGE, limit="base-c")
    assert again.returncode == 0 and "changed=0" in again.text and "changed=1" not in again.text, again.text


def test_a_host_that_is_down_keeps_its_place_in_the_trust(host):
    """A --limit run while another fleet host is down (paused): the run succeeds, that host's lines are
    kept as the others recorded them, and once it is back every host still reaches it."""
    if host.check_output("hostname") != "base-a":
        return
    import subprocess
    container = "mol-base-base-b"
    before = managed(host, "/etc/ssh/ssh_known_hosts")
    subprocess.run(["podman", "pause", container], check=True)
    try:
        r = playbook(CONVERGE, limit="base-c")
    finally:
        subprocess.run(["podman", "unpause", container], check=True)
    assert r.returncode == 0, r.text
    assert managed(host, "/etc/ssh/ssh_known_hosts") == before
    assert sorted(line.split()[0].split(",")[0] for line in managed(other("base-c"), "/etc/ssh/ssh_known_hosts")) == HOSTS
    r = ssh_as_service_user(other("base-c"), "base-b")
    assert r.rc == 0 and r.stdout.strip() == "base-b", r.stderr


def test_names_only_inventory_behind_an_ssh_config(host, tmp_path):
    """The same hosts named only (no ansible_host), reached through an ssh_config: the role runs,
    records the names (the peers resolve them on their network), and a second run changes nothing."""
    if host.check_output("hostname") != "base-a":
        return
    inv = names_only_inventory(tmp_path, {"fleet": HOSTS})
    r = playbook(CONVERGE, inventory=inv)
    assert r.returncode == 0, r.text
    for h in HOSTS:
        assert sorted(managed(other(h), "/etc/ssh/ssh_known_hosts"))[0].split()[0] == "base-a"  # name only, no address
    r = ssh_as_service_user(host, "base-b")
    assert r.rc == 0 and r.stdout.strip() == "base-b", r.stderr
    again = playbook(CONVERGE, inventory=inv)
    assert again.returncode == 0 and again.text.count("changed=0") == 3, again.text
