"""Verify the base role on real systemd hosts: effects, not task results."""
testinfra_hosts = ["ansible://all"]

PEERS = {"base-a": "base-b", "base-b": "base-a"}


def test_service_user(host):
    user = host.user("ddtree")
    assert user.exists
    assert user.group == "ddtree"
    assert user.home == "/var/lib/ddtree"
    assert host.file("/var/lib/ddtree/.ssh/id_ed25519").mode == 0o600


def test_prefix(host):
    prefix = host.file("/opt/ddtree")
    assert prefix.is_directory
    assert prefix.group == "ddtree"
    assert prefix.mode == 0o775


def test_sshd_serves(host):
    assert host.service("ssh").is_running
    assert host.service("ssh").is_enabled
    assert host.socket("tcp://0.0.0.0:22").is_listening


def test_authorized_keys_lists_both_hosts(host):
    keys = host.file("/var/lib/ddtree/.ssh/authorized_keys").content_string
    comments = sorted(line.split()[-1] for line in keys.splitlines() if line.startswith("ssh-"))
    assert comments == ["ddtree@base-a", "ddtree@base-b"]


def test_known_hosts_has_name_and_address(host):
    known = host.file("/etc/ssh/ssh_known_hosts").content_string
    for name in PEERS:
        assert any(line.split()[0].split(",")[0] == name for line in known.splitlines()), name


def test_host_to_host_ssh(host):
    me = host.check_output("hostname")
    peer = PEERS[me]
    out = host.check_output(
        f"su - ddtree -c 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {peer} hostname'"
    )
    assert out == peer
