"""Anomaly detection (seeds 000, 002): forward tracebacks in backward errors, NaN/Inf checks."""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .devices import backend_of_payload, to_host


class _Anomaly:
    # instance slots, not class attributes: every bind reads ``enabled``, and the adaptive interpreter specialises a
    # slot read (a class attribute read through an instance it does not)
    __slots__ = ("enabled", "check_nan", "check_forward", "current")

    def __init__(self):
        self.enabled = False
        self.check_nan = True
        self.check_forward = False
        self.current = None     # the node the engine is running (anomaly mode only): the parent of nodes made meanwhile


STATE = _Anomaly()


def is_anomaly_enabled() -> bool:
    return STATE.enabled


def is_anomaly_check_nan_enabled() -> bool:
    return STATE.check_nan


def set_anomaly_enabled(enabled: bool, check_nan: bool = True, check_forward: bool = False):
    STATE.enabled = bool(enabled)
    STATE.check_nan = bool(check_nan)
    STATE.check_forward = bool(check_forward) and bool(enabled)


class detect_anomaly:
    r"""Context manager and decorator that enables anomaly detection for the autograd engine.

    - Running the forward pass with detection enabled lets the backward pass report the traceback of the
      forward operation that created a failing backward function (in the exception message).
    - If ``check_nan`` is True, a backward function producing NaN/Inf raises a RuntimeError.
    - jitgrad extension: ``check_forward=True`` also checks forward op outputs.

    >>> import jitgrad as jg
    >>> import warnings; warnings.simplefilter("ignore")
    >>> x = jg.tensor([0.0], requires_grad=True)
    >>> try:
    ...     with jg.autograd.detect_anomaly():
    ...         x.sqrt().sum().backward()
    ... except RuntimeError as e:
    ...     print(str(e).splitlines()[0])
    Function 'SqrtBackward0' returned nan values in its 0th output.
    """

    def __init__(self, check_nan: bool = True, check_forward: bool = False):
        self.check_nan = check_nan
        self.check_forward = check_forward
        self.prev = (STATE.enabled, STATE.check_nan, STATE.check_forward)
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only "
                      "be enabled for debugging.", stacklevel=2)

    def __enter__(self):
        self.prev = (STATE.enabled, STATE.check_nan, STATE.check_forward)
        set_anomaly_enabled(True, self.check_nan, self.check_forward)
        return self

    def __exit__(self, *args):
        STATE.enabled, STATE.check_nan, STATE.check_forward = self.prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _Scoped(self.check_nan, self.check_forward):
                return fn(*args, **kwargs)
        return wrapper


class _Scoped:
    def __init__(self, check_nan, check_forward):
        self.args = (check_nan, check_forward)

    def __enter__(self):
        self.prev = (STATE.enabled, STATE.check_nan, STATE.check_forward)
        set_anomaly_enabled(True, *self.args)

    def __exit__(self, *exc):
        STATE.enabled, STATE.check_nan, STATE.check_forward = self.prev
        return False


class set_detect_anomaly:
    """Turn anomaly detection on or off: as a plain call, or as a context manager restoring the previous state."""

    def __init__(self, mode: bool, check_nan: bool = True, check_forward: bool = False):
        self.prev = (STATE.enabled, STATE.check_nan, STATE.check_forward)
        set_anomaly_enabled(mode, check_nan, check_forward)

    def __enter__(self):
        return self

    def __exit__(self, *args):
        STATE.enabled, STATE.check_nan, STATE.check_forward = self.prev
        return False


class AnomalyError(RuntimeError):
    """A NaN/Inf caught by anomaly mode (a RuntimeError, as in torch); its message is complete."""


def forward_trace_text(stack) -> str:
    from .source import format_stack
    if not stack:
        return ("No forward pass information available. Enable detect anomaly during forward pass for more "
                "information.")
    return "Traceback of forward call that caused the error:\n" + format_stack(stack)


def error_report(node) -> list:
    """torch's anomaly report for an error in ``node``'s backward, one warning text per line of descent: the
    forward call that made ``node``, then, for a node made while another node's backward ran (a double backward
    with create_graph), the forward call behind that one, and so on."""
    texts = [f"Error detected in {node.name()}. {forward_trace_text(node.stack)}"]
    seen = {id(node)}
    parent = getattr(node, "anomaly_parent", None)
    while parent is not None and id(parent) not in seen:
        seen.add(id(parent))
        texts.append(f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of forward call that "
                     "induced the previous calculation:\n" + format_stack_text(parent.stack))
        parent = getattr(parent, "anomaly_parent", None)
    return texts


def format_stack_text(stack) -> str:
    from .source import format_stack
    return format_stack(stack) if stack else "(no forward pass information)\n"


def nonfinite_message(name, index, kind, shape, dtype_name, loc, stack, backward=True, op=None,
                      compiled=False) -> str:
    """The one wording for a NaN/Inf caught by anomaly mode, eager or inside compiled code: torch's first line
    ("Function 'XBackward0' returned nan values in its 0th output."), then the op, forward/backward, the
    user's file:line and source text, shape and dtype, and the forward traceback."""
    where = f" at {loc.where()} ({loc.text})" if loc is not None else ""
    if backward:
        head = f"Function '{name}' returned nan values in its {index}th output."
        what = f"  op: {op or name} (backward of the forward call{where})"
    else:
        head = f"Function '{name}' (forward) returned nan values in its {index}th output."
        what = f"  op: {op or name} (forward{where})"
    inside = " [checked inside compiled code]" if compiled else ""
    return (f"{head}\n{what}; {'gradient' if backward else 'output'} shape {list(shape)}, dtype {dtype_name}, "
            f"contains {kind}{inside}\n\n" + forward_trace_text(stack))


# ---- the engine's node backward in anomaly mode ------------------------------------------------------------

def apply_node(node, grads, prof):
    """``node.apply`` in anomaly mode: nodes made meanwhile (create_graph) record it as their parent, NumPy's
    floating-point warnings are off (the NaN/Inf check that follows is the report, as torch has no such
    warnings), and an error carries the forward call's traceback."""
    prev = STATE.current
    STATE.current = node
    try:
        with np.errstate(all="ignore"):
            if prof is not None:
                with prof.range(node.name(), [m[0] for m in node.out_meta]):
                    return node.apply(grads)
            return node.apply(grads)
    except AnomalyError:
        raise                       # already a complete report (e.g. from checks inside compiled code)
    except Exception as e:
        raise _with_forward_trace(e, node) from e
    finally:
        STATE.current = prev


def _warn_report(node):
    """torch's anomaly warnings for an error in ``node``: where its forward call was, then its parents'."""
    for text in error_report(node):
        try:
            warnings.warn(text, UserWarning, stacklevel=5)
        except Warning as w:    # warnings turned into errors must not hide the real error: printed instead (torch)
            import sys
            print(f"{type(w).__name__}: {w}", file=sys.stderr)


def _forward_trace(node) -> str:
    return forward_trace_text(node.stack)


def _with_forward_trace(e: Exception, node) -> Exception:
    tb = _forward_trace(node)
    _warn_report(node)
    msg = f"{e}\n\n[jitgrad anomaly mode] Error detected in {node.name()}. {tb}"
    try:
        new = type(e)(msg)
    except Exception:
        new = RuntimeError(msg)
    return new


def _nan_error(node, i, g) -> RuntimeError:
    # torch's wording ("returned nan values") for NaN and Inf alike (API.md); the details say which it was
    kind = "nan" if np.isnan(g._data).any() else "inf"
    op = getattr(node.op, "name", node.name())
    return AnomalyError(nonfinite_message(node.name(), i, kind, g.shape, g.dtype.name, node.loc,
                                                          node.stack, op=op))


def check_finite(node, grads):
    """torch's check of a node's backward in anomaly mode: a NaN or Inf among its gradients raises (after the
    report of where its forward call was)."""
    for i, g in enumerate(grads):
        if g is None:
            continue
        d = g._data
        if type(d) is not np.ndarray and backend_of_payload(d) is not None:
            d = to_host(d)      # a device tensor: its values come back for the check (anomaly mode only)
        if type(d) is np.ndarray and d.dtype.kind == "f" and not np.isfinite(d).all():
            _warn_report(node)
            raise _nan_error(node, i, g)
