# Stand-in for https://ci-files.testing.ansible.com/ansible-test/get-pip-<version>.py, which
# ansible-test downloads to bootstrap pip in its sanity venvs; that host is not reachable here.
# ansible-test documents saving the script into its cache by hand; this file is placed there by
# scripts/test. It does what get-pip does: install pip (from the interpreter's bundled ensurepip),
# then run `pip install` with the arguments ansible-test passed (e.g. pip==24.2).
import ensurepip
import importlib
import runpy
import sys

ensurepip.bootstrap()
importlib.invalidate_caches()
sys.argv = ["pip", "install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
