"""Verify sglang_patch on a host: the shipped 0.5.23 series changed exactly the files it lists,
compiled them and left a stamp; revert, drift and a version mismatch are driven through
ansible-playbook and checked on the host."""
import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from verify import PROJECT, playbook  # noqa: E402

testinfra_hosts = ["ansible://sp-1"]
VENV = "/opt/ddtree/venvs/sglang-0.5.23-test"
SITE = VENV + "/lib/python3.11/site-packages"
SERIES = PROJECT / "roles" / "sglang_patch" / "files" / "series" / "0.5.23"
DOC = yaml.safe_load((SERIES / "series.yml").read_text())
FILES = {f["path"]: f for p in DOC["patches"] for f in p["files"]}
CONVERGE = "molecule/sglang_patch/converge.yml"


def hashes(host):
    return {q: host.file("%s/%s" % (SITE, q)).sha256sum for q in FILES}


@pytest.fixture
def patched(host):
    """Each test starts from the converged state and leaves it so."""
    assert hashes(host) == {q: f["after"] for q, f in FILES.items()}
    yield
    r = playbook(CONVERGE)
    assert r.returncode == 0, r.text
    assert hashes(host) == {q: f["after"] for q, f in FILES.items()}


def test_files_are_patched_compiled_and_stamped(host):
    assert hashes(host) == {q: f["after"] for q, f in FILES.items()}
    stamp = json.loads(host.file(VENV + "/.ddtree/sglang-patch.json").content_string)
    assert stamp["series"] == DOC["name"]
    assert stamp["patches"] == [p["name"] for p in DOC["patches"]]
    for q, f in FILES.items():
        assert stamp["files"][q] == {"before": f["before"], "after": f["after"]}
        assert host.file("%s/.ddtree/sglang-patch-orig/%s" % (VENV, q)).sha256sum == f["before"]
        # byte-compiled by the venv's python, from the patched source
        pyc = "%s/%s/__pycache__/%s.cpython-311.pyc" % (SITE, str(Path(q).parent), Path(q).stem)
        assert host.file(pyc).exists
        assert host.file(pyc).mtime >= host.file("%s/%s" % (SITE, q)).mtime
    # the patched code is there and the venv's python accepts it
    src = host.file(SITE + "/sglang/srt/entrypoints/http_server.py").content_string
    assert "def _vlm_warmup_skipped(" in src and "SGLANG_SKIP_VLM_WARMUP" in src
    host.run_test("%s/bin/python -m py_compile %s" % (VENV, " ".join("%s/%s" % (SITE, q) for q in FILES)))


def test_revert_restores_the_release_exactly(host, patched):
    dry = playbook(CONVERGE, "--check", "--diff", "-e", "sglang_patch_state=absent")
    assert dry.returncode == 0 and "changed=1" in dry.text, dry.text
    assert hashes(host) == {q: f["after"] for q, f in FILES.items()}  # check mode: nothing written
    r = playbook(CONVERGE, "-e", "sglang_patch_state=absent")
    assert r.returncode == 0, r.text
    assert hashes(host) == {q: f["before"] for q, f in FILES.items()}
    assert not host.file(VENV + "/.ddtree/sglang-patch.json").exists
    assert not host.file(VENV + "/.ddtree/sglang-patch-orig").exists
    again = playbook(CONVERGE, "-e", "sglang_patch_state=absent")
    assert again.returncode == 0 and "changed=0" in again.text, again.text


def test_drift_fails_naming_the_file_and_touches_nothing(host, patched):
    drifted = DOC["patches"][0]["files"][0]["path"]
    path = "%s/%s" % (SITE, drifted)
    saved = host.file(path).content_string
    host.run_test("echo '# hand edit' >> %s" % path)
    edited = host.file(path).sha256sum
    try:
        before = hashes(host)
        r = playbook(CONVERGE)
        assert r.returncode != 0
        assert drifted in r.text and edited in r.text and "nothing was changed" in r.text, r.text
        assert hashes(host) == before
        assert json.loads(host.file(VENV + "/.ddtree/sglang-patch.json").content_string)["files"][drifted]["after"] == FILES[drifted]["after"]
    finally:
        host.run_test("python3 -c 'import sys; open(sys.argv[1], \"w\").write(sys.stdin.read())' %s <<'EOF'\n%sEOF" % (path, saved))


def test_series_for_another_version_is_refused(host, patched, tmp_path):
    other = dict(DOC, sglang_version="0.5.22")
    (tmp_path / "series.yml").write_text(yaml.safe_dump(other))
    for p in DOC["patches"]:
        (tmp_path / p["file"]).write_text((SERIES / p["file"]).read_text())
    r = playbook(CONVERGE, "-e", "sglang_patch_series_dir=%s" % tmp_path)
    assert r.returncode != 0
    assert "has sglang 0.5.23" in r.text and "is for sglang 0.5.22" in r.text, r.text
    assert hashes(host) == {q: f["after"] for q, f in FILES.items()}


def test_missing_series_is_refused_before_anything(host, patched, tmp_path):
    r = playbook(CONVERGE, "-e", "sglang_patch_series_dir=%s/nothing" % tmp_path)
    assert r.returncode != 0
    assert "sp-1: no series.yml in %s/nothing" % tmp_path in r.text and "ships series for: 0.5.23" in r.text, r.text
