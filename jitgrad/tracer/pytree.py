"""Flatten nested tuples/lists/dicts of leaves into a list plus a hashable structure description."""
from __future__ import annotations


def flatten(tree, is_leaf):
    """-> (leaves, treedef).  ``is_leaf(x)`` picks the dynamic leaves (tensors); other non-container values are
    static and stored in the treedef (so they are part of a cache key)."""
    leaves = []

    def walk(x):
        if is_leaf(x):
            leaves.append(x)
            return ("*",)
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return ("tuple", tuple(walk(v) for v in x))
        if isinstance(x, list):
            return ("list", tuple(walk(v) for v in x))
        if isinstance(x, dict):
            keys = tuple(x.keys())
            return ("dict", keys, tuple(walk(x[k]) for k in keys))
        if hasattr(x, "_fields") and isinstance(x, tuple):
            return ("named", type(x), tuple(walk(v) for v in x))
        return ("static", _static_key(x), x)
    try:
        return leaves, walk(tree)
    finally:
        del walk    # the recursive closure refers to itself: break the cycle so the leaves are freed at once


def _static_key(x):
    try:
        hash(x)
        return (type(x).__name__, x)
    except TypeError:
        return (type(x).__name__, id(x))


def unflatten(treedef, leaves):
    it = iter(leaves)

    def build(d):
        kind = d[0]
        if kind == "*":
            return next(it)
        if kind == "tuple":
            return tuple(build(c) for c in d[1])
        if kind == "list":
            return [build(c) for c in d[1]]
        if kind == "dict":
            return {k: build(c) for k, c in zip(d[1], d[2])}
        if kind == "named":
            return d[1](*(build(c) for c in d[2]))
        return d[2]
    try:
        return build(treedef)
    finally:
        del build   # break the self-referencing closure's cycle


def treedef_key(treedef):
    """A hashable key for a treedef (static values by value when hashable)."""
    kind = treedef[0]
    if kind == "*":
        return "*"
    if kind in ("tuple", "list"):
        return (kind, tuple(treedef_key(c) for c in treedef[1]))
    if kind == "dict":
        return ("dict", treedef[1], tuple(treedef_key(c) for c in treedef[2]))
    if kind == "named":
        return ("named", treedef[1], tuple(treedef_key(c) for c in treedef[2]))
    return ("static", treedef[1])
