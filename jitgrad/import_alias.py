"""Submodules of jitgrad imported under another name: a script that runs on jitgrad by aliasing it
(``sys.modules["torch"] = jitgrad``, ``sys.modules["torch.nn"] = jitgrad.nn``) and then imports a submodule the
alias table does not list (``from torch.nn.utils.rnn import pad_sequence``) would make Python load that file a
second time as a new module, ``torch.nn.utils.rnn``, whose relative imports load ``torch.ir.dtypes`` again: a second
``DType`` class, so ``jitgrad.float32`` from one copy is "not a dtype" to the other ("Cannot interpret
'jitgrad.float32' as a data type").

``AliasFinder`` (first on ``sys.meta_path`` once jitgrad is imported) answers an import of ``<alias>.<name>``,
where ``sys.modules[<alias>]`` is a jitgrad module registered under another name, with the jitgrad module
``<its real name>.<name>`` itself: one copy of every module, whatever name it is imported by.

>>> import sys, jitgrad
>>> sys.modules["torch_alias_demo"] = jitgrad
>>> import torch_alias_demo.nn.utils.rnn as r
>>> r is sys.modules["jitgrad.nn.utils.rnn"], r.__spec__.name
(True, 'jitgrad.nn.utils.rnn')
>>> del sys.modules["torch_alias_demo"], sys.modules["torch_alias_demo.nn"], sys.modules["torch_alias_demo.nn.utils"]
>>> del sys.modules["torch_alias_demo.nn.utils.rnn"]
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys


class _ExistingModule(importlib.abc.Loader):
    """Loads a spec by handing back an already imported module (the import system keeps its attributes)."""

    def __init__(self, module):
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        module.__spec__ = self.spec     # the import system set the alias's spec; the module keeps its own


class AliasFinder(importlib.abc.MetaPathFinder):
    """See the module docstring."""

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if not parent:
            return None
        m = sys.modules.get(parent)
        real = getattr(m, "__name__", None)
        if real is None or real == parent or not isinstance(real, str) or \
                not (real == "jitgrad" or real.startswith("jitgrad.")):
            return None
        module = importlib.import_module(f"{real}.{name}")
        return importlib.util.spec_from_loader(fullname, _ExistingModule(module))


def install() -> None:
    """Put one ``AliasFinder`` first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
