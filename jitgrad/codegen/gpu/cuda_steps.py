"""The CUDA target's steps, as emitters registered per step kind (``lowering.emits``, target ``"cuda"``): fusion
groups (grid-stride loops, block-tree reductions), views, the tiled GEMM, ``cat`` as copies into slabs, gathers,
scatters, scans, and the host step (an op's NumPy impl on host copies, uploaded back).  Each takes the
``cuda_launches.Launches`` being built and one plan entry; the kernels' text is ``cuda_kernels.py``'s.
"""
from __future__ import annotations

import numpy as np

from ...ir.plan import Group
from . import cuda_kernels as K
from .cuda_launches import Launches
from ..lowering import emits
from ..places import Place, bcast_strides, c_strides, coalesce


@emits("fused", target="cuda")
def fused_group(cg: Launches, g: Group):
    """A fusion group as a grid-stride loop; closed by a reduction: a block-tree reduction per (row, part), long
    rows finished by a second kernel."""
    if g.gathers or g.scatters:
        raise ValueError(f"{g.name}: the CUDA target has no loads or stores by an index inside loops: plan with "
                         "fusion_plan(..., indexed=False)")
    op = cg.places.group(g, reuse=True)
    red, shape, size, ro, out_places = g.reduce, op.shape, op.size, op.red_out, op.out_places
    args = []
    for p, s_ in zip(op.in_places, op.in_strides):
        args += cg.operand(p, s_)
    kern = K.gen_group(g, len(shape), op.red_axes, cg.check_ids, cg.cfg["tpb"], cg.cfg["settle"])
    checks = [cg.check_ids[e] for e in g.eqns if e in cg.check_ids and e.outs[0].aval.dtype.is_floating_point]
    tail = (["err"] + checks) if checks else []
    if kern.guards:         # zero integer divisors: the index-error array, one step id per guard
        tail += ["ierr"]
        for e in kern.guards:
            tail += cg.index_step(e)
    label = f"{g.name} {g.lines()}".strip()
    scope = g.all_eqns[0].scope
    if red is None:
        for p, s_ in zip(out_places, op.out_strides):
            args += cg.operand(p, s_)
        cg.launch(kern, size, [size] + shape + args + tail, label, scope).state_write = op.in_place
    else:
        M = int(np.prod(red.outs[0].aval.shape)) if red.outs[0].aval.shape else 1
        Kn = size // M if M else 0
        tpb = cg.cfg["tpb"]
        P = 1 if Kn <= 4 * tpb else min(-(-Kn // (4 * tpb)), 64)
        rp = out_places[ro]
        target = rp if P == 1 else cg.places.scratch((M * P,), rp.dtype)
        for j, (p, s_) in enumerate(zip(out_places, op.out_strides)):
            args += cg.operand(target if j == ro else p, s_)
        blocks = max(1, min(M * P, 65535))
        st = cg.launch(kern, size, [M, Kn, P] + shape + args + tail, label, scope, grid=blocks, block=tpb)
        st.state_write = op.in_place
        if size == 0:   # an empty reduction: the identity everywhere, computed by a host step
            cg.steps.remove(st)
            return _host_fill(cg, red, rp)
        if P > 1:
            fin = K.gen_finish(red.op.name, rp.dtype, tpb, cg.cfg["settle"])
            cg.launch(fin, M, [M, P, target.root, rp.root, rp.offset], f"finish {red.op.name}", scope,
                      grid=max(1, min(M, 65535)), block=tpb)
        if red in cg.check_ids:
            cg.check(red, rp)


def _host_fill(cg: Launches, e, place):
    """An empty reduction: the identity everywhere, by the op's NumPy impl."""
    cg.host_step(e, [cg.place(v) for v in e.ins], (place,), e.op.name)


@emits("view", target="cuda")
def view(cg: Launches, e) -> bool:
    """A view op: a place over its input, no launch; False when it is not a view of its input (a host step)."""
    return cg.places.view(e) is not None     # not a view of its input: the op runs (a host step)


@emits("gemm", target="cuda")
def gemm(cg: Launches, e):
    """A matmul as the tiled shared-memory GEMM (broadcast batch dims)."""
    a, b = e.ins
    out = e.outs[0]
    if not (out.aval.dtype.is_floating_point and a.aval.dtype is b.aval.dtype and out.aval.size > 0):
        return False        # the tiled GEMM takes floats of one dtype: NumPy's matmul on the host
    pa, pb = cg.place(a), cg.place(b)
    ash, bsh = a.aval.shape, b.aval.shape
    # 1-D operands: a row vector on the left, a column on the right (stride 0 along the added dim)
    a_sh, a_st = ((1,) + ash, (0,) + pa.strides) if len(ash) == 1 else (ash, pa.strides)
    b_sh, b_st = (bsh + (1,), pb.strides + (0,)) if len(bsh) == 1 else (bsh, pb.strides)
    M, Kd, N = a_sh[-2], a_sh[-1], b_sh[-1]
    batch = tuple(np.broadcast_shapes(a_sh[:-2], b_sh[:-2]))
    nb = len(batch)

    def bstrides(sh, st):
        lead = nb - (len(sh) - 2)
        return [0] * lead + [0 if sh[k] == 1 else st[k] for k in range(len(sh) - 2)]
    pc = cg.places.assign(out)
    if pc.offset != 0:
        raise AssertionError("gemm output must be a fresh buffer")
    tile = cg.cfg["tile"]
    B = int(np.prod(batch)) if batch else 1
    args = [M, N, Kd] + list(batch) + [pa.root, pa.offset] + bstrides(a_sh, a_st) + [a_st[-2], a_st[-1]]
    args += [pb.root, pb.offset] + bstrides(b_sh, b_st) + [b_st[-2], b_st[-1], pc.root]
    grid = (-(-N // tile), -(-M // tile), B)
    cg.launch(K.gen_gemm(out.aval.dtype, nb, tile, cg.cfg["settle"]), M * N * B, args, "matmul (tiled GEMM)", e.scope,
              grid=grid, block=(tile, tile))


@emits("cat", target="cuda")
def cat(cg: Launches, e):
    """Each input copied (and cast) into its slab of the output."""
    out = e.outs[0]
    axis = e.params["axis"] % out.aval.ndim
    po = cg.places.assign(out)
    start = 0
    for v in e.ins:
        n = v.aval.shape[axis]
        if v.aval.size:
            dst = Place(po.root, po.offset + start * po.strides[axis], v.aval.shape, po.strides, po.dtype)
            cg.copy(cg.place(v), dst, "cat (copy)")
        start += n


@emits("gather", target="cuda")
def gather(cg: Launches, e):
    """``x[i0, i1, ...]`` with one integer tensor per dim: a bounds-checked gather kernel."""
    x, idx = e.ins[0], e.ins[1:]
    out = e.outs[0]
    it = out.aval.shape
    po = cg.places.assign(out)
    px = cg.place(x)
    n = int(np.prod(it)) if it else 1
    kern = K.gen_gather(x.aval.dtype, [v.aval.dtype for v in idx], len(it))
    args = [n] + list(it)
    for v in idx:
        args += cg.operand(cg.place(v), bcast_strides(cg.place(v), it))
    args += cg.operand(po, c_strides(it)) + [px.root, px.offset] + list(px.strides) + list(px.shape)
    cg.launch(kern, n, args + ["ierr", *cg.index_step(e, n)], "gather", e.scope)


@emits("scatter", target="cuda")
def scatter(cg: Launches, e):
    """``x[i0, i1, ...] = v`` (or ``+=``, with atomics): the base copied into the output, then a scatter kernel."""
    base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
    out = e.outs[0]
    po = cg.places.assign(out)
    cg.copy(cg.place(base), po, "copy (index_put)")
    it = tuple(np.broadcast_shapes(*[i.aval.shape for i in idx])) if idx else ()
    n = int(np.prod(it)) if it else 1
    kern = K.gen_scatter(out.aval.dtype, v.aval.dtype, [i.aval.dtype for i in idx], len(it),
                         bool(e.params["accumulate"]))
    pv = cg.place(v)
    args = [n] + list(it) + cg.operand(pv, bcast_strides(pv, it))
    for iv in idx:
        args += cg.operand(cg.place(iv), bcast_strides(cg.place(iv), it))
    args += [po.root, po.offset] + list(po.strides) + list(po.shape)
    cg.launch(kern, n, args + ["ierr", *cg.index_step(e, n)], "scatter", e.scope)


@emits("scan", target="cuda")
def scan(cg: Launches, e):
    """cumsum / cumprod: a thread per point of the other dims, serial along the axis (both read and written
    through strides: a flipped or transposed operand costs nothing)."""
    x, out = e.ins[0], e.outs[0]
    ax = e.params["axis"]
    px = cg.place(x)
    po = cg.places.assign(out)
    outer = tuple(d for k, d in enumerate(x.aval.shape) if k != ax)
    xst = [s for k, s in enumerate(px.strides) if k != ax]
    ost = [s for k, s in enumerate(po.strides) if k != ax]
    shape, (xst, ost) = coalesce(outer, [xst, ost])
    n = int(np.prod(outer)) if outer else 1
    kern = K.gen_scan(e.op.name, x.aval.dtype, out.aval.dtype, len(shape), bool(e.params.get("reverse")))
    args = [n] + list(shape) + cg.operand(px, xst) + cg.operand(po, ost)
    args += [x.aval.shape[ax], px.strides[ax], po.strides[ax]]
    cg.launch(kern, n, args, e.op.name, e.scope)


@emits("host", target="cuda")
def host(cg: Launches, e):
    """An op with no CUDA kernel: its NumPy impl on host copies of the inputs, the result uploaded."""
    cg.host_step(e, [cg.place(v) for v in e.ins], [cg.places.assign(o) for o in e.outs], f"{e.op.name} (host)")


__all__ = ["fused_group", "view", "gemm", "cat", "gather", "scatter", "scan", "host"]
