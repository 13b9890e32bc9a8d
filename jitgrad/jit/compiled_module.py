"""``jg.compile(module)``: a Module whose forward is compiled, with torch's ``OptimizedModule`` behaviour.

torch.compile(model) returns an ``OptimizedModule``: a Module holding the original as its child ``_orig_mod``
(so ``state_dict`` keys read ``_orig_mod.layer.weight``, as a checkpoint saved from a compiled model in torch
has them), whose ``training`` flag *is* the original's (``model.eval()`` on either is seen by both), and which
passes every other attribute and method through to the original, live (``compiled.config``,
``compiled.generate(...)``).  Calling it runs the original module's ``__call__`` (hooks included) under one
``CompiledFunction``; the Module call inside the trace guards ``training``, so ``eval()`` / ``train()`` retrace
instead of replaying a graph traced in the other mode.

This module imports ``nn`` (a Module subclass must); ``jit/compile.py`` imports it only when ``compile`` is given
a Module, so the eager layers never import it.
"""
from __future__ import annotations

from ..nn.modules.module import Module


class OptimizedModule(Module):
    """The Module ``jg.compile(module)`` returns (torch's ``torch._dynamo.eval_frame.OptimizedModule``).

    >>> import jitgrad as jg
    >>> lin = jg.nn.Linear(2, 1)
    >>> m = jg.compile(lin, backend="interpret")
    >>> m._orig_mod is lin, m.in_features, list(m.state_dict())
    (True, 2, ['_orig_mod.weight', '_orig_mod.bias'])
    >>> _ = lin.eval(); m.training
    False
    """

    def __init__(self, mod: Module, compiled_call):
        super().__init__()
        self._orig_mod = mod     # a child module: state_dict keys get the "_orig_mod." prefix, as in torch
        object.__setattr__(self, "_compiled_call", compiled_call)

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        # the original's __call__ runs inside the compiled function (its hooks and its training guard); hooks
        # registered on the wrapper itself run around it, as Module.__call__ runs them
        return Module.__call__(self, *args, **kwargs)

    @property
    def training(self) -> bool:
        """The original module's flag (one flag, not a copy that goes stale)."""
        mod = self.__dict__.get("_modules", {}).get("_orig_mod")
        return True if mod is None else mod.training

    @training.setter
    def training(self, value: bool):
        mod = self.__dict__.get("_modules", {}).get("_orig_mod")
        if mod is not None:
            mod.training = value

    def __getattr__(self, name):
        if name == "_orig_mod":
            return self.__dict__["_modules"]["_orig_mod"]
        return getattr(self.__dict__["_modules"]["_orig_mod"], name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._orig_mod)))

    # the compiled function's introspection (f.ir, f.stats, f.wait) through the wrapper
    @property
    def stats(self):
        return self._compiled_call.stats

    def wait(self, timeout=None) -> bool:
        """Block until the compiled forward's builds are done (``CompiledFunction.wait``)."""
        return self._compiled_call.wait(timeout)


def compile_module(mod: Module, compiled_function_factory) -> OptimizedModule:
    """Wrap ``mod``: ``compiled_function_factory(fn)`` compiles a plain function calling ``mod``."""
    def forward(*args, **kwargs):
        return mod(*args, **kwargs)
    forward.__name__ = forward.__qualname__ = type(mod).__name__
    return OptimizedModule(mod, compiled_function_factory(forward))


def is_module(obj) -> bool:
    return isinstance(obj, Module)


__all__ = ["OptimizedModule", "compile_module", "is_module"]
