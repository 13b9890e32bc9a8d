"""Where each public name says what it is published as: ``@published("jitgrad", "Tensor")`` beside its definition.

This module only *records*; ``jitgrad/publisher.py`` reads the record once, at the end of ``import jitgrad``, and
builds the ``jitgrad`` namespace and ``Tensor``'s methods from it.  It imports nothing of jitgrad, so every layer
(the engine included) can declare.

Targets:

- ``"jitgrad"``: a function or value of the ``jitgrad`` namespace (``jg.logcumsumexp``, ``jg.channels_last``);
- ``"Tensor"``: a ``Tensor`` method, bound as the function object itself (``x.logcumsumexp``, ``x.add_``,
  ``x.__and__``);
- ``"Tensor.property"``: a read-only ``Tensor`` property whose getter is the declared function (``x.T``);
- ``"Tensor.methods"``: a class whose methods and properties are ``Tensor``'s, each under its own name (the
  engine's operators, in-place ops and protocols: ``x + y``, ``x.add_``, ``x.numpy()``);
- ``"Tensor.missing"``: a class ``C`` with ``C.names``: each of those names that nothing else publishes on
  ``Tensor`` becomes the class attribute ``C(name)`` (``library/torch_surface.py``: torch's names jitgrad lacks
  raise ``UnsupportedError``);
- ``"OpDef.eager_kernel"``: the eager-kernel chooser of the primitive named ``name`` (``OpDef.eager_kernel``: a
  native kernel eager dispatch runs over large arrays), declared by the jit layer (``jit/eager_kernels.py``), which
  the engine never imports.

``name=`` publishes under another name than the object's ``__name__`` (aliases, in-place forms made in a loop);
``inplace=make`` also publishes ``make(obj)``, the in-place form (made once, here), as the Tensor method ``<name>_``,
and, when ``obj`` is a ``jitgrad`` name, as ``jitgrad.<name>_`` too where torch's namespace has that name
(``torch.exp_`` exists, ``torch.sign_`` does not): the target ``"jitgrad.if_torch"``.

>>> from jitgrad.declarations import published
>>> @published("jitgrad", "Tensor")
... def twice(input):
...     '''``2 * input``.'''
...     return input * 2
>>> DECLARED[-1].name, DECLARED[-1].targets
('twice', ('jitgrad', 'Tensor'))
>>> del DECLARED[-1]
"""
from __future__ import annotations

import sys

TARGETS = ("jitgrad", "Tensor", "Tensor.property", "Tensor.methods", "Tensor.missing", "jitgrad.if_torch",
           "OpDef.eager_kernel")


class Declaration:
    """One published name: the object, the name, where it is published and where it was declared."""

    __slots__ = ("obj", "name", "targets", "module", "line")

    def __init__(self, obj, name, targets, module, line):
        self.obj, self.name, self.targets, self.module, self.line = obj, name, targets, module, line

    def __repr__(self):
        return f"<{self.name} as {', '.join(self.targets)}: {self.module}:{self.line}>"


DECLARED: list = []     # every declaration, in import order


def published(*targets, name=None, inplace=None):
    """Declare the decorated (or passed) object public under ``targets`` (and its in-place form ``inplace(obj)`` as
    the Tensor method ``<name>_``); returns the object unchanged."""
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown publishing target {t!r} (one of {TARGETS})")
    frame = sys._getframe(1)
    module, line = frame.f_globals.get("__name__", "?"), frame.f_lineno

    def declare(obj):
        n = name or obj.__name__
        DECLARED.append(Declaration(obj, n, targets, module, line))
        if inplace is not None:
            where = ("Tensor", "jitgrad.if_torch") if "jitgrad" in targets else ("Tensor",)
            DECLARED.append(Declaration(inplace(obj), n + "_", where, module, line))
        return obj
    return declare


__all__ = ["published", "Declaration", "DECLARED", "TARGETS"]
