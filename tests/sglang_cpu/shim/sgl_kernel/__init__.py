"""TEST DOUBLE (tests/sglang_cpu): an import shim for sgl_kernel, SGLang's CUDA kernel package.

PyPI's sglang-kernel holds GPU builds only (it fails to load without libcuda.so.1), yet a few sglang
modules import names from it at module level. This shim lets those imports succeed on a CPU test
host: every name (and every sgl_kernel.* submodule) exists, and calling one raises, naming it, so a
test that reaches a GPU kernel fails loudly instead of computing something else. Installed only into
the CPU test venv by scripts/lib/common.sh; production venvs never get it.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+ddtree.test.shim"


class _Missing:
    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError("%s was called, but sgl_kernel here is the ddtree.fleet test shim (tests/sglang_cpu): "
                           "no GPU kernels on this host" % self.__name__)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing("%s.%s" % (self.__name__, name))


def _module_getattr(modname):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing("%s.%s" % (modname, name))
    return __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any sgl_kernel.<sub> import gets a module of missing names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        return None


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())
__getattr__ = _module_getattr(__name__)
