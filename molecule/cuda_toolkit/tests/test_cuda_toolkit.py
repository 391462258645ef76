"""Verify cuda_toolkit: a real CUDA 13.0 from NVIDIA's wheels compiles for sm_103 and sm_120 and
the JIT headers are usable; preinstalled mode, the refusals and the apt method's files are
driven through ansible-playbook."""
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import playbook  # noqa: E402

testinfra_hosts = ["ansible://cuda-b300", "ansible://cuda-rtx"]
HOME = "/opt/cuda-13.0"
CONVERGE = "molecule/cuda_toolkit/converge.yml"
ARCH = {"cuda-b300": "sm_103", "cuda-rtx": "sm_120"}


def name(host):
    return host.backend.get_hostname()


def test_toolkit_is_a_cuda_home(host):
    assert "release 13.0" in host.check_output(HOME + "/bin/nvcc --version")
    for path in ("include/cuda_runtime.h", "include/curand.h", "include/crt/host_config.h", "nvvm/bin/cicc", "bin/ptxas"):
        assert host.file("%s/%s" % (HOME, path)).exists, path
    assert host.file(HOME + "/lib64").is_symlink
    assert "nvidia-curand==10.4.0.35" in host.file(HOME + "/.ddtree-cuda.json").content_string


def test_compiles_for_this_hosts_gpus_and_not_only_ptx(host):
    arch = ARCH[name(host)]
    host.run_test("mkdir -p /tmp/k && printf '__global__ void k(int *x){x[0]=1;}\\n' > /tmp/k/k.cu")
    host.run_test("%s/bin/nvcc -arch=%s -cubin /tmp/k/k.cu -o /tmp/k/k.cubin" % (HOME, arch))
    assert host.file("/tmp/k/k.cubin").size > 0
    # an arch the toolkit does not know is refused, so the probe can fail
    assert host.run("%s/bin/nvcc -arch=sm_999 -c /tmp/k/k.cu -o /tmp/k/x.o" % HOME).rc != 0


def test_jit_headers_compile_with_the_system_compiler(host):
    host.run_test("printf '#include <Python.h>\\n#include <curand.h>\\nint f(void){return CURAND_RNG_PSEUDO_DEFAULT;}\\n' > /tmp/k/h.c")
    inc = host.check_output("python3 -c \"import sysconfig; print(sysconfig.get_paths()['include'])\"")
    host.run_test("gcc -c /tmp/k/h.c -o /tmp/k/h.o -I %s -I %s/include" % (inc, HOME))
    assert host.package("ninja-build").is_installed and host.package("python3-dev").is_installed


def test_environment_for_shells_and_ptxas(host):
    env = host.file("/etc/profile.d/ddtree-cuda.sh").content_string
    assert "export CUDA_HOME=/opt/cuda-13.0" in env
    assert ("TRITON_PTXAS_PATH=/opt/cuda-13.0/bin/ptxas" in env) == (name(host) == "cuda-b300")  # sm_103 only
    assert "release 13.0" in host.check_output("bash -lc 'nvcc --version'")
    # plays that do not run the role (rollout, bench) read the same environment from the local fact
    fact = json.loads(host.file("/etc/ansible/facts.d/ddtree_cuda_toolkit.fact").content_string)
    assert fact["home"] == HOME and fact["env"]["CUDA_HOME"] == HOME and fact["version"] == "13.0"
    assert ("TRITON_PTXAS_PATH" in fact["env"]) == (name(host) == "cuda-b300")
    assert fact["archs_ok"] == [ARCH[name(host)]], fact


def test_probe_runs_once_per_toolkit_on_record(host):
    """A run with nothing new does not compile again; without a passing probe on record it does."""
    fact = "/etc/ansible/facts.d/ddtree_cuda_toolkit.fact"
    r = playbook(CONVERGE, limit=name(host))
    assert r.returncode == 0 and "changed=0" in r.text, r.text
    assert re.search(r"check the JIT headers\] \*+ skipping", r.text), r.text
    host.run_test("rm -f " + fact)
    r = playbook(CONVERGE, limit=name(host))
    assert r.returncode == 0 and re.search(r"check the JIT headers\] \*+ ok: \[%s\]" % name(host), r.text), r.text
    assert json.loads(host.file(fact).content_string)["archs_ok"] == [ARCH[name(host)]]


def test_preinstalled_verifies_that_prefix_without_changes(host):
    if name(host) != "cuda-b300":
        return
    r = playbook(CONVERGE, "-e", "cuda_toolkit_method=preinstalled", "-e", "cuda_toolkit_home=" + HOME)
    assert r.returncode == 0 and "changed=0" in r.text, r.text


def test_too_old_for_sm_103_is_refused_before_anything(host):
    if name(host) != "cuda-b300":
        return
    r = playbook(CONVERGE, "-e", "cuda_toolkit_version=12.8", limit="cuda-b300")
    assert r.returncode != 0
    assert "cuda-b300: cuda_toolkit_version 12.8 does not fit this host" in r.text
    assert "cannot compile for sm_103 (needs >= 12.9)" in r.text, r.text
    assert not host.file("/opt/cuda-12.8").exists
    # the RTX host (sm_120) accepts 12.8 as far as the archs go
    r = playbook(CONVERGE, "-e", "cuda_toolkit_version=12.7", limit="cuda-rtx")
    assert r.returncode != 0 and "cannot compile for sm_120 (needs >= 12.8)" in r.text, r.text


def test_unknown_version_for_pip_is_refused(host):
    if name(host) != "cuda-b300":
        return
    r = playbook(CONVERGE, "-e", "cuda_toolkit_version=13.1", limit="cuda-b300")
    assert r.returncode != 0 and "no CUDA component wheels are known for cuda_toolkit_version 13.1" in r.text, r.text


def test_apt_repository_unreachable_is_refused(host):
    if name(host) != "cuda-b300":
        return
    r = playbook(CONVERGE, "-e", "cuda_toolkit_method=apt", "-e", "cuda_toolkit_apt_repo_url=http://127.0.0.1:9/cuda",
                 limit="cuda-b300")
    assert r.returncode != 0 and "is unreachable" in r.text and "Nothing was changed" in r.text, r.text
    assert not host.file("/etc/apt/sources.list.d/cuda.sources").exists


def test_apt_method_renders_repository_and_keyring(host):
    """Against a local mirror of the repository layout (TEST DOUBLE key file) in check mode."""
    if name(host) != "cuda-b300":
        return
    host.run_test("mkdir -p /srv/cuda-mirror/debian12/x86_64 && echo 'TEST DOUBLE: not a key' > /srv/cuda-mirror/debian12/x86_64/3bf863cc.pub")
    host.run_test("(setsid python3 -m http.server 8088 --bind 127.0.0.1 --directory /srv/cuda-mirror >/dev/null 2>&1 &) ; sleep 1")
    r = playbook(CONVERGE, "--check", "--diff", "-e", "cuda_toolkit_method=apt", "-e",
                 "cuda_toolkit_apt_repo_url=http://127.0.0.1:8088", limit="cuda-b300")
    assert r.returncode == 0, r.text
    assert "URIs: http://127.0.0.1:8088/debian12/x86_64/" in r.text and "Suites: /" in r.text
    assert "Signed-By: /etc/apt/keyrings/cuda-archive-keyring.asc" in r.text
    assert "/etc/apt/keyrings/cuda-archive-keyring.asc" in r.text
    assert not host.file("/etc/apt/sources.list.d/cuda.sources").exists  # check mode
