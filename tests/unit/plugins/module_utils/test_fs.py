import os

from ansible_collections.ddtree.fleet.plugins.module_utils import fs


def test_nearest_existing_parent(tmp_path):
    assert fs.nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)
    assert fs.nearest_existing(str(tmp_path)) == str(tmp_path)
    assert fs.nearest_existing("/nonexistent-ddtree/x") == "/"


def test_statvfs_matches(tmp_path):
    st = os.statvfs(tmp_path)
    assert st.f_bavail * st.f_frsize > 0
