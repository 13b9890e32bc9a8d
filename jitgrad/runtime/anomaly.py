"""Anomaly detection (seeds 000, 002): forward tracebacks in backward errors, NaN/Inf checks."""
from __future__ import annotations

import functools
import warnings


class _Anomaly:
    enabled = False
    check_nan = True
    check_forward = False
    current = None      # the node the engine is running (anomaly mode only): the parent of nodes made meanwhile


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
