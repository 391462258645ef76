"""Verify the common role's conventions on a real systemd host: set once in group_vars/all, they are
what the base role created (user, group, home, prefix, ssh key), and a bad value is refused at entry."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import playbook  # noqa: E402

testinfra_hosts = ["ansible://all"]


def test_the_service_user_is_the_fleets(host):
    user = host.user("fleetsvc")
    assert user.exists and user.group == "fleetsvc" and user.home == "/var/lib/fleetsvc"
    assert host.file("/var/lib/fleetsvc/.ssh/id_ed25519").user == "fleetsvc"
    assert not host.user("ddtree").exists


def test_the_prefix_is_the_fleets(host):
    prefix = host.file("/srv/fleet")
    assert prefix.is_directory and prefix.user == "root" and prefix.group == "fleetsvc" and prefix.mode == 0o755
    assert not host.file("/opt/ddtree").exists


def test_a_bad_convention_is_refused_before_anything_changes(host):
    # a list where a name belongs passes the type check (Ansible turns it into its text): the
    # conventions check refuses it, naming the host and the value, before the base role runs
    r = playbook("molecule/common/converge.yml", "-e", '{"common_user": ["not", "a", "name"], "common_prefix": "/srv/other"}')
    assert r.returncode != 0
    assert "common-a: a fleet convention" in r.text and "common_user [\"not\", \"a\", \"name\"]" in r.text, r.text[-2000:]
    assert not host.file("/srv/other").exists
    assert not host.user("not").exists
