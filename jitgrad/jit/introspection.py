"""What a compiled function shows about itself: ``f.ir``, ``f.fusion_plan``, ``f.source``, ``f.ptx``
(mixed into ``CompiledFunction``; each traces, or reuses, the entry for the given arguments)."""
from __future__ import annotations

from ..ir.display import plan_listing, straight_line_listing
from ..ir.graph import graphs_listing
from ..ir.listing import Listing
from ..ir.passes import fusion_plan, run_pipeline
from ..runtime import grad_mode
from ..runtime.tensor import Tensor
from ..tracer import flatten

EAGER_NOTE = "# this signature runs eagerly (fullgraph=False fallback)"


def _is_tensor(x):
    return isinstance(x, Tensor)


def _backward_graph(e, args, kwargs):
    """The backward graph the transpose pass derives for the entry's outputs, w.r.t. the inputs and captured
    tensors that require grad (None when nothing does, or grad mode is off)."""
    if not grad_mode.STATE.grad_enabled:
        return None
    leaves, _ = flatten((args, kwargs), _is_tensor)
    uniq = list({id(t): t for t in leaves}.values())
    dyn = [None] * (len(e.arg_floats) + len(e.dynamic))     # dynamic floats: graph inputs that need no grad
    wrt = tuple(i for i, t in enumerate(uniq + dyn + [c.ref() for c in e.captured])
                if t is not None and t.requires_grad)
    if not wrt:
        return None
    plan = e.gf.plan(wrt)
    return run_pipeline(plan.transposed.bwd) if plan.diff_outs else None


class Introspection:
    """``CompiledFunction``'s views of its graphs, kernels and generated code."""

    def ir(self, *args, **kwargs) -> Listing:
        """The printed SSA IR for these arguments: the forward graph and, when inputs require grad, the
        backward graph the transpose pass derives for the outputs' grad_fn.  A :class:`~jitgrad.ir.listing.Listing`:
        a ``str`` (the text) that a notebook shows as a table with each eqn's user line."""
        e = self._entry_for(args, kwargs)
        if e.eager:
            return Listing(EAGER_NOTE)
        name = getattr(self.fn, "__name__", "compiled")
        parts = [(e.graph, name)]
        bwd = _backward_graph(e, args, kwargs)
        if bwd is not None:
            parts.append((bwd, name + "_backward"))
        return graphs_listing(parts)

    def source(self, *args, **kwargs) -> Listing:
        """The program that runs for these arguments.  With the reference interpreter backend this is the
        straight-line listing of primitive calls the interpreter executes; with ``numba``, the fusion plan and
        the generated module.  A ``str`` (a :class:`~jitgrad.ir.listing.Listing`) with a notebook view."""
        e = self._entry_for(args, kwargs)
        if e.eager:
            return Listing(EAGER_NOTE)
        if self._on_cuda(args, kwargs):
            from .graph_code import cuda_graph
            gf = e.gf
            return Listing(cuda_graph(e.graph, gf.writes).source)
        if self.backend == "numba":
            from .graph_code import compiled_graph
            gf = e.gf    # the CompiledGraph the calls run (same write-backs and options): nothing built twice
            return Listing(compiled_graph(e.graph, gf.writes, gf.parallel, gf.disk_cache, gf.background).source)
        return straight_line_listing(e.graph, getattr(self.fn, "__name__", "compiled"))

    def launches(self, *args, **kwargs) -> list:
        """The steps a compiled CPU call with these arguments runs, in order: one ``Launch(label, kind, parallel,
        threads)`` each (``codegen/program/cpu.CompiledGraph.launches``: whether it runs on the worker pool, the
        most threads it runs on at once).  Empty when the call runs eagerly, on CUDA or on the interpreter."""
        e = self._entry_for(args, kwargs)
        if e.eager or self.backend != "numba" or self._on_cuda(args, kwargs):
            return []
        from .graph_code import compiled_graph
        gf = e.gf
        return compiled_graph(e.graph, gf.writes, gf.parallel, gf.disk_cache, gf.background).launches()

    def _on_cuda(self, args, kwargs) -> bool:
        if self.device is not None:
            return self.device.type == "cuda"
        leaves, _ = flatten((args, kwargs), _is_tensor)
        return any(t.is_cuda for t in leaves)

    def ptx(self, *args, cc=(9, 0), **kwargs) -> dict:
        """The PTX of every CUDA kernel the call with these arguments runs (forward and, when inputs require
        grad, backward), built by NVVM for compute capability ``cc``; needs numba-cuda with NVVM
        (``pip install 'jitgrad[cuda]'``), no GPU.  Returns ``{kernel name: PTX text}``."""
        from ..codegen.gpu.cuda import GPU_CONFIG
        from .graph_code import cuda_graph
        e = self._entry_for(args, kwargs)
        if e.eager:
            raise RuntimeError(EAGER_NOTE)
        graphs = [(e.graph, e.gf.writes)]
        bwd = _backward_graph(e, args, kwargs)
        if bwd is not None:
            graphs.append((bwd, ()))
        out = {}
        for g, writes in graphs:
            out.update(cuda_graph(g, writes, GPU_CONFIG).ptx(cc))
        return out

    def fusion_plan(self, *args, **kwargs) -> Listing:
        """How the step's graph for these arguments (the first graph ``f.ir`` prints) is cut into fused loop
        kernels and single steps: the plan the Numba backend generates code for, whatever the backend.  Each
        group shows its ops, iteration shape and the user's lines it covers.  A ``str`` (a
        :class:`~jitgrad.ir.listing.Listing`) with a notebook view."""
        e = self._entry_for(args, kwargs)
        if e.eager:
            return Listing(EAGER_NOTE)
        return plan_listing(fusion_plan(e.graph))
