"""What ``jg.compile`` refuses because it runs after the call: generator, async generator and coroutine
functions, and a step that returns a generator.  One trace records what a call does while it runs; a generator's
body runs lazily, when someone iterates it, so a replayed trace would yield the first call's values, or nothing.
"""
from __future__ import annotations

import inspect
import types

_LAZY_RESULTS = (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)


def refuse_lazy(fn):
    """Generator (and async) functions run their body lazily, after the call returns, so one trace cannot
    capture it (a replay would yield the first trace's values, or nothing): refused with an error naming them."""
    kind = ("generator" if inspect.isgeneratorfunction(fn) else "async generator" if inspect.isasyncgenfunction(fn)
            else "coroutine" if inspect.iscoroutinefunction(fn) else None)
    if kind is not None:
        name = getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None), "__qualname__", repr(fn))
        raise TypeError(f"jitgrad.compile: {name} is {'an' if kind[0] == 'a' else 'a'} {kind} function, which "
                        "jitgrad cannot compile: its body runs lazily, after the call returns, so one trace cannot "
                        "capture it.  Compile the step the generator calls instead, or return a list")


def refuse_lazy_result(fn, out):
    """A step that returned a generator (its body would run after the trace): refused, naming the function."""
    if isinstance(out, _LAZY_RESULTS):
        raise TypeError(f"jitgrad.compile: {getattr(fn, '__qualname__', 'the function')} returned a "
                        f"{type(out).__name__}; a compiled function must return its results (tensors, or containers "
                        "of them), not a lazy iterator whose body runs after the call: return a list")


__all__ = ["refuse_lazy", "refuse_lazy_result"]
