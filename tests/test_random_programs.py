"""Random programs over the op set (hypothesis): eager == compiled == central finite differences, for values,
first-order grads (``.backward()`` inside and ``autograd.grad`` outside) and second order (create_graph).

A program is 3-8 ops over 1-3 float64 inputs whose shapes broadcast together: unary elementwise ops kept in
safe domains (log and sqrt of ``x*x+1``, ...), binary ops with broadcasting, reductions with dim/keepdim,
reshape/transpose/unsqueeze/squeeze/expand, indexing, gathers along a dim by an index tensor (``x[:, idx]``,
negatives wrapping, and ``index_select``), ``index_add`` (repeated positions adding up), cat, softmax and matmul
wherever the shapes allow.  (Gathers and index_add's scatter-adds run as loads and stores inside the compiled
loops around them: ``ir/passes/fuse.py``.)
Values come from a drawn seed (not hypothesis floats), so no input sits on a kink.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jitgrad as jg

from compiled import assert_agree, assert_close_lists, evaluate, fd_grads, fd_hvp

UNARY = {
    "sin": lambda x: x.sin(),
    "cos": lambda x: x.cos(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "exp_tanh": lambda x: x.tanh().exp(),
    "log_sq1": lambda x: (x * x + 1).log(),
    "sqrt_sq1": lambda x: (x * x + 1).sqrt(),
    "rsqrt_sq1": lambda x: (x * x + 1).rsqrt(),
    "recip_sq1": lambda x: 1.0 / (x * x + 1),
    "neg": lambda x: -x,
    "square_half": lambda x: x * x * 0.5,
    "erf": lambda x: x.erf(),
    "scale_shift": lambda x: 2.0 - 0.5 * x,
    "pow3": lambda x: x ** 3 * 0.1,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div_safe": lambda a, b: a / (b * b + 1),
    "pow_safe": lambda a, b: (a * a + 1) ** (b.tanh()),
    "hypot": lambda a, b: (a * a + b * b + 1).sqrt(),
}
REDUCE = ("sum", "mean", "logsumexp", "var0")


def _bshape(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _mmshape(a, b):
    if len(a) == 0 or len(b) == 0:
        return None
    try:
        return np.matmul(np.zeros(a), np.zeros(b)).shape
    except ValueError:
        return None


@st.composite
def programs(draw, indexed=False):
    """``(input shapes, ops, outputs, seed)``; ``indexed``: ending in B11's pattern (a gather by index, elementwise
    ops on it, an index_add back), with at least one dim."""
    base = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1 if indexed else 0, max_size=3))
    n_in = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_in):
        drop = draw(st.integers(0, len(base)))
        s = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d for d in base[drop:])
        shapes.append(s)
    vals = list(shapes)     # shapes of the values so far (inputs first)
    ops = []
    for _ in range(draw(st.integers(3, 8))):
        i = draw(st.integers(0, len(vals) - 1))
        s = vals[i]
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "shape", "matmul",
                                     "softmax", "index", "cat", "gather", "index_add"]))
        new = None
        if kind == "binary":
            cands = [j for j in range(len(vals)) if _bshape(s, vals[j]) is not None]
            j = draw(st.sampled_from(cands))
            op = ("binary", draw(st.sampled_from(sorted(BINARY))), i, j)
            new = _bshape(s, vals[j])
        elif kind == "reduce" and len(s) > 0:
            name = draw(st.sampled_from(REDUCE))
            dim = draw(st.one_of(st.none(), st.integers(0, len(s) - 1)))
            keep = draw(st.booleans())
            op = ("reduce", name, i, dim, keep)
            if dim is None:
                new = (1,) * len(s) if keep else ()
            else:
                new = tuple(1 if k == dim else d for k, d in enumerate(s)) if keep else s[:dim] + s[dim + 1:]
        elif kind == "shape":
            how = draw(st.sampled_from(["flatten", "permute", "unsqueeze", "squeeze", "expand", "reshape_rev"]))
            op = ("shape", how, i)
            if how == "flatten":
                new = (int(np.prod(s)),)
            elif how == "permute":
                new = s[::-1]
            elif how == "unsqueeze":
                new = (1,) + s
            elif how == "squeeze":
                new = tuple(d for d in s if d != 1)
            elif how == "expand":
                new = (2,) + s
            else:
                new = s[::-1]
        elif kind == "matmul":
            cands = [j for j in range(len(vals)) if _mmshape(s, vals[j]) is not None]
            if cands:
                j = draw(st.sampled_from(cands))
                op = ("matmul", i, j)
                new = _mmshape(s, vals[j])
        elif kind == "softmax" and len(s) > 0:
            op = ("softmax", i, draw(st.integers(0, len(s) - 1)), draw(st.booleans()))
            new = s
        elif kind == "index" and len(s) > 0:
            if s[-1] >= 2 and draw(st.booleans()):
                op = ("slice_last", i)
                new = s[:-1] + (s[-1] - 1,)
            else:
                op = ("index0", i)
                new = s[1:]
        elif kind == "gather" and len(s) > 0:
            dim = draw(st.integers(0, len(s) - 1))
            select = draw(st.booleans())        # index_select (no negatives) or x[:, idx] (negatives wrap)
            lo = 0 if select else -s[dim]
            idx = tuple(draw(st.lists(st.integers(lo, s[dim] - 1), min_size=1, max_size=4)))
            op = ("gather", i, dim, idx, select)
            new = s[:dim] + (len(idx),) + s[dim + 1:]
        elif kind == "index_add" and len(s) > 0:
            dim = draw(st.integers(0, len(s) - 1))
            m = draw(st.integers(1, 3))
            idx = tuple(draw(st.lists(st.integers(0, m - 1), min_size=s[dim], max_size=s[dim])))
            op = ("index_add", i, dim, m, idx, draw(st.booleans()))
            new = s[:dim] + (m,) + s[dim + 1:]
        elif kind == "cat" and len(s) > 0:
            op = ("cat", i)
            new = s[:-1] + (2 * s[-1],)
        if new is None:         # not applicable to this value: a unary op instead
            op = ("unary", draw(st.sampled_from(sorted(UNARY))), i)
            new = s
        ops.append(op)
        vals.append(tuple(new))
    if indexed:
        if not any(vals):           # every value 0-d: one of them unsqueezed
            ops.append(("shape", "unsqueeze", 0))
            vals.append((1,) + vals[0])
        i = draw(st.sampled_from([j for j in range(len(vals)) if len(vals[j]) > 0]))
        s = vals[i]
        dim = draw(st.integers(0, len(s) - 1))
        idx = tuple(draw(st.lists(st.integers(-s[dim], s[dim] - 1), min_size=1, max_size=4)))
        g = s[:dim] + (len(idx),) + s[dim + 1:]
        j = draw(st.sampled_from([j for j in range(len(vals)) if _bshape(g, vals[j]) == g] or [i]))
        back = tuple(draw(st.lists(st.integers(0, s[dim] - 1), min_size=len(idx), max_size=len(idx))))
        n = len(vals)
        ops += [("gather", i, dim, idx, False), ("unary", draw(st.sampled_from(sorted(UNARY))), n)]
        vals += [g, g]
        if j != i:
            ops.append(("binary", draw(st.sampled_from(["add", "mul", "sub"])), n + 1, j))
            vals.append(g)
        ops.append(("index_add", len(vals) - 1, dim, s[dim], back, draw(st.booleans())))
        vals.append(s)
    outs = [len(vals) - 1]
    if draw(st.booleans()) and len(vals) - 2 >= n_in:
        outs.append(draw(st.integers(n_in, len(vals) - 2)))
    seed = draw(st.integers(0, 2 ** 16))
    return shapes, ops, outs, seed


def build(ops, outs):
    def program(*xs):
        v = list(xs)
        for op in ops:
            k = op[0]
            if k == "unary":
                r = UNARY[op[1]](v[op[2]])
            elif k == "binary":
                r = BINARY[op[1]](v[op[2]], v[op[3]])
            elif k == "reduce":
                _, name, i, dim, keep = op
                x = v[i]
                d = tuple(range(x.ndim)) if dim is None else dim
                if name == "sum":
                    r = x.sum(dim=d, keepdim=keep)
                elif name == "mean":
                    r = x.mean(dim=d, keepdim=keep)
                elif name == "logsumexp":
                    r = x.logsumexp(dim=d, keepdim=keep)
                else:
                    r = x.var(dim=d, keepdim=keep, unbiased=False)
            elif k == "shape":
                _, how, i = op
                x = v[i]
                if how == "flatten":
                    r = x.reshape(-1)
                elif how == "permute":
                    r = x.permute(*reversed(range(x.ndim)))
                elif how == "unsqueeze":
                    r = x.unsqueeze(0)
                elif how == "squeeze":
                    r = x.squeeze()
                elif how == "expand":
                    w = jg.tensor([1.0, 0.5], dtype=x.dtype).reshape((2,) + (1,) * x.ndim)
                    r = x.expand(2, *x.shape) * w
                else:
                    r = x.reshape(tuple(reversed(x.shape)))
            elif k == "matmul":
                r = v[op[1]] @ v[op[2]]
            elif k == "softmax":
                _, i, dim, log = op
                r = v[i].log_softmax(dim) if log else v[i].softmax(dim)
            elif k == "slice_last":
                r = v[op[1]][..., 1:]
            elif k == "index0":
                r = v[op[1]][0]
            elif k == "gather":
                _, i, dim, idx, select = op
                ix = jg.tensor(np.array(idx, np.int64))
                r = v[i].index_select(dim, ix) if select else v[i][(slice(None),) * dim + (ix,)]
            elif k == "index_add":
                # into zeros or into a value of the program; the added values computed just before (a loop)
                _, i, dim, m, idx, onto = op
                x = v[i]
                shape = x.shape[:dim] + (m,) + x.shape[dim + 1:]
                base = jg.zeros(shape, dtype=x.dtype) if not onto else jg.ones(shape, dtype=x.dtype) * 0.5
                r = base.index_add(dim, jg.tensor(np.array(idx, np.int64)), (x * 1.5).tanh())
            elif k == "cat":
                x = v[op[1]]
                r = jg.cat([x, x.sin()], dim=-1)
            v.append(r)
        return tuple(v[i] for i in outs)
    return program


@given(programs())
def test_random_program_eager_compiled_finite_differences(prog):
    shapes, ops, outs, seed = prog
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    fn = build(ops, outs)
    want = evaluate(fn, arrays, "eager")
    got = evaluate(fn, arrays, "compiled", ws=want["ws"])
    assert_agree(got, want)
    fd = fd_grads(fn, arrays, want["ws"])
    scale = max(1.0, max(float(np.abs(g).max(initial=0)) for g in fd))
    assert_close_lists(want["grads"], fd, 1e-5, 1e-6 * scale, "eager grads vs finite differences")
    assert_close_lists(got["grads"], fd, 1e-5, 1e-6 * scale, "compiled grads vs finite differences")
    h = fd_hvp(fn, arrays, want["ws"])
    hscale = max(1.0, max(float(np.abs(x).max(initial=0)) for x in h))
    assert_close_lists(got["hvp"], h, 1e-4, 1e-5 * hscale, "compiled second order vs finite differences")
    assert_close_lists(got["inner_hvp"], h, 1e-4, 1e-5 * hscale, "compiled create_graph inside vs differences")


@settings(max_examples=6, deadline=None)
@given(programs(indexed=True))
def test_random_indexed_program_kernels_interpreter_eager(prog):
    """Programs ending in gathers by index and index_add (their loads and stores fused into the loops around
    them): the generated kernels == the reference interpreter == eager, values and grads, and second order
    against finite differences."""
    shapes, ops, outs, seed = prog
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    fn = build(ops, outs)
    want = evaluate(fn, arrays, "eager")
    assert_agree(evaluate(fn, arrays, "compiled", ws=want["ws"]), want)
    got = evaluate(fn, arrays, "numba", ws=want["ws"])
    assert_agree(got, want)
    h = fd_hvp(fn, arrays, want["ws"])
    hscale = max(1.0, max(float(np.abs(x).max(initial=0)) for x in h))
    assert_close_lists(got["hvp"], h, 1e-4, 1e-5 * hscale, "kernels' second order vs finite differences")


def test_strategy_covers_the_op_kinds():
    """The generator reaches every kind of op (a guard against a strategy that silently degenerates)."""
    seen = set()

    @settings(max_examples=200, database=None)
    @given(programs())
    def collect(prog):
        seen.update(op[0] for op in prog[1])
    collect()
    assert {"unary", "binary", "reduce", "shape"} <= seen
    assert len(seen & {"matmul", "softmax", "slice_last", "index0", "cat", "gather", "index_add"}) >= 4


@pytest.mark.parametrize("prog", [
    # fixed regressions/examples: (shapes, ops, outs, seed)
    ([(2, 3), (3,)], [("binary", "mul", 0, 1), ("matmul", 2, 1), ("unary", "log_sq1", 3)], [4], 1),
    ([(3, 1), (1, 3)], [("binary", "add", 0, 1), ("softmax", 2, 1, True), ("reduce", "logsumexp", 3, 0, False)],
     [4, 2], 2),
    ([(2, 2)], [("shape", "expand", 0), ("reduce", "var0", 1, 0, True), ("cat", 2), ("index0", 3)], [4], 3),
    # B11's pair features in small: gathers by index, differences, a norm, Gaussians; the forces' scatter-adds
    ([(2, 3, 3)], [("gather", 0, 1, (0, 1, 2, 1), False), ("gather", 0, 1, (1, 2, 0, -3), False),
                   ("binary", "sub", 1, 2), ("binary", "mul", 3, 3), ("reduce", "sum", 4, 2, False),
                   ("unary", "sqrt_sq1", 5), ("unary", "exp_tanh", 6), ("index_add", 7, 1, 3, (0, 2, 2, 1), False)],
     [8, 6], 4),
    ([(3, 2)], [("gather", 0, 0, (2, 2, 0), True), ("unary", "sin", 1), ("index_add", 2, 1, 3, (2, 2), True),
                ("index_add", 3, 0, 2, (1, 0, 1), False)], [4], 5),
])
def test_fixed_programs(prog):
    shapes, ops, outs, seed = prog
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    fn = build(ops, outs)
    want = evaluate(fn, arrays, "eager")
    got = evaluate(fn, arrays, "compiled", ws=want["ws"])
    assert_agree(got, want)
    assert_close_lists(got["grads"], fd_grads(fn, arrays, want["ws"]), 1e-5, 1e-6, "grads vs differences")
    if any(op[0] in ("gather", "index_add") for op in ops):     # loads and stores by index in the kernels too
        assert_agree(evaluate(fn, arrays, "numba", ws=want["ws"]), want)
