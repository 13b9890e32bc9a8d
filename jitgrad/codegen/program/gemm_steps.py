"""The BLAS steps of the CPU target (the ``gemm`` emitter, ``lowering.emits``): a 2-D float matmul becomes a
call of SciPy's ``?gemm`` (``ir/ops/blas.py``) with its 13 arguments in the table, transposed operands passed by
flag rather than copied (N-D matmuls: ``batched_gemm.py``); and an SGD-style update of the GEMM's result, or the
sum of two GEMMs' results, is folded into the GEMM (``fold_into_gemm``, which the fused-group emitter asks first).

Kept apart from ``layout.py`` because it is the one place that knows BLAS's column-major calling convention.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Lit, Var
from ...ir.symbolic import hint_of
from ...ir.plan import Group
from .batched_gemm import KERNEL_TRIANGLE, batched_gemm, row_blocks, split_rows
from ..kernels import small_gemm
from .layout import Program, Step
from ..lowering import emits


@emits("gemm", target="cpu")
def gemm(prog: Program, e) -> bool:
    """A matmul as one ``?gemm`` call (or a batched one); False: not BLAS's (ints, empty): a host step."""
    a, b = e.ins
    out = e.outs[0]
    if (a.aval.ndim > 2 or b.aval.ndim > 2) and out.aval.dtype.name in ("float32", "float64") \
            and a.aval.dtype is b.aval.dtype is out.aval.dtype:
        return batched_gemm(prog, e)
    if not (a.aval.ndim <= 2 and b.aval.ndim <= 2 and out.aval.dtype.name in ("float32", "float64")
            and a.aval.dtype is b.aval.dtype is out.aval.dtype):
        return False
    ash = a.aval.shape if a.aval.ndim == 2 else (1,) + a.aval.shape
    bsh = b.aval.shape if b.aval.ndim == 2 else b.aval.shape + (1,)
    m, k = ash
    n = bsh[1]
    if k == 0 or m == 0 or n == 0:
        return False

    def operand(v, shape2):
        p = prog.place(v)
        rows, cols = shape2
        if v.aval.ndim == 1:        # a vector is a contiguous row (left operand) or column (right operand)
            if p.strides[0] != 1 and p.shape[0] != 1:
                return operand_copy(v, shape2)
            st = (max(cols, 1), 1) if v is a else (1, 1)
        else:
            st = p.strides
        if st[1] == 1 and (st[0] >= max(1, cols) or rows == 1):
            return p, "N", max(st[0], cols, 1)          # row-major: column-major transposed, ld = row stride
        if st[0] == 1 and (st[1] >= max(1, rows) or cols == 1):
            return p, "T", max(st[1], rows, 1)          # a transposed view: BLAS transposes it for free
        return operand_copy(v, shape2)

    def operand_copy(v, shape2):
        p = prog.places.materialize(v, prog.place(v))
        return p, "N", max(shape2[1], 1)

    pa, ta, lda = operand(a, ash)
    pb, tb, ldb = operand(b, bsh)
    pc = prog.places.assign(out)
    if split_rows(prog, e, pa, (ta, lda), pb, (tb, ldb), pc, m, n, k):
        return True
    if row_blocks(prog, e, pa, (ta, lda), pb, (tb, ldb), pc, m, n, k):
        return True
    # C (m x n, row-major) = A B  <=>  C^T (n x m, column-major) = B^T A^T: B goes first
    f32 = out.aval.dtype.name == "float32"
    one = np.array([1.0], np.float32 if f32 else np.float64).tobytes()
    zero = np.array([0.0], np.float32 if f32 else np.float64).tobytes()
    offs = {}
    for name, data in (("ta", tb.encode()), ("tb", ta.encode()), ("m", n), ("n", m), ("k", k), ("alpha", one),
                       ("lda", ldb), ("ldb", lda), ("beta", zero), ("ldc", max(n, 1))):
        offs[name] = prog.put_param(data)
    work = float(hint_of(m * n * k))    # multiply-adds
    tri = KERNEL_TRIANGLE.get(prog.triangles.get(out)) if a.aval.ndim == b.aval.ndim == 2 else None
    routine = small_gemm.routine("sgemm" if f32 else "dgemm", work, tri)
    if tri and routine.startswith("small_") and all(type(x) is int for x in (m, n, k)):
        work = float(small_gemm.macs(tri, n, m, k, "sgemm" if f32 else "dgemm"))         # the kernel's own (its m is C's columns)
    st = Step("gemm", label=("matmul (small kernel" + (f", {tri})" if tri else ")")) if routine.startswith("small_")
              else "matmul (BLAS)", eqn=e,
              shapes=[list(a.aval.shape), list(b.aval.shape)], scope=e.scope)
    st.work, st.gemm = work, routine
    st.block = len(prog.table)
    c_slot = None
    for item in ("ta", "tb", "m", "n", "k", "alpha", pb, "lda", pa, "ldb", "beta", pc, "ldc"):
        if isinstance(item, str):
            prog.param_slots.append((len(prog.table), offs[item]))
            prog.table.append(0)
        else:
            slot = prog.slot_addr(item)
            if item is pc:
                c_slot = slot
    prog.add(st)
    prog.gemm_outs[out] = (st, prog.places.n, offs["alpha"], offs["beta"], c_slot)
    return True


def fold_update_into_gemm(prog: Program, g: Group) -> bool:
    """``p - c * (A @ B)`` (or ``p + c * (A @ B)``) written into the state ``p`` it updates, as one GEMM with
    ``alpha = -c, beta = 1`` into ``p``'s own buffer: an SGD update of a weight whose gradient nothing else
    reads costs no pass over memory of its own. Only when no step between the GEMM and this group reads
    ``p`` (or a view of it), so moving the write earlier changes nothing another step sees."""
    places = prog.places
    if g.reduce is not None or g.scatters or len(g.eqns) != 2 or len(g.outputs) != 1:
        return False
    m, u = g.eqns
    o = g.outputs[0]
    if m.op.name != "mul" or u.op.name not in ("sub", "add") or o is not u.outs[0] or o not in places.inplace:
        return False
    mo = m.outs[0]
    lits = [x for x in m.ins if isinstance(x, Lit) and np.ndim(x.value) == 0]
    grads = [x for x in m.ins if isinstance(x, Var) and x in prog.gemm_outs]
    if len(lits) != 1 or len(grads) != 1:
        return False
    d, c = grads[0], float(lits[0].value)
    p_var = prog.graph.inputs[places.inplace[o]]
    a0, a1 = u.ins
    if not ((a0 is p_var and a1 is mo) or (u.op.name == "add" and a0 is mo and a1 is p_var)):
        return False
    st, n_gemm, alpha_off, beta_off, c_slot = prog.gemm_outs[d]
    if n_gemm <= places.last_raising:      # the GEMM would write p before a step that may still raise
        return False
    pp = places[p_var]
    n = places.n
    dt_ = o.aval.dtype
    if (places.last_use.get(d) != n or any(x is d for x in prog.graph.outputs) or not pp.contiguous()
            or tuple(pp.shape) != tuple(d.aval.shape) or d.aval.dtype is not dt_ or p_var.aval.dtype is not dt_
            or not places.writes_in_place(o, g)):
        return False
    for v, pv in places.items():
        if pv.root is pp.root:
            if any(n_gemm <= k < n or (k == n and v is not p_var) for k in places.uses.get(v, ())):
                return False
    alpha = -c if u.op.name == "sub" else c
    sc = np.float32 if dt_.name == "float32" else np.float64
    prog.params[alpha_off:alpha_off + 8] = np.array([alpha], sc).tobytes().ljust(8, b"\0")
    prog.params[beta_off:beta_off + 8] = np.array([1.0], sc).tobytes().ljust(8, b"\0")
    prog.move_slot(c_slot, pp)      # (a split GEMM's blocks, its last one too, are at their offsets from it)
    st.label += " + update"
    st.state_write = True
    st.rows = None                  # (its C moved: round_groups' rows were the old one's)
    places.state_place(o)
    return True


def _one_add(places, g):
    """The add eqn of a group that is one plain add (no reduction, gather, scatter or check) with one output, not
    written in place; else None."""
    if g.reduce is not None or g.scatters or g.gathers or len(g.eqns) != 1 or len(g.outputs) != 1:
        return None
    (u,) = g.eqns
    o = g.outputs[0]
    if u.op.name != "add" or o is not u.outs[0] or u.check is not None or len(u.ins) != 2 or o in places.inplace:
        return None
    return u


def fold_sum_into_gemm(prog: Program, g: Group) -> bool:
    """``A B + C D`` (a group of one add of two GEMMs' results that nothing else reads) as the later GEMM
    accumulating into the earlier one's result (``beta = 1``): the tangent of a parameter's gradient in forward
    over reverse (``h_t^T g + h^T g_t``), or a weight used twice, costs no loop of its own.  Into a fresh array when
    the sum is a graph output (both GEMMs write there), else into the earlier GEMM's buffer, which becomes the
    sum's.  Only when nothing reads either product's buffer between the earlier GEMM and this group."""
    places = prog.places
    u = _one_add(places, g)
    if u is None:
        return False
    o = g.outputs[0]
    d1, d2 = u.ins
    if not (isinstance(d1, Var) and isinstance(d2, Var) and d1 is not d2 and d1 in prog.gemm_outs
            and d2 in prog.gemm_outs):
        return False
    n = places.n
    for d in (d1, d2):
        if d.aval.shape != o.aval.shape or d.aval.dtype is not o.aval.dtype or places.uses.get(d) != [n] \
                or any(x is d for x in prog.graph.outputs) or prog.gemm_outs[d][0].eqn.check is not None:
            return False
    first, second = sorted((d1, d2), key=lambda d: prog.gemm_outs[d][1])
    st1, n1, _, _, slot1 = prog.gemm_outs[first]
    st2, _, _, beta_off, slot2 = prog.gemm_outs[second]
    p1, p2 = places[first], places[second]
    for p in (p1, p2):
        if p.offset != 0 or not p.contiguous() or tuple(p.shape) != tuple(o.aval.shape):
            return False
    # no other value over either buffer (a view of a product) is read from the earlier GEMM on
    for v, pv in places.items():
        if (pv.root is p1.root or pv.root is p2.root) and v is not d1 and v is not d2 \
                and any(n1 <= k <= n for k in places.uses.get(v, ())):
            return False
    if any(x is o for x in prog.graph.outputs):
        dst = places.assign(o)
        if dst.root.kind != "fresh":
            return False
        prog.move_slot(slot1, dst)
    else:
        dst = places[o] = p1
        places.hold(p1.root, o)
    prog.move_slot(slot2, dst)      # (a split GEMM's blocks, its last one too, are at their offsets from it)
    st1.rows = st2.rows = None      # (C moved, the second adds into it: no shared round, round_groups.py)
    sc = np.float32 if o.aval.dtype.name == "float32" else np.float64
    prog.params[beta_off:beta_off + 8] = np.array([1.0], sc).tobytes().ljust(8, b"\0")
    st2.label += " + accumulate"
    return True


# A bias folded into its product's GEMM (C filled with the bias, then beta = 1) keeps the loop's bits while the
# product's depth is summed in one pass of OpenBLAS's kernel (acc + bias rounded once, as the loop's add): up to
# this many terms, below every kernel's depth block (GEMM_Q), where C would take partial sums in turn
BIAS_FOLD_MAX_K = 256


def fold_bias_into_gemm(prog: Program, g: Group) -> bool:
    """``A @ B + b`` (a group of one add of a GEMM's result that nothing else reads and an input broadcast to it:
    a linear layer's bias where no later loop takes it in, attention's qkv) as the bias copied into C before the
    GEMM and the GEMM accumulating onto it (``beta = 1``): the copy replaces OpenBLAS's zeroing of C, so the add's
    pass over the result (a read and a write) goes.  Not for a result the caller gets: the add's loop writes it
    straight into the output array, where C would be copied there after the GEMM (a pass more, not one fewer)."""
    places = prog.places
    u = _one_add(places, g)
    if u is None:
        return False
    o = g.outputs[0]
    ds = [x for x in u.ins if isinstance(x, Var) and x in prog.gemm_outs]
    if len(ds) != 1:
        return False
    d = ds[0]
    b = u.ins[1] if u.ins[0] is d else u.ins[0]
    st, n_gemm, _, beta_off, c_slot = prog.gemm_outs[d]
    e = st.eqn
    n = places.n
    if b is d or not (isinstance(b, Lit) or b in prog.graph.inputs) or b.aval.dtype is not o.aval.dtype \
            or d.aval.shape != o.aval.shape or d.aval.dtype is not o.aval.dtype or places.uses.get(d) != [n] \
            or any(x is d or x is o for x in prog.graph.outputs) or e.check is not None \
            or type(e.ins[0].aval.shape[-1]) is not int or e.ins[0].aval.shape[-1] > BIAS_FOLD_MAX_K:
        return False
    pc = places[d]
    if pc.offset != 0 or not pc.contiguous() or tuple(pc.shape) != tuple(o.aval.shape):
        return False
    for v, pv in places.items():        # no other value over C's buffer is read from the GEMM on
        if pv.root is pc.root and v is not d and any(n_gemm <= k <= n for k in places.uses.get(v, ())):
            return False
    fill = prog.copy_step(prog.place(b), pc, "copy (bias)")
    if fill.kind != "kernel":
        prog.steps.remove(fill)
        return False
    prog.steps.remove(fill)
    prog.steps.insert(prog.steps.index(st), fill)
    places[o] = pc
    places.hold(pc.root, o)
    sc = np.float32 if o.aval.dtype.name == "float32" else np.float64
    prog.params[beta_off:beta_off + 8] = np.array([1.0], sc).tobytes().ljust(8, b"\0")
    st.label += " + bias"
    st.rows = None                  # (C filled before, added into: no shared round, round_groups.py)
    return True


def fold_into_gemm(prog: Program, g: Group) -> bool:
    """Whether fusion group ``g`` rides a GEMM before it (an SGD update, the sum of two products, a bias) instead
    of running a loop of its own."""
    return fold_update_into_gemm(prog, g) or fold_sum_into_gemm(prog, g) or fold_bias_into_gemm(prog, g)


__all__ = ["gemm", "fold_update_into_gemm", "fold_sum_into_gemm", "fold_bias_into_gemm", "fold_into_gemm",
           "BIAS_FOLD_MAX_K"]
