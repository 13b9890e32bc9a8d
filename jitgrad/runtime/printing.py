"""``repr`` of tensors in torch's style: ``tensor([1., 2.], requires_grad=True)``."""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt


def _float_formatter(a: np.ndarray):
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.4f}"
    amax = np.abs(finite).max()
    amin = np.abs(finite[finite != 0]).min() if np.any(finite != 0) else 0.0
    if np.all(finite == np.round(finite)) and amax < 1e8:
        width = len(f"{amax:.0f}") + 1
        return lambda v: _special(v) or f"{v:.0f}."
    if amax >= 1e8 or (amin and amin < 1e-4) or (amax / (amin or 1)) > 1e7:
        return lambda v: _special(v) or f"{v:.4e}"
    return lambda v: _special(v) or f"{v:.4f}"


def _special(v):
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


def format_data(a: np.ndarray) -> str:
    if a.dtype.kind == "f":
        fmt = _float_formatter(a) if a.size else (lambda v: f"{v:.4f}")
        formatter = {"float_kind": fmt}
    elif a.dtype.kind == "b":
        formatter = {"bool": lambda v: "True" if v else "False"}
    else:
        formatter = None
    return np.array2string(a, separator=", ", formatter=formatter, prefix="tensor(", threshold=1000, edgeitems=3,
                           max_line_width=80)


def tensor_repr(t) -> str:
    a = t._data
    body = format_data(a)
    extras = []
    if a.size == 0 and a.ndim != 1:
        extras.append(f"size={tuple(a.shape)}")
    d = t.dtype
    if d not in (dt.float32, dt.int64, dt.bool_):
        extras.append(f"dtype=jitgrad.{d.name}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t._requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
