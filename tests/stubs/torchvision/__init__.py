"""Test-only stand-in for ``torchvision`` (which has no CPU build beside torch 2.13 on PyPI).

SGLang 0.5.x's model-config package imports multimodal helpers that touch
``torchvision.transforms`` at import time; the KV pools, parser and disaggregation code
kvcheck drives never call it. Any ``torchvision.*`` submodule imports as an empty module
whose attributes are inert placeholders, so such imports succeed and any real use fails
loudly. Put on ``sys.path`` by ``tests/conftest.py`` only when no real torchvision exists.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kvcheck-test-stub"


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        raise RuntimeError(f"torchvision stub: {self._name} is not available in kvcheck's test environment")

    def __getattr__(self, item):
        return _Placeholder(f"{self._name}.{item}")

    def __mro_entries__(self, bases):
        return (object,)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder(f"torchvision.{name}")


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = lambda item, _n=spec.name: (_ for _ in ()).throw(AttributeError(item)) if item.startswith("__") else _Placeholder(f"{_n}.{item}")
        return mod

    def exec_module(self, module):
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


sys.meta_path.append(_StubFinder())
