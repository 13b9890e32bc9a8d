"""``jitgrad.testing`` (torch.testing): :func:`assert_close`, :func:`make_tensor` and the deprecated
:func:`assert_allclose`, with torch's defaults, checks and message texts.

Default tolerances by dtype (the loosest of the two inputs): float32 ``rtol=1.3e-6, atol=1e-5``, float64 and
Python floats ``1e-7, 1e-7``, float16 ``1e-3, 1e-5``; integers and bools compare exactly.

>>> import jitgrad as jg
>>> jg.testing.assert_close(jg.tensor([1., 2.]), jg.tensor([1., 2.000001]))
>>> try:
...     jg.testing.assert_close(jg.tensor([1., 2.]), jg.tensor([1., 2.5]))
... except AssertionError as e:
...     print(e)
Tensor-likes are not close!
<BLANKLINE>
Mismatched elements: 1 / 2 (50.0%)
Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)
Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 allowed)
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ..ir import dtypes as dt
from ..runtime.tensor import Tensor

_PRECISIONS = {dt.float16: (1e-3, 1e-5), dt.float32: (1.3e-6, 1e-5), dt.float64: (1e-7, 1e-7)}


class _Mismatch(Exception):
    def __init__(self, cls, msg):
        super().__init__(msg)
        self.cls, self.msg = cls, msg


def _diff_msg(kind, diff, idx, tol, equality):
    msg = f"{kind.title()} difference: {diff}" if idx is None else f"Greatest {kind} difference: {diff} at index {idx}"
    return msg + ("" if equality else f" (up to {tol} allowed)") + "\n"


def _mismatch_msg(default_identifier, identifier, extra, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol):
    equality = rtol == 0 and atol == 0
    if identifier is None:
        identifier = default_identifier
    elif callable(identifier):
        identifier = identifier(default_identifier)
    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += f"{extra.strip()}\n"
    msg += _diff_msg("absolute", abs_diff, abs_idx, atol, equality)
    msg += _diff_msg("relative", rel_diff, rel_idx, rtol, equality)
    return msg.strip()


def _tolerances(dtypes, rtol, atol, table=None):
    if (rtol is None) ^ (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    if rtol is not None:
        return rtol, atol
    pairs = [(table or _PRECISIONS).get(d, (0.0, 0.0)) for d in dtypes]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _is_number(x):
    return isinstance(x, (bool, int, float, np.number, np.bool_))


def _compare_numbers(actual, expected, rtol, atol, equal_nan, msg):
    types = {type(actual), type(expected)}
    if rtol is None and atol is None:
        rtol, atol = (0.0, 0.0) if not any(issubclass(t, (float, np.floating)) for t in types) else (1e-7, 1e-7)
    else:
        rtol, atol = _tolerances((), rtol, atol)
    if actual == expected or (equal_nan and actual != actual and expected != expected):
        return
    if abs(actual - expected) <= atol + rtol * abs(expected):
        return
    raise _Mismatch(AssertionError, _scalar_msg(actual, expected, rtol, atol, msg))


def _scalar_msg(actual, expected, rtol, atol, identifier):
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg("Scalars", identifier, f"Expected {expected} but got {actual}.", abs_diff, None, atol,
                         rel_diff, None, rtol)


def _as_tensor(x):
    from ..library.creation.factories import from_numpy
    return from_numpy(x) if isinstance(x, np.ndarray) else x


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, check_stride, msg):
    import jitgrad as jg
    actual, expected = _as_tensor(actual), _as_tensor(expected)
    if (rtol is None) ^ (atol is None):      # checked before the attributes, as torch
        try:
            _tolerances((), rtol, atol)
        except ValueError as e:
            raise _Mismatch(ValueError, str(e)) from None

    def attr(name, a, b):
        raise _Mismatch(AssertionError, f"The values for attribute '{name}' do not match: {a} != {b}.")
    if actual.shape != expected.shape:
        attr("shape", actual.shape, expected.shape)
    if check_stride and actual.stride() != expected.stride():
        attr("stride()", actual.stride(), expected.stride())
    if actual.device != expected.device:
        attr("device", actual.device, expected.device)
    if check_dtype and actual.dtype is not expected.dtype:
        attr("dtype", actual.dtype, expected.dtype)
    try:
        rtol, atol = _tolerances((actual.dtype, expected.dtype), rtol, atol)
    except ValueError as e:
        raise _Mismatch(ValueError, str(e)) from None
    with jg.no_grad():
        actual, expected = actual.detach().cpu(), expected.detach().cpu()
        if actual.dtype is not expected.dtype:
            d = dt._promote2(actual.dtype, expected.dtype)
            actual, expected = actual.to(d), expected.to(d)
        matches = jg.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
        if bool(matches.all()):
            return
        if actual.ndim == 0:
            raise _Mismatch(AssertionError, _scalar_msg(actual.item(), expected.item(), rtol, atol, msg))
        raise _Mismatch(AssertionError, _tensor_msg(jg, actual, expected, matches, rtol, atol, msg))


def _tensor_msg(jg, actual, expected, matches, rtol, atol, identifier):
    n = matches.numel()
    bad = n - int(matches.sum())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    a, e, m = actual.flatten(), expected.flatten(), matches.flatten()
    if not a.dtype.is_floating_point:
        a, e = a.to(jg.int64), e.to(jg.int64)
    abs_diff = jg.abs(a - e)
    abs_diff[m] = 0
    max_abs, abs_i = jg.max(abs_diff, 0)
    rel_diff = abs_diff / jg.abs(e)
    rel_diff[m] = 0
    max_rel, rel_i = jg.max(rel_diff, 0)
    shape = tuple(matches.shape)

    def index(i):
        return tuple(int(k) for k in np.unravel_index(int(i), shape))
    return _mismatch_msg("Tensor-likes", identifier, extra, max_abs.item(), index(abs_i), atol, max_rel.item(),
                         index(rel_i), rtol)


def _compare(actual, expected, path, **kw):
    if isinstance(actual, (Tensor, np.ndarray)) and isinstance(expected, (Tensor, np.ndarray)):
        return _compare_tensors(actual, expected, **kw)
    if _is_number(actual) and _is_number(expected):
        return _compare_numbers(actual, expected, kw["rtol"], kw["atol"], kw["equal_nan"], kw["msg"])
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        if set(actual) != set(expected):
            raise _Mismatch(AssertionError, f"The keys of the mappings do not match:\n\nMissing keys in the actual "
                            f"mapping: {sorted(set(expected) - set(actual))}\nAdditional keys in the actual mapping: "
                            f"{sorted(set(actual) - set(expected))}\n")
        for k in actual:
            _nested(actual[k], expected[k], path + [k], kw)
        return
    if isinstance(actual, Sequence) and not isinstance(actual, str) and isinstance(expected, Sequence) \
            and not isinstance(expected, str):
        if len(actual) != len(expected):
            raise _Mismatch(AssertionError, f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _nested(a, e, path + [i], kw)
        return
    raise _Mismatch(TypeError, f"No comparison pair was able to handle inputs of type {type(actual)} and "
                    f"{type(expected)}.")


def _nested(a, e, path, kw):
    try:
        _compare(a, e, path, **kw)
    except _Mismatch as m:
        if m.cls in (AssertionError, ValueError) and not getattr(m, "located", False) and path:
            m.msg += "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
            m.located = True
        raise


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close: tensors (or NumPy arrays) elementwise
    ``|actual - expected| <= atol + rtol * |expected|`` after equal shape, device and (``check_dtype``) dtype;
    Python numbers likewise; sequences and mappings item by item.  ``rtol``/``atol`` default by dtype (module
    docstring; both or neither); ``equal_nan`` treats NaNs as equal; ``msg`` replaces the message (a callable
    gets torch's message and returns the new one).  The messages are torch's."""
    kw = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype, check_stride=check_stride,
              msg=None)
    try:
        _nested(actual, expected, [], kw)
    except _Mismatch as m:
        text = m.msg
        if m.cls is AssertionError and msg is not None:
            text = msg(text) if callable(msg) else msg
        raise m.cls(text) from None


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """Deprecated (torch 1.12): :func:`assert_close` with looser default tolerances (float32 ``1e-4, 1e-5``, float64
    ``1e-5, 1e-8``), no dtype check, and non-tensors converted with ``tensor``."""
    from ..library.creation.factories import tensor
    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be removed in a future "
                  "release. Please use `torch.testing.assert_close()` instead. You can find detailed upgrade "
                  "instructions in https://github.com/pytorch/pytorch/issues/61844.", FutureWarning, stacklevel=2)
    if not isinstance(actual, Tensor):
        actual = tensor(actual)
    if not isinstance(expected, Tensor):
        expected = tensor(expected, dtype=actual.dtype)
    if rtol is None and atol is None:
        rtol, atol = _tolerances((actual.dtype, expected.dtype), None, None,
                                 {dt.float16: (1e-3, 1e-3), dt.float32: (1e-4, 1e-5), dt.float64: (1e-5, 1e-8)})
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False, msg=msg or None)


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    """A tensor of ``shape`` and ``dtype`` filled with random values as torch's: floats uniform in ``[low, high)``
    (default ``[-9, 9)``), integers in ``[low, high)`` (default ``[-9, 10)``, clamped to the dtype), bools random;
    ``noncontiguous`` gives a strided view, ``exclude_zero`` replaces zeros (by 1, or the dtype's ``tiny``),
    ``requires_grad`` for floating dtypes.  Values come from jitgrad's generator, not torch's."""
    import jitgrad as jg
    from ..library.tensor_info.type_info import finfo, iinfo
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = shape[0]
    shape = tuple(shape)
    d = dt.as_dtype(dtype)
    if noncontiguous and memory_format is not None:
        raise ValueError(f"The parameters `noncontiguous` and `memory_format` are mutually exclusive, but got "
                         f"noncontiguous={noncontiguous} and memory_format={memory_format}")
    integral = not d.is_floating_point
    if requires_grad and integral:
        raise ValueError(f"`requires_grad=True` is not supported for boolean and integral dtypes, but got "
                         f"dtype={d!r}")

    def low_high(lowest, highest, dlow, dhigh):
        lo = low if low is not None else dlow
        hi = high if high is not None else dhigh
        if any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
            raise ValueError(f"`low` and `high` cannot be NaN, but got low={lo} and high={hi}")
        if lo == hi and not integral:
            warnings.warn("Passing `low==high` to `torch.testing.make_tensor` for floating or complex types is "
                          "deprecated since 2.1 and will be removed in 2.3. Use `torch.full(...)` instead.",
                          FutureWarning, stacklevel=3)
        elif lo >= hi:
            raise ValueError(f"`low` must be less than `high`, but got {lo} >= {hi}")
        elif hi < lowest or lo >= highest:
            raise ValueError(f"The value interval specified by `low` and `high` is [{lo}, {hi}), but {d!r} only "
                             f"supports [{lowest}, {highest})")
        lo, hi = min(max(lo, lowest), highest), min(max(hi, lowest), highest)
        return (math.ceil(lo), math.ceil(hi)) if integral else (lo, hi)

    n = 1
    for s in shape:
        n *= s
    noncontiguous = noncontiguous and n > 1
    if noncontiguous:
        shape = (*shape[:-1], 2 * shape[-1])
    if d is dt.bool_:
        lo, hi = low_high(0, 2, 0, 2)
        result = jg.randint(lo, hi, shape, device=device, dtype=d)
    elif integral:
        ii = iinfo(d)
        lo, hi = low_high(ii.min, ii.max + (1 if d is not dt.int64 else 0), -9, 10)
        result = jg.randint(lo, hi, shape, device=device, dtype=d)
    else:
        fi = finfo(d)
        lo, hi = low_high(fi.min, fi.max, -9, 9)
        result = jg.empty(shape, device=device, dtype=d)
        if hi - lo >= fi.max:
            result.uniform_(lo / 2, hi / 2).mul_(2)
        else:
            result.uniform_(lo, hi)
    if noncontiguous:
        result = result[..., 1::2]
    if exclude_zero:
        result[result == 0] = 1 if integral else finfo(d).tiny
    if not integral:
        result.requires_grad = requires_grad
    return result


__all__ = ["assert_close", "assert_allclose", "make_tensor"]
