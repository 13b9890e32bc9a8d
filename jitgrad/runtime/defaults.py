"""Process-wide defaults with torch's names: ``set_default_dtype``/``get_default_dtype`` (the deprecated
``set_default_tensor_type`` is library/creation/legacy_types.py's), ``set_num_threads``/``get_num_threads``, ``set_num_interop_threads``/
``get_num_interop_threads``, ``set_float32_matmul_precision``/``get_float32_matmul_precision``,
``use_deterministic_algorithms``/``are_deterministic_algorithms_enabled``.

The default dtype (float32 or float64) is the dtype of Python floats: ``tensor(1.5)``, float factories (``zeros``,
``rand``, ``arange(0., 1.)``, ``linspace``, ``eye``, ...; ``*_like`` keep their input's dtype), an integer tensor
meeting a Python float (``int_tensor * 1.5``), true division of integers, integer inputs of float functions
(``sqrt``), nn modules' parameters and optimiser step counters.  Inside ``@jg.compile`` values made while tracing
follow the default at trace time, and the default dtype is part of a compiled function's key: changing it
retraces (torch.compile guards it the same way).

The thread and precision settings live in ``ir/settings.py`` (codegen reads them too); see there what they control.

>>> import jitgrad as jg
>>> jg.set_default_dtype(jg.float64)
>>> jg.tensor([1.5]).dtype, (jg.tensor([1]) * 0.5).dtype
(jitgrad.float64, jitgrad.float64)
>>> jg.set_default_dtype(jg.float32)
"""
from __future__ import annotations

import warnings

from ..declarations import published
from ..ir import dtypes as dt
from ..ir import settings
from ..ir.ops import Aval

_ONLY_FLOAT = "only floating-point types are supported as the default type"


def _check_default(d) -> dt.DType:
    if not isinstance(d, dt.DType):
        raise TypeError(f"invalid dtype object: {_ONLY_FLOAT}")
    if not d.is_floating_point:
        raise TypeError(_ONLY_FLOAT)
    if d not in (dt.float32, dt.float64):
        raise dt.UnsupportedError(f"jitgrad does not support {d.name} as the default dtype (it computes in float32 "
                                  "and float64)")
    return d


def _apply(d: dt.DType) -> None:
    from . import dispatch
    if d is dt.DEFAULT_FLOAT:
        return
    dt.set_default_float(d)
    dispatch._WEAK[float] = Aval((), d, True)     # a Python float's literal type inside traces
    dispatch._RULES.clear()                       # cached eager rules promoted ints with floats to the old default


@published("jitgrad")
def set_default_dtype(d, /) -> None:
    """Make ``d`` (``float32`` or ``float64``) the default floating-point dtype (see the module docstring)."""
    _apply(_check_default(d))


@published("jitgrad")
def get_default_dtype() -> dt.DType:
    """The default floating-point dtype (``float32`` unless :func:`set_default_dtype` changed it)."""
    return dt.DEFAULT_FLOAT


def _positive_int(name, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise RuntimeError(f"{name} expects an int, but got {type(n).__name__}")
    if n <= 0:
        raise RuntimeError(f"{name} expects a positive integer")
    return n


@published("jitgrad")
def set_num_threads(int, /) -> None:     # noqa: A002  (torch's parameter name)
    """Set the intra-op thread count: OpenBLAS's threads now (eager and compiled matmuls), and the threads of the
    worker pool's rounds from the next launch on (1: graphs compiled afterwards serial, those compiled before off
    the pool).  The pool keeps its size; the workers left out sleep (``ir/settings.py`` has the details)."""
    n = _positive_int("set_num_threads", int)
    settings.STATE.num_threads = n
    from ..ir.ops import blas
    blas.set_threads(n)


@published("jitgrad")
def get_num_threads() -> int:
    """The intra-op thread count: the last :func:`set_num_threads`, else one per core this process may run on
    (``NUMBA_NUM_THREADS`` when set)."""
    return settings.num_threads()


@published("jitgrad")
def set_num_interop_threads(int, /) -> None:     # noqa: A002
    """Record the inter-op thread count (jitgrad has no inter-op pool; :func:`get_num_interop_threads` reports it).
    Like torch, it can be set once per process."""
    n = _positive_int("set_num_interop_threads", int)
    if settings.STATE.interop_set:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started or "
                           "set_num_interop_threads called")
    settings.STATE.interop_set = True
    settings.STATE.num_interop_threads = n


@published("jitgrad")
def get_num_interop_threads() -> int:
    """The inter-op thread count: the value set, else one per core (torch's default)."""
    n = settings.STATE.num_interop_threads
    return n if n is not None else settings.default_threads()


_PRECISIONS = ("highest", "high", "medium")


@published("jitgrad")
def set_float32_matmul_precision(precision: str) -> None:
    """Record torch's float32 matmul precision (``'highest'``, ``'high'``, ``'medium'``).  It has no effect on
    results: jitgrad's float32 matmuls run on the CPU in float32 (as torch's CPU matmuls do).  Another value warns
    and changes nothing, as torch."""
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current"
                      "setFloat32MatmulPrecision call has no effect.", UserWarning, stacklevel=2)
        return
    settings.STATE.matmul_precision = precision


@published("jitgrad")
def get_float32_matmul_precision() -> str:
    """The value of the last :func:`set_float32_matmul_precision` (``'highest'`` by default)."""
    return settings.STATE.matmul_precision


@published("jitgrad")
def use_deterministic_algorithms(mode, *, warn_only=False) -> None:
    """Ask for results that are the same bits run to run (torch's flag).  jitgrad's kernels are deterministic for a
    given thread count already (parallel loops split work in fixed chunks, scatter-adds accumulate in order); what
    varies by default is *when* a call switches to code that finished building in the background, and eager,
    interpreted and compiled code round reductions differently.  With ``mode=True`` a compiled function builds its
    code before its first call (``background=False``) and eager ops build their native kernels at their first call,
    so two runs of a script give identical results (``ir/settings.py``).  The first call of each new graph then
    waits for its build.

    Example::

        >>> import jitgrad as jg
        >>> jg.use_deterministic_algorithms(True)
        >>> jg.are_deterministic_algorithms_enabled()
        True
        >>> jg.use_deterministic_algorithms(False)
    """
    if not isinstance(mode, bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'mode' (position 1) must be bool, not "
                        f"{type(mode).__name__}")
    settings.STATE.deterministic, settings.STATE.deterministic_warn_only = mode, bool(warn_only)


@published("jitgrad")
def are_deterministic_algorithms_enabled() -> bool:
    """The flag :func:`use_deterministic_algorithms` set (False by default)."""
    return settings.STATE.deterministic


@published("jitgrad")
def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """The ``warn_only`` flag :func:`use_deterministic_algorithms` set."""
    return settings.STATE.deterministic_warn_only
