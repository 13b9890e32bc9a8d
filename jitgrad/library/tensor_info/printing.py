"""``repr`` of tensors in torch's style: ``tensor([1., 2.], requires_grad=True)``.

A port of ``torch/_tensor_str.py`` for strided CPU tensors: one formatter over the (summarised) values picks
int mode / fixed / scientific and a common width; elements are right-aligned to it and wrapped at 80 columns.
"""
from __future__ import annotations

import math

import numpy as np

from ...declarations import published
from ...runtime.dual import DUALS
from ...ir import dtypes as dt

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80
SCI_MODE = None         # None: chosen per tensor; True/False: forced (set_printoptions(sci_mode=...))
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


@published("jitgrad")
def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """torch's print options for tensor reprs: ``precision`` (digits after the point, 4), ``threshold`` (elements
    above which a tensor prints summarised, 1000), ``edgeitems`` (items kept at each edge when summarised, 3),
    ``linewidth`` (80), ``profile`` (``"default"``, ``"short"``, ``"full"``: presets of the four) and
    ``sci_mode`` (True/False force scientific or fixed notation; None, the default of every call, chooses)."""
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile in _PROFILES:       # another name changes nothing, as in torch
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = _PROFILES[profile]
    if precision is not None:
        PRECISION = precision
    if threshold is not None:
        THRESHOLD = threshold
    if edgeitems is not None:
        EDGEITEMS = edgeitems
    if linewidth is not None:
        LINEWIDTH = linewidth
    SCI_MODE = sci_mode


class _Formatter:
    def __init__(self, a: np.ndarray):
        self.floating = a.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = a.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(f"{v}"))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if vals.size == 0:
            return
        absv = np.abs(vals)
        mn, mx = absv.min(), absv.max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        self.sci_mode = bool(mx / mn > 1000.0 or mx > 1.0e8 or mn < 1.0e-4) if SCI_MODE is None else SCI_MODE
        if self.sci_mode:
            self.max_width = max(len(f"{v:.{PRECISION}e}") for v in vals.tolist())
        elif self.int_mode:
            self.max_width = max(len(f"{v:.0f}") + 1 for v in vals.tolist())
        else:
            self.max_width = max(len(f"{v:.{PRECISION}f}") for v in vals.tolist())

    def format(self, v) -> str:
        if self.floating:
            if self.sci_mode:
                r = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                r = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    r += "."
            else:
                r = f"{v:.{PRECISION}f}"
        else:
            r = f"{v}"
        return (self.max_width - len(r)) * " " + r


def _summarized(a: np.ndarray) -> np.ndarray:
    """The values torch's printer looks at when it summarises: edge items along every axis."""
    for ax in range(a.ndim):
        n = a.shape[ax]
        if n > 2 * EDGEITEMS:
            a = np.concatenate([np.take(a, range(EDGEITEMS), axis=ax),
                                np.take(a, range(n - EDGEITEMS, n), axis=ax)], axis=ax)
    return a


def _vector_str(a, indent, summarize, fmt):
    element_length = fmt.max_width + 2
    per_line = max(1, math.floor((LINEWIDTH - indent) / element_length)) if LINEWIDTH != math.inf else len(a) + 1
    if summarize and a.shape[0] > 2 * EDGEITEMS:
        data = ([fmt.format(v) for v in a[:EDGEITEMS].tolist()] + [" ..."]
                + [fmt.format(v) for v in a[-EDGEITEMS:].tolist()])
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _tensor_str(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector_str(a, indent, summarize, fmt)
    n = a.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        rows = ([_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(EDGEITEMS)] + ["..."]
                + [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(n - EDGEITEMS, n)])
    else:
        rows = [_tensor_str(a[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def format_data(a: np.ndarray, indent: int = 7) -> str:
    """The bracketed body torch prints for an array (``[]`` when empty)."""
    if a.size == 0:
        return "[]"
    summarize = a.size > THRESHOLD
    fmt = _Formatter(_summarized(a) if summarize else a)
    return _tensor_str(a, indent, summarize, fmt)


def _add_suffixes(body, suffixes, indent):
    out = [body]
    last_line_len = len(body) - body.rfind("\n") + 1
    for s in suffixes:
        if last_line_len + len(s) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + s)
            last_line_len = indent + len(s)
        else:
            out.append(", " + s)
            last_line_len += len(s) + 2
    out.append(")")
    return "".join(out)


def tensor_repr(t, data=None, device=None) -> str:
    """torch's repr; ``data``/``device``: a device tensor's host copy and its device (named in the suffix)."""
    a = t._data if data is None else data
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    d = t.dtype
    if a.size == 0:
        if a.ndim != 1:
            suffixes.append(f"size={tuple(a.shape)}")
        if d is not dt.DEFAULT_FLOAT:
            suffixes.append(f"dtype=jitgrad.{d.name}")
    elif d not in (dt.DEFAULT_FLOAT, dt.int64, dt.bool_):
        suffixes.append(f"dtype=jitgrad.{d.name}")
    body = format_data(a, indent)
    if device is not None:
        suffixes.insert(0, f"device='{device}'")
    try:
        gf = t.grad_fn
    except RuntimeError:    # a view made in no_grad mode whose base was written since: torch prints it so
        suffixes.append("grad_fn=<Invalid>")
    else:
        if gf is not None:
            suffixes.append(f"grad_fn=<{gf.name()}>")
        elif t._requires_grad or t._view_origin is not None and t.requires_grad:
            suffixes.append("requires_grad=True")
    if DUALS.levels:        # a dual tensor shows its tangent (torch)
        for lv in DUALS.levels:
            tangent = lv.get(t)
            if tangent is not None:
                suffixes.append(f"tangent={tensor_repr(tangent)}")
                break
    return _add_suffixes(prefix + body, suffixes, indent)


@published("Tensor", name="__repr__")
def _tensor_repr(self):
    """torch's repr: the values (a device tensor's copied to the host), dtype and device when not the defaults,
    and ``grad_fn`` / ``requires_grad``; a traced value shows its abstract value."""
    from ...runtime.devices import backend_of_payload
    if backend_of_payload(self._data) is not None:
        return tensor_repr(self, self._host(), self.device)
    if type(self._data) is not np.ndarray:
        gf = f", grad_fn=<{self.grad_fn.name()}>" if self.grad_fn is not None else ""
        return f"tensor(<traced {self._data.aval}>{gf})"
    return tensor_repr(self)
