import os

from ansible_collections.ddtree.fleet.plugins.module_utils import fs


def test_nearest_existing_parent(tmp_path):
    assert fs.nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)
    assert fs.nearest_existing(str(tmp_path)) == str(tmp_path)
    assert fs.nearest_existing("/nonexistent-ddtree/x") == "/"


def test_statvfs_matches(tmp_path):
    st = os.statvfs(tmp_path)
    assert st.f_bavail * st.f_frsize > 0


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")
    fs.atomic_write(str(target), "new", mode=0o600)
    assert target.read_text() == "new"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left
