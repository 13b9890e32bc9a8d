"""An op's errors as users see them: the op's name, its inputs' shapes and dtypes, and the user's line (eager
dispatch, basic indexing and the library raise them)."""
from __future__ import annotations

from ..ir.ops.opdef import fmt_shape
from .source import user_loc


def describe_avals(avals) -> str:
    """``float32[2, 3], scalar int64``: the inputs of an op as an error names them."""
    return ", ".join("scalar " + a.dtype.name if a.weak else f"{a.dtype.name}{fmt_shape(a.shape)}" for a in avals)


def with_user_line(msg: str) -> str:
    """``msg`` followed by the user's line that called the op (the first frame outside jitgrad)."""
    loc = user_loc(3)
    if loc is None:
        return msg
    return f"{msg}\n  at {loc.where()} in {loc.function}: {loc.text}"


def op_error(op, avals, e: Exception, cls=None):
    """Re-raise an impl/rule failure as an error naming the op, the inputs' shapes/dtypes and the user's line."""
    text = str(e)
    if not text.startswith(op.name):
        text = f"{op.name}: {text}"
    if "input" not in text:
        text += f" (inputs: {describe_avals(avals)})"
    cls = cls or (IndexError if isinstance(e, IndexError) else RuntimeError)
    return cls(with_user_line(text))


def forward_nan(op, avals, t):
    """Anomaly mode's error for a forward op whose result holds NaN (torch's words, with the user's line)."""
    loc = user_loc(3)
    where = f"\n  at {loc.where()} in {loc.function}: {loc.text}" if loc else ""
    raise RuntimeError(f"Function '{op.name}' (forward) returned nan values in its 0th output. "
                       f"Output shape {fmt_shape(t.shape)}, dtype {t.dtype.name}; inputs: {describe_avals(avals)}{where}")


__all__ = ["describe_avals", "with_user_line", "op_error", "forward_nan"]
