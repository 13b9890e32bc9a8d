"""Which nodes a backward pass runs, and which of their inputs' gradients it needs.

``backward()`` without ``inputs`` runs every node reachable from the roots.  ``grad()`` (and ``backward(inputs=)``)
runs only the nodes on a path from a root to a capture point, and of those nodes' inputs only the ones on such a
path need a gradient: an op's node asks its vjp rule for exactly those (torch's ``task_should_compute_output``), so
``grad(loss, x)`` through ``x @ W`` makes no gradient for ``W``, and a gradient penalty's second backward none for
its data.  The cut-down ``needs_grad`` goes on a copy of the node that the rule sees as its ``ctx``: the node
itself is left as recorded (another backward over a retained graph, maybe on another thread, may need more)."""
from __future__ import annotations

from ..node import Node

_SLOTS = tuple(s for s in Node.__slots__ if s != "__weakref__")


def reachable(root_edges):
    """Plain backward: ``{node: number of edges into it}`` over every node reachable from the roots."""
    deps = {}
    for n, _ in root_edges:
        deps[n] = 0
    stack = list(deps)
    while stack:
        n = stack.pop()
        for c, _ in n.next_functions:
            if c is None:
                continue
            d = deps.get(c)
            if d is None:
                deps[c] = 1
                stack.append(c)
            else:
                deps[c] = d + 1
    return deps


def toward(root_edges, cap_nodes, node_type):
    """``(deps, needed, execute, narrowed)`` for a backward toward capture points: needed = a capture point or a
    node with a needed child; execute = a node with a needed child (its vjp must run); deps = edges from executed
    nodes into each needed node; narrowed = ``{node: needs_grad}`` for the op nodes (``node_type``) some of whose
    inputs need a gradient but not in this backward (None when there are none): their rules run on ``ctx``.
    One iterative post-order walk (the graph is acyclic, so a node's children are final when it is)."""
    status = {}
    needed = set()
    execute = set()
    stack = [(n, False) for n, _ in root_edges]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            for c, _ in n.next_functions:
                if c is not None and status[c]:
                    execute.add(n)
                    break
            r = n in execute or n in cap_nodes
            status[n] = r
            if r:
                needed.add(n)
            continue
        if n in status:
            continue
        status[n] = False
        stack.append((n, True))
        for c, _ in n.next_functions:
            if c is not None and c not in status:
                stack.append((c, False))
    deps = dict.fromkeys(needed, 0)
    narrowed = None
    for n in execute:
        cut = False
        for c, _ in n.next_functions:
            if c in deps:
                deps[c] += 1
            elif c is not None:
                cut = True
        if cut and type(n) is node_type:
            old = n.needs_grad
            new = tuple(bool(w) and c is not None and c in needed for w, (c, _) in zip(old, n.next_functions))
            if new != old:
                if narrowed is None:
                    narrowed = {}
                narrowed[n] = new
    return deps, needed, execute, narrowed


def ctx(node, narrowed):
    """What ``node``'s rule runs on: the node, or where this backward needs fewer of its inputs' gradients
    (``narrowed``, from :func:`toward`), a copy of it that says so in ``needs_grad``.  Made as the node runs, so
    the copy holds its saved values no longer than the node's own run."""
    if narrowed is None:
        return node
    needs = narrowed.get(node)
    if needs is None:
        return node
    c = object.__new__(type(node))
    for s in _SLOTS:
        try:
            setattr(c, s, getattr(node, s))
        except AttributeError:      # (a slot never set)
            pass
    c.needs_grad = needs
    return c
