"""Which nodes a backward toward given tensors runs, and which of their inputs' gradients it needs.

(``backward()`` without ``inputs`` runs every node reachable from the roots: engine.run walks them inline.)
``grad()`` (and ``backward(inputs=)``) runs only the nodes on a path from a root to a capture point, and of those
nodes' inputs only the ones on such a path need a gradient: an op's node asks its vjp rule for exactly those
(torch's ``task_should_compute_output``), so ``grad(loss, x)`` through ``x @ W`` makes no gradient for ``W``, and
a gradient penalty's second backward none for its data.  The cut-down ``needs_grad`` goes on a copy of the node
that the rule sees as its ``ctx``: the node itself is left as recorded (another backward over a retained graph,
maybe on another thread, may need more)."""
from __future__ import annotations

from ...ir.ops.opdef import OpDef
from ..generated_code import make
from ..rule_entries import saved_inputs

_COPIERS: dict = {}     # node class -> (its slots but __weakref__ and needs_grad, the function copying them)
_KEEP: dict = {}        # (op, number of inputs, needs_grad) -> the inputs a node recorded so saves (few: ops x needs)


def toward(root_edges, cap_nodes, node_type):
    """``(deps, needed, execute, narrowed)`` for a backward toward capture points: needed = a capture point or a
    node with a needed child; execute = a node with a needed child (its vjp must run); deps = edges from executed
    nodes into each needed node; narrowed = ``{node: needs_grad}`` for the op nodes (``node_type``) some of whose
    inputs need a gradient but not in this backward (None when there are none): their rules run on ``ctx``.
    One iterative post-order walk (the graph is acyclic, so a node's children are final when it is): a node is
    pushed once to expand and again to finish (its status None meanwhile), and finishing it counts the edges
    into its needed children, so no second pass over the executed nodes (~35% of a gradient penalty's walk)."""
    status = {}         # node -> None while its children are walked, then whether it is needed
    execute = set()
    deps = {}
    narrowed = None
    stack = [n for n, _ in root_edges]
    pop = stack.pop
    push = stack.append
    while stack:
        n = pop()
        if n in status:
            if status[n] is not None:       # (a node pushed by two parents, finished already)
                continue
            # finish: its children are final
            run = cut = False
            for c, _ in n.next_functions:
                if c is not None:
                    if status[c]:
                        deps[c] += 1
                        run = True
                    else:
                        cut = True
            if run:
                execute.add(n)
                status[n] = True
                deps[n] = 0
                if cut and type(n) is node_type and type(n.op) is OpDef:   # (a joined node's stand-in: as recorded)
                    old = n.needs_grad
                    new = []
                    for w, (c, _) in zip(old, n.next_functions):
                        new.append(bool(w) and c is not None and bool(status[c]))
                    new = tuple(new)
                    if new != old:
                        if narrowed is None:
                            narrowed = {}
                        narrowed[n] = new
            elif n in cap_nodes:
                status[n] = True
                deps[n] = 0
            else:
                status[n] = False
            continue
        status[n] = None
        push(n)
        for c, _ in n.next_functions:
            if c is not None and c not in status:
                push(c)
    return deps, deps.keys(), execute, narrowed


def _copier(cls):
    """``cls``'s slots (its bases' too) but ``__weakref__`` and ``needs_grad``, and a function copying them from one
    node to another in one tuple assignment, rendered from the class (once a class), so a new slot is never
    missed."""
    slots = []
    for k in reversed(cls.__mro__):
        own = k.__dict__.get("__slots__", ())
        for name in (own,) if type(own) is str else own:
            if name not in ("__weakref__", "needs_grad", "__dict__") and name not in slots:
                slots.append(name)
    lhs, rhs = ", ".join(f"c.{s}" for s in slots), ", ".join(f"node.{s}" for s in slots)
    text = f"def copy_slots(c, node):\n    ({lhs},) = ({rhs},)\n" if slots else "def copy_slots(c, node):\n    pass\n"
    hit = _COPIERS[cls] = (tuple(slots), make(text, "copy_slots", {}, f"graph_walk copy of {cls.__name__}'s slots"))
    return hit


def ctx(node, narrowed):
    """What ``node``'s rule runs on: the node, or where this backward needs fewer of its inputs' gradients
    (``narrowed``, from :func:`toward`), a copy of it that says so in ``needs_grad``.  Made as the node runs, so
    the copy holds its saved values no longer than the node's own run."""
    needs = narrowed.get(node) if narrowed is not None else None
    if needs is None:
        return node
    cls = type(node)
    c = object.__new__(cls)
    slots, copy = _COPIERS.get(cls) or _copier(cls)
    try:
        copy(c, node)
    except AttributeError:      # (a slot never set: a node not made by dispatch._record)
        for s in slots:
            try:
                setattr(c, s, getattr(node, s))
            except AttributeError:
                pass
    c.needs_grad = needs
    ins = node.inputs
    if node.op.saves_in and ins is not None:
        # what a node recorded with these needs saves (rule_entries.saved_inputs): a rule's plan is keyed by its
        # needs and lays out the saved values it was made with
        key = (node.op, len(ins), needs)
        keep = _KEEP.get(key)
        if keep is None:
            keep = _KEEP[key] = saved_inputs(node.op, len(ins), needs)
        ins = list(ins)
        for i in range(len(ins)):
            if i not in keep:
                ins[i] = None
        c.inputs = tuple(ins)
    return c
