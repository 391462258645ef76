import os

import pytest

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


# --- names from outside: safe_relpath / inside; tools: require_tools ---

@pytest.mark.parametrize("name", ["config.json", "sub/dir/model.safetensors", "a..b/c", ".hidden", "x-y_z.1"])
def test_safe_names_pass(name):
    assert fs.safe_relpath(name) == name


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "C:/x", "c:x", "a\\b", "a/./b", "a//b", "a/", "",
                                  "..", ".", "nul\x00", "line\nbreak", "tab\tname", "del\x7f", None, 3])
def test_unsafe_names_are_refused_naming_them(name):
    with pytest.raises(fs.UnsafePath) as e:
        fs.safe_relpath(name, "the file name")
    assert "the file name" in str(e.value)


def test_inside_follows_links(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    assert fs.inside(str(root), "sub/f") == str(root / "sub" / "f")
    (root / "esc").symlink_to(out)
    with pytest.raises(fs.UnsafePath, match="leads out of"):
        fs.inside(str(root), "esc/f")
    (root / "dangling").symlink_to(out / "nothing-yet")
    with pytest.raises(fs.UnsafePath, match="leads out of"):
        fs.inside(str(root), "dangling")
    (root / "fine").symlink_to(root / "sub")
    assert fs.inside(str(root), "fine/x")
    assert fs.inside(str(tmp_path / "not-yet"), "a/b")  # nothing on disk to follow


def test_require_tools_names_the_tool_and_its_source():
    class M:
        def get_bin_path(self, name):
            return "/usr/bin/zstd" if name == "zstd" else None

        def fail_json(self, msg):
            raise RuntimeError(msg)
    assert fs.require_tools(M(), "zstd") == {"zstd": "/usr/bin/zstd"}
    with pytest.raises(RuntimeError) as e:
        fs.require_tools(M(), "zstd", "aria2c")
    assert "aria2c is not installed" in str(e.value) and "aria2" in str(e.value) and "model_fetch" in str(e.value)
