"""torch's ``grad_fn`` names for functions that jitgrad composes from several primitives.

``x.mean()`` is a sum and a division here, so its last node is a ``DivBackward0``; torch has one node,
``MeanBackward0``.  Users print ``loss.grad_fn`` (tutorials do), so a composition names its result's node as
torch does.  Only the name changes: the node still runs its own op's vjp, and ``next_functions`` shows the
primitives the composition is made of.
"""
from __future__ import annotations


def named(result, name: str):
    """Give ``result``'s grad_fn (if it has one, eager or traced) torch's name ``name``; returns ``result``."""
    gf = getattr(result, "grad_fn", None)
    if gf is not None:
        gf.torch_name = name
    return result


def getitem_name(spec) -> str:
    """torch's node for ``x[key]``: IndexBackward0 with an index tensor, else the last basic step it applies
    (SelectBackward0 for an int, SliceBackward0 for a slice, UnsqueezeBackward0 for None)."""
    last = "AliasBackward0"
    for s in spec:
        if type(s) is tuple:
            if s[0] == "tensor":
                return "IndexBackward0"
            if s[1:] != (None, None, None):
                last = "SliceBackward0"
        elif s is None:
            last = "UnsqueezeBackward0"
        elif s is not Ellipsis and not isinstance(s, bool):
            last = "SelectBackward0"
    return last


__all__ = ["named", "getitem_name"]
