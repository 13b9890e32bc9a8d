"""The autograd engine: ``backward`` and ``grad`` over the graph of ``grad_fn`` Nodes.

One pass: find the nodes that lead from the roots to what we want (leaf accumulators, or the inputs of
``grad``), count dependencies, and run each node once all its output cotangents are summed.  With
``create_graph`` the vjp rules run with grad mode on, so the cotangents carry a graph of their own.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
import sys
import threading
import warnings

import numpy as np

from .. import anomaly, forward_state, grad_mode, profiler_state, saved_hooks
from .. import node as _nd
from ..node import AccumulateGrad, zeros_for
from ..saved_output import vjp_through_outputs
from .root_grads import check_outputs, make_root_grads
from ..dispatch import OpNode
from ..graph_hooks import GradientEdge, RUNNING as _RUNNING, root_edge
from .hooks import CALLBACKS as _CALLBACKS, queue_callback, run_post_accumulate_hooks as _run_post_accumulate_hooks, \
    run_pre_hooks as _run_pre_hooks, run_queued_callbacks as _run_queued_callbacks, \
    run_tensor_hooks as _run_tensor_hooks
from .grad_accumulation import accumulate as _accumulate, accumulate_array as _accumulate_array, \
    retain as _retain
from . import graph_walk as _walk, pullback_plans as _plans
from ..tensor import Tensor
from ...tracer import STATE as _TR

_AN = anomaly.STATE
_wrap = Tensor._make
_np_add = np.add
_ndarray = np.ndarray
_getrefcount = sys.getrefcount
_SH = saved_hooks.STATE
_PROF = profiler_state.STATE
_FWD = forward_state.STATE


def _as_tuple(x):
    if x is None:
        return None
    if isinstance(x, Tensor) or type(x) is GradientEdge:
        return (x,)
    return tuple(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """Compute the sum of gradients of ``tensors`` w.r.t. graph leaves and accumulate them into ``.grad``.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1., 2.], requires_grad=True)
    >>> jg.autograd.backward([(x * 3).sum()])
    >>> x.grad
    tensor([3., 3.])
    """
    if grad_tensors is None and grad_variables is None and inputs is None and not create_graph \
            and type(tensors) is tuple and len(tensors) == 1:
        # ``loss.backward()``: one tensor with a history, its gradient the ones its payload is made of (the
        # arguments' checks and make_root_grads for it, inline)
        t = tensors[0]
        d = t._data if type(t) is Tensor and t.grad_fn is not None else None
        if type(d) is _ndarray and d.size == 1:
            root = np.array(1, d.dtype) if d.ndim == 0 else np.ones(d.shape, d.dtype)
            _backward_with_callbacks(tensors, [_wrap(root)], bool(retain_graph), False, None)
            return
    if grad_variables is not None:
        warnings.warn("'grad_variables' is deprecated. Use 'grad_tensors' instead.", FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("'grad_tensors' and 'grad_variables' (deprecated) arguments both passed to "
                               "backward(). Please only use 'grad_tensors'.")
        grad_tensors = grad_variables
    tensors = _as_tuple(tensors)
    inputs = _as_tuple(inputs)
    if inputs is not None and len(inputs) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    grad_tensors = _as_tuple(grad_tensors) or (None,) * len(tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"grad_tensors has {len(grad_tensors)} entries but tensors has {len(tensors)}")
    check_outputs(tensors)
    if retain_graph is None:
        retain_graph = create_graph
    roots = make_root_grads(tensors, grad_tensors, create_graph)
    if create_graph:
        warnings.warn("Using backward() with create_graph=True will create a reference cycle between the parameter "
                      "and its gradient which can cause a memory leak. We recommend using autograd.grad when "
                      "creating the graph to avoid this. If you have to use this function, make sure to reset the "
                      ".grad fields of your parameters to None after use to break the cycle and avoid the leak.",
                      UserWarning, stacklevel=3 if _called_from_tensor_backward() else 2)
    _backward_with_callbacks(tensors, roots, retain_graph, create_graph, inputs)


def _backward_with_callbacks(tensors, roots, retain_graph, create_graph, inputs):
    """``backward()``'s run, then the callbacks queued meanwhile (``queue_callback``; the queue is dropped when
    the outermost backward ends, also on an error)."""
    _CALLBACKS.depth += 1
    try:
        if inputs is None:
            run(tensors, roots, retain_graph, create_graph, None, accumulate=True)
        else:
            for t in inputs:
                if type(t) is not GradientEdge and (not isinstance(t, Tensor) or not t.requires_grad):
                    raise RuntimeError("One of the differentiated Tensors does not require grad")
            # backward(inputs=...) runs the hooks of the captured nodes (torch executes them); grad() does not
            captured = run(tensors, roots, retain_graph, create_graph, inputs, accumulate=False, capture_hooks=True)
            for t, g in zip(inputs, captured):
                if g is not None and type(t) is not GradientEdge:   # an edge has no .grad to accumulate into
                    _accumulate(t, g, create_graph)
                    if t.grad_fn is None and t._acc is not None and t._acc.post_hooks:
                        _run_post_accumulate_hooks(t._acc, t)
        if _CALLBACKS.queue:
            _run_queued_callbacks()
    finally:
        _CALLBACKS.depth -= 1
        if _CALLBACKS.depth == 0:
            _CALLBACKS.queue = []


def _calculate_shape(output, grad, is_grads_batched):
    """torch.autograd's helper: (output's shape, grad's shape without the batch dim when batched)."""
    out_shape = output.node.out_meta[output.output_nr][0] if type(output) is GradientEdge else output.shape
    return out_shape, grad.shape[1:] if is_grads_batched else grad.shape


def _called_from_tensor_backward() -> bool:
    f = sys._getframe(2)
    return f.f_code.co_name == "backward" and f.f_globals.get("__name__") == "jitgrad.runtime.tensor_methods"


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, materialize_grads=False):
    """Return the sum of gradients of ``outputs`` w.r.t. ``inputs`` (nothing is accumulated into ``.grad``): the
    engine's side of ``jitgrad.autograd.grad``, which adds torch's ``is_grads_batched`` (autograd/batched_grad.py,
    with the example)."""
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate "
                      "gradient for other parts of the graph, please use torch.autograd.backward.",
                      FutureWarning, stacklevel=2)
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    single = isinstance(inputs, Tensor)
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    if not inputs:
        raise ValueError("grad requires non-empty inputs.")
    grad_outputs = _as_tuple(grad_outputs) or (None,) * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output (got {len(grad_outputs)} for "
                           f"{len(outputs)} outputs)")
    check_outputs(outputs)
    for t in inputs:
        if type(t) is not GradientEdge and (not isinstance(t, Tensor) or not t.requires_grad):
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    roots = make_root_grads(outputs, grad_outputs, create_graph)
    res = run(outputs, roots, retain_graph, create_graph, inputs, accumulate=False)
    out = []
    for i, (t, g) in enumerate(zip(inputs, res)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} (shape {list(_edge_shape(t))}) appears to "
                                   "not have been used in the graph. Set allow_unused=True if this is the desired "
                                   "behavior.")
            if materialize_grads:
                if type(t) is GradientEdge:
                    raise RuntimeError("materialize_grads cannot be used when the given input is a GradientEdge")
                g = Tensor._make(np.zeros(t.shape, t._data.dtype))
                if create_graph:
                    g.requires_grad_(True)      # torch: zeros_like(input, requires_grad=create_graph)
        out.append(g)
    del single
    return tuple(out)


def _edge_shape(t):
    return t.node.out_meta[t.output_nr][0] if type(t) is GradientEdge else t.shape


def _as_tensors(grads):
    """``grads`` (a list) with its gradient arrays wrapped as Tensors, in place: what hooks, captures, retained
    gradients and vjp rules on tensors see (a first-order backward carries plain arrays between pullbacks)."""
    for i, g in enumerate(grads):
        if type(g) is _ndarray:
            grads[i] = _wrap(g)
    return grads


def _sum(old, g):
    """Two gradients of one output summed: on their arrays where both are NumPy arrays of one dtype and shape
    (add's impl: no bind, no node), else as tensors."""
    od = old if type(old) is _ndarray else old._data
    gd = g if type(g) is _ndarray else g._data
    if type(od) is _ndarray and type(gd) is _ndarray and od.dtype == gd.dtype and od.shape == gd.shape:
        return np.asarray(_np_add(od, gd))      # (0-d arrays add to a NumPy scalar)
    return (_wrap(old) if type(old) is _ndarray else old) + (_wrap(g) if type(g) is _ndarray else g)


class _Reentrant(threading.local):
    def __init__(self):
        self.depth = 0          # backward calls running in this thread (a custom backward calling backward)


_REENTRANT = _Reentrant()
# nested backward calls per thread before the next one moves to a fresh thread (torch does the same), so a deep
# chain of reentrant backwards (2,000 levels) never exhausts one thread's Python recursion limit or C stack
MAX_REENTRANT_DEPTH = 24


def _run_in_fresh_thread(*args):
    """``_run(*args)`` on a new thread that starts with this thread's grad mode and trace, waited for here."""
    gm, tr = grad_mode.STATE, _TR
    mode = (gm.grad_enabled, gm.inference, tr.active)
    box = {}

    def work():
        gm.grad_enabled, gm.inference, tr.active = mode
        try:
            box["out"] = run(*args)
        except BaseException as e:      # re-raised in the calling thread
            box["err"] = e
    t = threading.Thread(target=work, name="jitgrad-reentrant-backward")
    t.start()
    t.join()
    if "err" in box:
        raise box["err"]
    return box["out"]


def _vjp_on_tensors(node, grads, sum_arrays, create_graph, ctx):
    """An op node's vjp rule run on tensors (no plan on arrays served it) with ``ctx`` (the node, or its copy
    that needs fewer gradients: graph_walk.ctx), its result count checked."""
    if sum_arrays:
        _as_tensors(grads)
    if create_graph and node.op.saves_out:      # the saved outputs carry this node's history
        in_grads = vjp_through_outputs(node, grads, ctx)
    else:
        in_grads = node.op.vjp(ctx, *grads)
    if len(in_grads) != len(node.next_functions):
        raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                           f"(expected {len(node.next_functions)}, got {len(in_grads)})")
    return in_grads


def run(outputs, root_grads, retain_graph, create_graph, inputs, accumulate, capture_hooks=False):
    """Execute the backward graph.  Returns the captured gradients for ``inputs`` (when given)."""
    reentrant = _REENTRANT
    depth = reentrant.depth
    if depth >= MAX_REENTRANT_DEPTH:
        return _run_in_fresh_thread(outputs, root_grads, retain_graph, create_graph, inputs, accumulate,
                                    capture_hooks)
    # capture points: (node, output_nr) -> input positions
    # (plain loops, no comprehensions: each would be one more Python frame per backward call)
    captures = {}
    cap_nodes = set()
    if inputs is not None:
        for k, t in enumerate(inputs):
            e = root_edge(t)
            captures.setdefault(e, []).append(k)
            cap_nodes.add(e[0])

    root_edges = []
    for t in outputs:
        gf = t.grad_fn if type(t) is Tensor and t._base is None else None
        root_edges.append((gf, t._out_nr) if gf is not None else root_edge(t))
    narrowed = None
    if inputs is None:
        # plain backward: every reachable node runs; count dependencies while discovering them
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
        needed = execute = deps.keys()
    else:
        deps, needed, execute, narrowed = _walk.toward(root_edges, cap_nodes, OpNode)

    buffers = {}
    for (n, nr), g in zip(root_edges, root_grads):
        if n not in needed:
            continue
        buf = buffers.get(n)
        if buf is None:
            buf = buffers[n] = [None] * max(1, len(getattr(n, "out_meta", ())))
        buf[nr] = g if buf[nr] is None else buf[nr] + g

    captured = [None] * (len(inputs) if inputs is not None else 0)
    prev_running = _RUNNING.nodes
    _RUNNING.nodes = deps        # register_multi_grad_hook asks which tensors this backward reaches
    reentrant.depth = depth + 1
    # ready nodes: a heap of (-seq, node), torch's order (AccumulateGrad's seq is above all; seqs are unique)
    ready = []
    for n in needed:
        if deps[n] == 0:
            ready.append((-n.seq, n))
    if len(ready) > 1:
        heapify(ready)
    prev_mode = grad_mode.STATE.grad_enabled
    grad_mode.STATE.grad_enabled = create_graph
    # torch runs backward under the thread-local state captured when it started: saved-tensor hooks that a
    # hook enters or exits during backward do not outlive it (nor leak into later code)
    prev_hooks = _SH.stack[:]
    # the common case (no profiler, no trace, no anomaly mode) calls the vjp directly, not via _apply_node
    plain = _PROF.active is None and _TR.active is None and not _AN.enabled
    capturing = bool(cap_nodes)
    # gradients that meet are summed on their arrays in a plain first-order backward (nothing to record)
    sum_arrays = plain and not create_graph and _FWD.active is None
    every = inputs is None           # plain backward: every discovered node executes
    acc_type = AccumulateGrad
    node_type = OpNode          # an op's node (subclasses with their own apply take _apply_node)
    # a leaf's accumulator with nothing to run but the accumulation (no hooks, no profiler, not a capture point) runs
    # as soon as its last gradient arrives, not through the heap: AccumulateGrad's seq is above every op node's, so
    # the heap would pop it next anyway, and such accumulators, each into its own leaf, cannot tell their order
    quick_acc = accumulate and _PROF.active is None and not capturing
    leaves = None
    try:
        while ready:
            node = heappop(ready)[1]
            grads = buffers.pop(node, None)
            if grads is None:       # no gradient reached it (undefined): one None per output
                grads = [None] * (len(getattr(node, "out_meta", None) or ()) or 1)
            # hooks registered on the tensors this node produced; retain_grad (they see tensors)
            if node._x is not None and node.tensor_hooks:     # (node.NodeExtras: None for most nodes)
                if sum_arrays:
                    _as_tensors(grads)
                for nr, hooks in node.tensor_hooks.items():
                    if hooks:           # a sibling output with no gradient gets its hooks called with None (torch)
                        grads[nr] = _run_tensor_hooks(hooks, grads[nr])
            if node._x is not None and node.retain_grad_refs:
                if sum_arrays:
                    _as_tensors(grads)
                _retain(node, grads, create_graph)
            if type(node) is acc_type:
                var = node.variable
                g = grads[0]
                grads = None        # g's one reference here: accumulate takes over a buffer nothing else holds
                if type(g) is _ndarray:
                    if accumulate and not var._hooks and (node._x is None or not node._pre_hooks and not node._hooks) \
                            and _PROF.active is None and not (capturing and node in cap_nodes):
                        _accumulate_array(var, g)       # the gradient array into .grad: no Tensor in between
                        g = None
                        if node.post_hooks:
                            _run_post_accumulate_hooks(node, var)
                        continue
                    g = _wrap(g)
                if g is not None and var._hooks:
                    g = _run_tensor_hooks(var._hooks, g)
                if capturing and node in cap_nodes:
                    if capture_hooks and g is not None and node._pre_hooks:   # backward(inputs=leaf) runs the
                        g = _run_pre_hooks(node, (g,))[0]                  # node (its hooks); grad() does not
                    for k in captures.get((node, 0), ()):
                        captured[k] = g
                    if capture_hooks and g is not None and node._hooks:
                        for fn in list(node._hooks.values()):
                            fn((), (g,))
                elif accumulate and g is not None:
                    if node._pre_hooks:     # the AccumulateGrad node's own hooks run when it runs (not for grad())
                        g = _run_pre_hooks(node, (g,))[0]
                    had_grad = var._grad is not None
                    if _PROF.active is not None:
                        with _PROF.active.range("AccumulateGrad", [var.shape]):
                            _accumulate(var, g, create_graph)
                    else:
                        _accumulate(var, g, create_graph)
                    if node.post_hooks:
                        _run_post_accumulate_hooks(node, var)
                    if node._hooks:     # post hooks last: (grad_inputs=(), grad_outputs); a first gradient IS
                        gout = (g if had_grad else var._grad,)     # the new .grad in torch (its buffer is taken)
                        for fn in list(node._hooks.values()):
                            fn((), gout)
                continue
            if capturing and node in cap_nodes:
                if sum_arrays:
                    _as_tensors(grads)
                for nr in range(len(grads)):
                    for k in captures.get((node, nr), ()):
                        captured[k] = grads[nr]
            if not every and node not in execute:
                if capture_hooks and node._pre_hooks and capturing and node in cap_nodes:
                    # backward(inputs=non-leaf): the node's pre hooks run after the capture, which they do not
                    # change (torch); grad() runs only the tensor hooks
                    _run_pre_hooks(node, tuple(_as_tensors(grads) if sum_arrays else grads))
                continue
            g = grads[0]
            if g is not None and len(grads) == 1 and plain and type(node) is node_type and (
                    node._x is None or node._pre_hooks is None and node._hooks is None):
                # the common op node: one cotangent, no hooks (Node.apply and check_saved inlined; node._x: the
                # NodeExtras record, None for most nodes, tested before its properties)
                if node._freed or node._x is not None and node.packed is not None or _nd._LAST_DETACH > node.seq:
                    node.check_saved()
                else:
                    saved = node.versions
                    if saved:
                        ins = node.inputs
                        for i, v in saved:
                            if ins[i]._vc[0] != v:
                                node.check_saved()      # (raises)
                    saved = node.out_versions
                    if saved:
                        ins = node.outputs
                        for i, v in saved:
                            if ins[i]._vc[0] != v:
                                node.check_saved()
                    saved = ins = None
                in_grads = None
                ctx = node if narrowed is None or node not in narrowed else _walk.ctx(node, narrowed)
                if sum_arrays and _FWD.active is None:
                    # the rule on arrays (pullback_plans.py): its results have one entry per input
                    in_grads = _plans.pullback(ctx, [g if type(g) is _ndarray else g._data])
                if in_grads is None:
                    in_grads = _vjp_on_tensors(node, grads, sum_arrays, create_graph, ctx)
                ctx = None
                g = None
            elif g is None and type(node) is node_type and (len(grads) == 1 or all(g is None for g in grads)):
                # no gradient reached this op's node (a custom backward returned None): its inputs get none
                # either, as torch's undefined gradients (no zeros are made up and accumulated)
                in_grads = (None,) * len(node.next_functions)
            elif plain and type(node) is node_type and (node._x is None
                                                        or node._pre_hooks is None and node._hooks is None):
                # Node.apply inlined: zeros for outputs with no cotangent, saved-value checks, the vjp rule
                if len(grads) != 1 or grads[0] is None:
                    for i, g in enumerate(grads):
                        if g is None and node.out_meta[i][1] is not None:
                            grads[i] = zeros_for(node.out_meta[i])
                if node.versions or node.out_versions or node._freed or node._x is not None and node.packed is not None:
                    node.check_saved()      # (a node that saved nothing has nothing to check)
                in_grads = None
                ctx = node if narrowed is None or node not in narrowed else _walk.ctx(node, narrowed)
                if sum_arrays and _FWD.active is None:
                    # the rule on arrays (first order: no graph to build, no tangents to carry, pullback_plans.py);
                    # its result arrays go to the children's buffers as they are (wrapped only where a tensor is
                    # seen: hooks, captures, retained or accumulated gradients, a rule run on tensors)
                    if len(grads) == 1:
                        g = grads[0]
                        gs = [g if type(g) is _ndarray else g._data]
                    else:
                        gs = []
                        for g in grads:
                            gs.append(g if g is None or type(g) is _ndarray else g._data)
                    in_grads = _plans.pullback(ctx, gs)
                    gs = g = None
                if in_grads is None:
                    in_grads = _vjp_on_tensors(node, grads, sum_arrays, create_graph, ctx)
                ctx = None
            else:
                in_grads = _apply_node(node, _as_tensors(grads) if sum_arrays else grads, create_graph)
            if not retain_graph:
                if type(node) is node_type:     # Node.release inlined (an op's node does not override it)
                    node._freed = True
                    node.inputs = node.outputs = None
                    if node._x is not None:
                        node.packed = None
                else:
                    node.release()
            for (child, nr), g in zip(node.next_functions, in_grads):
                if child is None:
                    continue
                d = deps.get(child)
                if d is None:
                    continue
                if g is not None:
                    buf = buffers.get(child)
                    if buf is None:
                        if nr == 0 and len(child.out_meta) <= 1:
                            buffers[child] = [g]
                        else:
                            buf = buffers[child] = [None] * len(child.out_meta)
                            buf[nr] = g
                    else:
                        old = buf[nr]
                        if old is None:
                            buf[nr] = g
                        elif sum_arrays and type(old) is _ndarray and type(g) is _ndarray \
                                and old.dtype == g.dtype and old.shape == g.shape:
                            # add's impl on the arrays (no bind, no node); into the buffer's own array where
                            # nothing else holds it (no tensor, view or other buffer: this list, old, the count's
                            # argument), as torch's InputBuffer accumulates in place
                            if old.base is None and _getrefcount(old) <= 3 and old.ndim and old.flags.writeable:
                                _np_add(old, g, out=old)
                            else:
                                old = _np_add(old, g)
                                buf[nr] = old if type(old) is _ndarray else np.asarray(old)    # (0-d: a scalar)
                        elif sum_arrays:
                            buf[nr] = _sum(old, g)
                        else:
                            buf[nr] = old + g
                        old = None
                if d == 1:
                    if type(child) is acc_type and quick_acc and child._x is None and not child.post_hooks \
                            and not child.variable._hooks:
                        if leaves is None:
                            leaves = [child]
                        else:
                            leaves.append(child)
                    else:
                        heappush(ready, (-child.seq, child))
                deps[child] = d - 1
            in_grads = g = buf = None   # (a gradient's references are its consumers' buffers alone)
            if leaves is not None:
                for child in leaves:
                    grads = buffers.get(child)
                    if grads is not None and type(grads[0]) is _ndarray:
                        del buffers[child]
                        g = grads[0]
                        grads = None    # (g's one reference here: accumulate takes over a buffer nothing else holds)
                        _accumulate_array(child.variable, g)
                        g = None
                    elif grads is not None:     # a tensor: AccumulateGrad's general path, next off the heap
                        heappush(ready, (-child.seq, child))
                    # (no gradient reached it: nothing to accumulate, as when the node runs)
                leaves = grads = None
    finally:
        grad_mode.STATE.grad_enabled = prev_mode
        _SH.stack[:] = prev_hooks
        _RUNNING.nodes = prev_running
        reentrant.depth = depth
    return captured


def _apply_node(node, grads, create_graph):
    if node._pre_hooks:
        grads = list(_run_pre_hooks(node, tuple(grads)))
    given = tuple(grads)        # what the post hooks see as grad_outputs: before zeros are made up (torch)
    if node.materialize():
        ref = next((g for g in grads if g is not None), None)     # zeros go where the other grads are
        for i, g in enumerate(grads):
            if g is None and node.out_meta[i][1] is not None:
                z = zeros_for(node.out_meta[i])
                grads[i] = z if ref is None else ref._same_device(z)
    prof = _PROF.active
    tr = _TR.active
    if tr is not None:   # traced backward: its eqns carry the location of the forward op they differentiate
        with tr.located(node.loc, node.name(), node.stack):
            start = len(tr.eqns)
            out = _apply_node_inner(node, grads, prof, given)
            tr.mark_results(start, [(i, g._data) for i, g in enumerate(out)
                                    if g is not None and type(g._data) is not np.ndarray],
                            node.name(), node.loc, node.stack)
            return out
    return _apply_node_inner(node, grads, prof, given)


def _apply_node_inner(node, grads, prof, given=None):
    if _AN.enabled:
        out = anomaly.apply_node(node, grads, prof)
    elif prof is not None:
        with prof.range(node.name(), [m[0] for m in node.out_meta]):
            out = node.apply(grads)
    else:
        out = node.apply(grads)
    if len(out) != len(node.next_functions):
        raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients (expected "
                           f"{len(node.next_functions)}, got {len(out)})")
    if _AN.enabled and _AN.check_nan:
        anomaly.check_finite(node, out)
    if node._hooks:
        for fn in list(node._hooks.values()):
            r = fn(tuple(out), given if given is not None else tuple(grads))
            if r is not None:
                out = tuple(r)
    return out
