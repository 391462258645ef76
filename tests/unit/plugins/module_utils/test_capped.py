"""The capped runner (plugins/module_utils/capped.py): stdout to a byte limit, a deadline, stderr's end kept."""
import time

from ansible_collections.ddtree.fleet.plugins.module_utils import capped


def test_output_within_the_limit_is_kept_whole():
    r = capped.run(["sh", "-c", "printf abc; echo oops >&2"], 3, 30)
    assert (r["rc"], r["out"], r["over"], r["timed_out"], r["err"]) == (0, b"abc", False, False, "oops\n")


def test_past_the_limit_the_process_is_killed_and_the_prefix_kept():
    r = capped.run(["yes", "x"], 1 << 16, 30)
    assert r["over"] and len(r["out"]) == 1 << 16 and r["out"].startswith(b"x\nx\n") and r["rc"] < 0


def test_a_hang_is_killed_at_the_deadline():
    start = time.monotonic()
    r = capped.run(["sleep", "30"], 100, 1)
    assert r["timed_out"] and not r["over"] and r["rc"] < 0 and time.monotonic() - start < 10


def test_stderr_keeps_its_end():
    r = capped.run(["sh", "-c", "head -c 300000 /dev/zero | tr '\\\\0' a >&2; echo END >&2"], 10, 30)
    assert r["err"].endswith("END\n") and len(r["err"]) <= capped.ERR_KEEP
