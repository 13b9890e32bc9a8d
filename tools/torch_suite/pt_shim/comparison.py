"""PyTorch's ``TestCase.assertEqual`` semantics, reimplemented over jitgrad tensors (harness code).

Order of pair kinds, as in torch.testing._internal.common_utils: None, boolean (one side a bool, the other a
bool / number / one-element tensor), number (one side an int/float/complex, the other a number / one-element
tensor; dtype not checked; float tolerances of float32), tensor-or-ndarray (shape, then dtype when
``exact_dtype``, device when ``exact_device``, then values with the dtype's default rtol/atol, nan == nan),
str, set, type, object (==).  Sequences (not str) and mappings are compared element-wise after a length/keys
check; a tensor compared with a sequence converts the sequence with the tensor's dtype first.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

import jitgrad as torch

# default (rtol, atol) by dtype name, as torch.testing._comparison.default_tolerances
_TOL = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}
_NUMBER_DTYPE = {int: "int64", float: "float32", complex: "complex64"}


class Mismatch(AssertionError):
    pass


def _dtype_name(dt) -> str:
    return getattr(dt, "name", None) or str(dt).split(".")[-1]


def _tol(*names):
    r = a = 0.0
    for n in names:
        rr, aa = _TOL.get(n, (0.0, 0.0))
        r, a = max(r, rr), max(a, aa)
    return r, a


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


def _is_number(x):
    return isinstance(x, (int, float, complex, np.number)) and not isinstance(x, (bool, np.bool_))


def _to_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    with torch.no_grad():
        return np.asarray(t.detach().numpy())


def _numel(x):
    return x.numel() if _is_tensor(x) else x.size


def _item(x, kind, path):
    if _is_tensor(x) or isinstance(x, np.ndarray):
        if _numel(x) > 1:
            raise ValueError(f"Only single element tensor-likes can be compared against a {kind}. "
                             f"Got {_numel(x)} elements instead.{path}")
        v = x.item()
        return v
    if isinstance(x, np.generic):
        return x.item()
    return x


def compare(x, y, *, rtol=None, atol=None, rtol_override=0.0, atol_override=0.0, equal_nan=True,
            exact_dtype=True, exact_device=False, path=""):
    """Raise AssertionError (or ValueError) when ``x`` and ``y`` differ under assertEqual's rules."""
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted")
    # tensor vs sequence: the sequence becomes a tensor of the tensor's dtype
    if _is_tensor(x) and isinstance(y, Sequence) and not isinstance(y, (str, bytes)):
        y = torch.as_tensor(y, dtype=x.dtype)
    elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)) and _is_tensor(y):
        x = torch.as_tensor(x, dtype=y.dtype)
    kw = dict(rtol=rtol, atol=atol, rtol_override=rtol_override, atol_override=atol_override,
              equal_nan=equal_nan, exact_dtype=exact_dtype, exact_device=exact_device)

    tensorish = (torch.Tensor, np.ndarray)
    # containers first (are_equal originates pairs for sequences / mappings before leaf pairs)
    if isinstance(x, Sequence) and isinstance(y, Sequence) and not isinstance(x, (str, bytes)) \
            and not isinstance(y, (str, bytes)):
        if len(x) != len(y):
            raise Mismatch(f"The length of the sequences mismatch: {len(x)} != {len(y)}{path}")
        for i, (a, b) in enumerate(zip(x, y)):
            compare(a, b, path=f"{path}[{i}]", **kw)
        return
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        if set(x.keys()) != set(y.keys()):
            raise Mismatch(f"The keys of the mappings do not match: {sorted(map(str, x))} vs "
                           f"{sorted(map(str, y))}{path}")
        for k in x:
            compare(x[k], y[k], path=f"{path}[{k!r}]", **kw)
        return
    # None
    if x is None or y is None:
        if x is None and y is None:
            return
        raise Mismatch(f"None mismatch: {x!r} is not {y!r}{path}")
    # boolean
    bools = (bool, np.bool_)
    if isinstance(x, bools) or isinstance(y, bools):
        other_ok = (bool, np.bool_, int, float, complex, np.number) + tensorish
        if isinstance(x, other_ok) and isinstance(y, other_ok):
            a, b = bool(_item(x, "boolean", path)), bool(_item(y, "boolean", path))
            if a != b:
                raise Mismatch(f"Booleans mismatch: {a} is not {b}{path}")
            return
    # number
    if _is_number(x) or _is_number(y):
        if (_is_number(x) or isinstance(x, tensorish)) and (_is_number(y) or isinstance(y, tensorish)):
            a, b = _item(x, "number", path), _item(y, "number", path)
            if isinstance(a, bool):
                a = int(a)
            if isinstance(b, bool):
                b = int(b)
            if rtol is None:
                rtol_, atol_ = _tol(*[_NUMBER_DTYPE.get(type(v), "") for v in (a, b)])
            else:
                rtol_, atol_ = rtol, atol
            rtol_, atol_ = max(rtol_, rtol_override), max(atol_, atol_override)
            if a == b:
                return
            if equal_nan and isinstance(a, (float, complex)) and isinstance(b, (float, complex)) and \
                    (a != a) and (b != b):
                return
            diff = abs(a - b)
            if math.isfinite(diff) and diff <= atol_ + rtol_ * abs(b):
                return
            raise Mismatch(f"Scalars are not close!\n\nExpected {b} but got {a}.\n"
                           f"Absolute difference: {diff} (up to {atol_} allowed)\n"
                           f"Relative difference: {diff / abs(b) if b else math.inf} (up to {rtol_} allowed){path}")
    # tensor / ndarray
    if isinstance(x, tensorish) and isinstance(y, tensorish):
        _compare_tensors(x, y, path=path, **kw)
        return
    # str / set / type / object
    try:
        same = bool(x == y)
    except Exception as e:   # e.g. a tensor against a str: ObjectPair's == fails
        raise Mismatch(f"{type(x).__name__.title()} comparison failed: {e}{path}") from None
    if not same:
        raise Mismatch(f"{type(x).__name__.title()} comparison failed: {x!r} != {y!r}{path}")


def _compare_tensors(x, y, *, rtol, atol, rtol_override, atol_override, equal_nan, exact_dtype, exact_device, path):
    xs = tuple(x.shape)
    ys = tuple(y.shape)
    if xs != ys:
        raise Mismatch(f"The values for attribute 'shape' do not match: {x.shape} != {y.shape}.{path}")
    xd = _dtype_name(x.dtype) if _is_tensor(x) else np.dtype(x.dtype).name
    yd = _dtype_name(y.dtype) if _is_tensor(y) else np.dtype(y.dtype).name
    if exact_device and _is_tensor(x) and _is_tensor(y) and str(x.device) != str(y.device):
        raise Mismatch(f"The values for attribute 'device' do not match: {x.device} != {y.device}.{path}")
    if exact_dtype and xd != yd:
        raise Mismatch(f"The values for attribute 'dtype' do not match: torch.{xd} != torch.{yd}.{path}")
    if rtol is None:
        rtol, atol = _tol(xd, yd)
    rtol, atol = max(rtol, rtol_override), max(atol, atol_override)
    a, b = _to_numpy(x), _to_numpy(y)
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        bad = a != b
    else:
        common = np.result_type(a.dtype, b.dtype)
        if common == np.bool_:
            common = np.int64
        a = a.astype(common)
        b = b.astype(common)
        if np.issubdtype(common, np.inexact):
            with np.errstate(invalid="ignore", over="ignore"):
                bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
                # isclose treats inf==inf fine; exact equality always passes
                bad &= ~(a == b)
        else:
            bad = a != b
    if np.any(bad):
        n = int(np.sum(bad))
        raise Mismatch(f"Tensor-likes are not close!\n\nMismatched elements: {n} / {a.size}"
                       f"\nactual: {a.ravel()[:8]}\nexpected: {b.ravel()[:8]}\n(rtol={rtol}, atol={atol}){path}")
