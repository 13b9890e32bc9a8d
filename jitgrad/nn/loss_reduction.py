"""How a loss is reduced: torch's ``reduction`` strings and its deprecated ``size_average``/``reduce`` pair
(``torch.nn._reduction``), shared by every functional loss and the loss modules."""
from __future__ import annotations

import warnings


def legacy_reduction(size_average, reduce) -> str:
    """torch's deprecated ``size_average``/``reduce`` pair as a ``reduction`` string (with torch's warning)."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "none" if not reduce else ("mean" if size_average else "sum")
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                  stacklevel=3)
    return ret


def resolve(size_average, reduce, reduction: str) -> str:
    """The reduction a loss call asks for: ``reduction``, unless the deprecated pair is given (it wins, as in
    torch)."""
    if size_average is None and reduce is None:
        return reduction
    return legacy_reduction(size_average, reduce)


REDUCTIONS = ("mean", "sum", "none")      # what torch's losses accept


def check(reduction: str, allowed=REDUCTIONS) -> None:
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")       # torch's type and text


def reduce_loss(loss, reduction: str):
    """``loss`` (per element) reduced as ``reduction`` says: ``mean``, ``sum`` or ``none``."""
    check(reduction)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


__all__ = ["legacy_reduction", "resolve", "check", "reduce_loss", "REDUCTIONS"]
