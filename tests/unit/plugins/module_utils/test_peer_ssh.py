"""peer_ssh: inventory values reach ssh as data, never as an option or shell. The argv is run with the real ssh
binary and the remote command with a real shell: a value that would run something leaves a marker file."""
import os
import shlex
import subprocess
import sys

import pytest
import yaml

from ansible_collections.ddtree.fleet.plugins.doc_fragments.peer_ssh import ModuleDocFragment
from ansible_collections.ddtree.fleet.plugins.module_utils import peer_ssh

PARAMS = {"ssh_user": "ddtree", "ssh_identity": "/var/lib/ddtree/.ssh/id_ed25519", "ssh_options": []}


def params(**over):
    return dict(PARAMS, **over)


def test_argv_destination_after_double_dash_and_quoted_command():
    argv = peer_ssh.ssh_argv(params(ssh_options=["-o", "ServerAliveInterval=5", "-oPort=2222"]), "src-1.lab",
                             ["cat", "/var/cache/a b;touch x"], connect_timeout=7)
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7"]
    dd = argv.index("--")
    assert argv[dd + 1] == "src-1.lab" and len(argv) == dd + 3
    assert argv[dd - 4:dd] == ["-i", "/var/lib/ddtree/.ssh/id_ed25519", "-l", "ddtree"]
    assert ["-o", "ServerAliveInterval=5", "-o", "Port=2222"] == argv[5:9]
    assert shlex.split(argv[-1]) == ["cat", "/var/cache/a b;touch x"]


@pytest.mark.parametrize("host", ["b300-1", "b300-1.dc.example.com", "10.0.0.7", "fd00::17", "fe80::1%eth0", "H100_2"])
def test_good_hosts(host):
    assert peer_ssh.check_host(host) == host


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "-oProxyCommand=true", "-p", "", "a b", "a\nb",
                                  "user@host", "host:22", "[fd00::1]", "ssh://host", "host;id", "$(id)", "a..b", None, 7])
def test_bad_hosts_name_the_value(host):
    with pytest.raises(peer_ssh.BadValue) as e:
        peer_ssh.ssh_argv(params(), host, ["true"])
    assert "ssh_host %r" % (host,) in str(e.value) and "set it to" in str(e.value)


@pytest.mark.parametrize("over,param", [
    ({"ssh_user": "-oProxyCommand=touch /tmp/x"}, "ssh_user"),
    ({"ssh_user": "dd tree"}, "ssh_user"),
    ({"ssh_user": "root;id"}, "ssh_user"),
    ({"ssh_identity": "-oProxyCommand=x"}, "ssh_identity"),
    ({"ssh_identity": "relative/key"}, "ssh_identity"),
    ({"ssh_identity": "/key\nProxyCommand x"}, "ssh_identity"),
    ({"ssh_options": ["ProxyCommand=touch /tmp/x"]}, "ssh_options"),
    ({"ssh_options": ["-o", "ProxyCommand=touch /tmp/x"]}, "ssh_options"),
    ({"ssh_options": ["-oProxyCommand=touch"]}, "ssh_options"),
    ({"ssh_options": ["-o", "proxycommand=touch"]}, "ssh_options"),
    ({"ssh_options": ["-o", "LocalCommand=id", "-o", "PermitLocalCommand=yes"]}, "ssh_options"),
    ({"ssh_options": ["-o", "Match=exec id"]}, "ssh_options"),
    ({"ssh_options": ["-o", "KnownHostsCommand=/bin/id"]}, "ssh_options"),
    ({"ssh_options": ["-o", "ProxyJump=evil"]}, "ssh_options"),
    ({"ssh_options": ["-o", "ControlPath=/tmp/s"]}, "ssh_options"),
    ({"ssh_options": ["-o", "Port=22 -oProxyCommand=x"]}, "ssh_options"),
    ({"ssh_options": ["-o", "Port 22"]}, "ssh_options"),
    ({"ssh_options": ["-o"]}, "ssh_options"),
    ({"ssh_options": ["-F", "/tmp/cfg"]}, "ssh_options"),
    ({"ssh_options": ["-oPort='22'"]}, "ssh_options"),
])
def test_bad_values_are_refused_naming_parameter_and_value(over, param):
    with pytest.raises(peer_ssh.BadValue) as e:
        peer_ssh.ssh_argv(params(**over), "src", ["true"])
    msg = str(e.value)
    assert msg.startswith(param + " ") and ("set it to" in msg or "give each option" in msg), msg
    with pytest.raises(peer_ssh.BadValue):
        peer_ssh.check(params(**over), "src")


def test_allowed_options_and_case():
    assert peer_ssh.check_options(["-o", "connecttimeout=5", "-oStrictHostKeyChecking=accept-new",
                                   "-o", "UserKnownHostsFile=/etc/ssh/ssh_known_hosts",
                                   "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"]) == [
        "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile=/etc/ssh/ssh_known_hosts",
        "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"]


def test_bad_value_is_a_value_error_importable_from_peer_ssh():
    assert issubclass(peer_ssh.BadValue, ValueError)


def test_doc_fragment_lists_exactly_the_allowed_keys():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    text = " ".join(doc["ssh_options"]["description"])
    listed = text.split("Key must be one of ", 1)[1].split(";", 1)[0].replace(",", " ").split()
    assert listed == list(peer_ssh.SAFE_OPTIONS)
    assert set(doc) == set(peer_ssh.ARGUMENT_SPEC)
    for k, spec in peer_ssh.ARGUMENT_SPEC.items():
        assert doc[k]["type"] == spec["type"] and doc[k]["default"] == spec["default"]


def test_real_ssh_takes_a_dash_value_after_double_dash_as_the_host(tmp_path):
    """Where ssh_argv puts the destination, even a value that is an option elsewhere is only a host name to the
    real ssh: nothing runs (the old argv, host before '--', ran ProxyCommand)."""
    marker = tmp_path / "proxy-ran"
    argv = peer_ssh.ssh_argv(params(ssh_identity=str(tmp_path / "nokey")), "placeholder.invalid", ["true"], connect_timeout=2)
    at = argv.index("placeholder.invalid")
    argv[at] = "-oProxyCommand=touch %s" % marker
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode != 0 and not marker.exists(), p.stderr
    # the same value before '--', as the old argv had it, is an option: the marker shows the test can fail
    old = argv[:at - 1] + [argv[at], "placeholder.invalid", "--", "true"]
    subprocess.run(old, capture_output=True, text=True, timeout=60, check=False)
    assert marker.exists()


def test_remote_command_is_one_quoted_string_for_the_remote_shell(tmp_path):
    """ssh hands the remote side one string that the user's shell runs: a ';' in a path stays in the path."""
    odd = str(tmp_path / "a;touch marker;b $(touch marker) `touch marker` 'q\"")
    cmd = peer_ssh.ssh_argv(params(), "src", ["touch", odd])[-1]
    subprocess.run(["sh", "-c", cmd], cwd=str(tmp_path), check=True)
    assert os.path.exists(odd) and not (tmp_path / "marker").exists()


def test_venv_install_refuses_bad_inventory_values_before_running_anything(run_module, tmp_path):
    """The module for real: each hostile value ends refused, naming it, with nothing executed or changed."""
    prefix = tmp_path / "prefix"
    marker = tmp_path / "ran"
    hostile = "touch %s" % marker
    cases = [
        (dict(ssh_host="-oProxyCommand=" + hostile), "ssh_host '-oProxyCommand=touch"),
        (dict(ssh_host="src", ssh_user="-oProxyCommand=" + hostile), "ssh_user '-oProxyCommand=touch"),
        (dict(ssh_host="src", ssh_options=["ProxyCommand=" + hostile]), "ssh_options 'ProxyCommand=touch"),
        (dict(ssh_host="src", ssh_options=["-o", "ProxyCommand=" + hostile]), "ssh_options 'ProxyCommand=touch"),
        (dict(ssh_host="src", ssh_identity="-oProxyCommand=x"), "ssh_identity '-oProxyCommand=x'"),
    ]
    for args, named in cases:
        res = run_module("venv_install", prefix=str(prefix), artifact_id="0123456789abcdef", **args)
        assert res.get("failed") and named in res["msg"] and "nothing was changed" in res["msg"], res
        assert not marker.exists() and not prefix.exists()
    res = run_module("venv_install", prefix=str(prefix), artifact_id="../../etc/x", ssh_host="src")
    assert res.get("failed") and "'../../etc/x' is not an artifact id" in res["msg"]
    res = run_module("venv_install", prefix=str(prefix), artifact_id="0123456789abcdef", ssh_host="src",
                     import_check=["os; open(%r, 'w')" % str(marker)])
    assert res.get("failed") and "import_check item" in res["msg"] and not marker.exists()
    assert sys.executable  # the module ran under the controller's python (conftest)
