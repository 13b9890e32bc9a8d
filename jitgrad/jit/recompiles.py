"""Why a compiled function traced again: each trace gets a *kind* (counted in ``f.stats["trace_reasons"]``) and a
one-line explanation naming what changed, printed under ``JITGRAD_LOG=recompiles`` (as torch's
``TORCH_LOGS=recompiles``) and used by the recompile-limit warning.

Kinds: ``first call``; from the call's key, ``shape``, ``dtype``, ``requires_grad``, ``grad is None``,
``layout`` (strides, device), ``arguments`` (the structure or a static argument), ``aliasing`` (which arguments
are one tensor or share memory), ``modes`` (grad, anomaly, the default dtype), ``float argument`` (a float
argument changed and is a graph input from now on); from an entry's guards, ``captured tensor``, ``name
rebound``, ``python value``, ``dynamic float`` (a value read as a graph input is no longer a float) and
``library guard`` (jit/guards.guard: optimiser hyperparameters and state, train()/eval()); ``created state``
(the previous trace made state that outlives it, so it served one call).
"""
from __future__ import annotations

import os
import sys

from ..ir import dtypes as dt


def logging_recompiles() -> bool:
    """Whether ``JITGRAD_LOG`` (a comma-separated list, as ``TORCH_LOGS``) asks for ``recompiles``; read at each
    trace, never per call."""
    v = os.environ.get("JITGRAD_LOG", "")
    return "recompiles" in (p.strip().lstrip("+") for p in v.split(","))


def _dtype_name(d) -> str:
    t = dt._FROM_NP.get(d)
    return t.name if t is not None else str(d)


def key_change(old, new) -> tuple[str, str]:
    """(kind, explanation) for a call whose key ``new`` differs from the key ``old`` of the last trace
    (``CompiledFunction._key``: structure, per-tensor signature, aliasing, modes)."""
    if old is None:
        return "first call", "first call"
    if old[0] != new[0]:
        if type(old[0]) is tuple and type(new[0]) is tuple and len(old[0]) == 2 == len(new[0]) \
                and old[0][0] == new[0][0]:
            return "float argument", "a float argument changed (it is a graph input from now on)"
        return "arguments", "the arguments' structure or a static (non-tensor) argument changed"
    if old[1] != new[1]:
        if len(old[1]) != len(new[1]):
            return "arguments", "the number of tensor arguments changed"
        for i, (a, b) in enumerate(zip(old[1], new[1])):
            if a == b:
                continue
            if a[0] != b[0] and None in b[0]:
                dims = [d for d, n in enumerate(b[0]) if n is None]
                return "dynamic shape", (f"tensor argument {i} changed shape from {list(a[0])}: dims {dims} are "
                                         "symbolic from now on")
            if a[0] != b[0]:
                kind = "shape"
            elif a[1] != b[1]:
                kind = "dtype"
            elif a[2] != b[2]:
                kind = "requires_grad"
            elif a[3] != b[3]:
                kind = "grad is None"
            else:
                return "layout", f"tensor argument {i} changed device or strides"
            return kind, (f"tensor argument {i} changed from shape {list(a[0])} {_dtype_name(a[1])} "
                          f"requires_grad={a[2]} grad is None={a[3]} to shape {list(b[0])} {_dtype_name(b[1])} "
                          f"requires_grad={b[2]} grad is None={b[3]}")
    if old[2] != new[2]:
        return "aliasing", "which arguments are the same tensor (or share memory) changed"
    if old[3] != new[3]:
        return "modes", "grad mode, anomaly mode or the default dtype changed"
    return "captured tensor", "a captured tensor (closure parameter or its .grad) changed"


def miss_reason(cf, key, entries, leaves) -> tuple[str, str]:
    """(kind, explanation) of a call of the compiled function ``cf`` that no cached entry serves: the failed
    guard of the key's latest entry, else the difference from the nearest cached signature."""
    if entries:
        e = entries[-1]
        kind, why = e.failure()
        if kind == "unknown" and e.shape_env is not None:
            return "size guard", "a size guard failed: " + (e.shape_env.failed(
                {name: leaves[i]._data.shape[d] for name, i, d in e.sym_sources}) or "?")
        return kind, why
    if cf._last_one_shot and key == cf._last_key:
        return "created state", "the last trace created state that outlives it (it served one call)"
    return key_change(nearest_key([*cf._cache, cf._last_key], key), key)


def nearest_key(keys, new):
    """The key among ``keys`` (oldest first; None entries skipped) that shares the most parts with ``new``."""
    best, score = None, None
    for k in keys:
        if k is None:
            continue
        sc = (k[0] == new[0]) * 4 + (len(k[1]) == len(new[1])) * 2 \
            + sum(a == b for a, b in zip(k[1], new[1])) + (k[2] == new[2]) + (k[3] == new[3])
        if score is None or sc >= score:
            best, score = k, sc
    return best


def record(stats, fn, reason) -> None:
    """A trace starts for ``reason`` (kind, explanation): count it in ``stats`` and log it when asked."""
    kind, why = reason
    reasons = stats["trace_reasons"]
    reasons[kind] = reasons.get(kind, 0) + 1
    if logging_recompiles():
        log_recompile(fn, stats["traces"], kind, why)


def log_recompile(fn, n_trace: int, kind: str, text: str) -> None:
    """One line on stderr naming the function, which trace this is and why (``JITGRAD_LOG=recompiles``)."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "forward", None), "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    name = getattr(fn, "__name__", type(fn).__name__)
    print(f"jitgrad recompiles: '{name}'{where} trace {n_trace} [{kind}]: {text}", file=sys.stderr, flush=True)


__all__ = ["key_change", "miss_reason", "log_recompile", "logging_recompiles", "nearest_key", "record"]
