"""Loops that store by an index (scatter-adds: ``index_add``, the transpose of ``x[:, idx]``) on the pool (issue 32,
B11's force scatter), counted and compared, never timed.

A fused loop with scatters splits its outermost axis between the pool's workers only when each position of that
axis adds into rows of every scatter's output that no other position reaches (``loop_steps.scatters_own_rows``,
proven from the strides): then no two chunks write one element and each element takes its adds in the serial
order, so the results are the same bits at every thread count.  An index along the split axis (a 1-D output,
or an output whose leading axes are size 1) keeps the loop serial.  Standalone scatter steps (``scatter_add``,
``index_put`` with an index per axis) are not fused loops: they stay serial.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.codegen.program.loop_steps import scatters_own_rows
from jitgrad.ir import settings
from jitgrad.ir.symbolic import ShapeEnv

RNG = np.random.default_rng(11)
V2 = RNG.standard_normal((64, 4096)).astype(np.float32)     # 262,144 elements: past the forced pool's 4,096
IDX = RNG.integers(0, 7, 4096)
IDX_NEG = RNG.integers(-4096, 4096, 512)                     # a gather's negative indices wrap, as torch's
IDX_SHORT = RNG.integers(0, 7, 64)
FULL_IDX = RNG.integers(0, 7, (64, 4096))


def _pool():
    return settings.default_threads() > 1 and workpool.available()


def _compiled(fn, parallel, backend="numba"):
    kw = {} if backend == "interpret" else {"parallel": parallel, "background": False}
    return jg.compile(fn, backend=backend, **kw)


def _scatter_launches(f, *args):
    what = lambda ln: ln.label.split(" ")[0]        # (the label's lines name this file: "...scatter.py:40")
    return [ln for ln in f.launches(*args) if "index_put" in what(ln) or "scatter" in what(ln)]


# (name, function of v, whether its scatter loop may split)
CASES = [
    ("index_add along dim 1", lambda v: jg.zeros((64, 7)).index_add(1, jg.tensor(IDX), v.sin() * 3.0), True),
    ("index_add along dim 1 of a 3-D output",
     lambda v: jg.zeros((8, 8, 7)).index_add(2, jg.tensor(IDX), v.reshape(8, 8, 4096).cos()), True),
    ("index_add of transposed values",
     lambda v: jg.zeros((64, 7)).index_add(1, jg.tensor(IDX_SHORT), (v[:, :64].t() * 2.0).exp()), True),
    ("index_add of a 1-D output: the index runs along the split axis",
     lambda v: jg.zeros((7,)).index_add(0, jg.tensor(IDX), v[0].sin()), False),
    ("index_add into (1, 7): the leading axis is size 1, the split one is indexed",
     lambda v: jg.zeros((1, 7)).index_add(1, jg.tensor(IDX), v[:1].sin()), False),
    ("index_put of a 1-D output by a 2-D index",
     lambda v: jg.zeros((7,)).index_put((jg.tensor(IDX.reshape(64, 64)),), v[:, :64].sin(), accumulate=True),
     False),
]


@pytest.mark.parametrize("name,fn,splits", CASES, ids=[c[0] for c in CASES])
def test_which_scatter_loops_go_on_the_pool(name, fn, splits):
    """The rule, by the launch records of a forced-parallel compile (``parallel=True``: every loop of 4,096 elements
    or more that may split does): a fused scatter loop splits exactly when its split axis is not an indexed axis of
    any scatter's output; its bits are the serial compile's, eager's to rounding."""
    v = jg.tensor(V2)
    par, ser = _compiled(fn, True), _compiled(fn, False)
    got, want = par(v).numpy(), ser(v).numpy()
    (ln,) = [x for x in _scatter_launches(par, v) if x.kind == "fused"]
    assert ln.parallel == (splits and _pool()), (name, ln)
    assert not any(x.parallel for x in _scatter_launches(ser, v))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, fn(v).numpy(), rtol=2e-5, atol=2e-4)


def test_a_split_scatter_loop_wakes_the_pool_and_keeps_the_serial_bits():
    """B11's form (``x[:, i] - x[:, j]``, its transpose two scatter-adds into (molecules, atoms, 3) closing one loop):
    at sizes past the pool's threshold the forces' loop runs on the pool (one round a call at two workers), with
    the serial loop's bits call after call, and equal to eager mode and the interpreter."""
    B, A = 16, 32
    i, j = (jg.tensor(a) for a in np.nonzero(~np.eye(A, dtype=bool)))
    x0 = RNG.standard_normal((B, A, 3)).astype(np.float32)

    def forces(x):
        d = x[:, i] - x[:, j]
        e = ((d * d).sum(-1) + 0.5).sqrt().cos().sum()
        return jg.autograd.grad(e, x, create_graph=True)[0]
    x = jg.tensor(x0, requires_grad=True)
    par, ser, itp = _compiled(forces, True), _compiled(forces, False), _compiled(forces, None, "interpret")
    want = forces(x).detach().numpy()
    first = par(x).detach().numpy()
    (ln,) = [x_ for x_ in _scatter_launches(par, x) if x_.kind == "fused"]
    assert "index_put,index_put" in ln.label and ln.parallel == _pool()
    r0 = workpool.rounds()
    again = par(x).detach().numpy()
    assert workpool.rounds() - r0 >= (1 if _pool() else 0)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, ser(x).detach().numpy())
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(itp(x).detach().numpy(), want, rtol=1e-4, atol=1e-4)


SCATTERS = [
    ("index_add", lambda v: jg.zeros((64, 7), dtype=v.dtype).index_add(1, jg.tensor(IDX), v.tanh())),
    ("index_put accumulate, fused", lambda v: jg.zeros((64, 7), dtype=v.dtype).index_put(
        (jg.tensor(np.arange(64)[:, None]), jg.tensor(IDX[None, :])), v.tanh(), accumulate=True)),
    ("scatter_add", lambda v: jg.zeros((64, 7), dtype=v.dtype).scatter_add(1, jg.tensor(FULL_IDX), v.tanh())),
    ("grad of a gather", lambda v: jg.autograd.grad((v[:, jg.tensor(IDX_NEG)] ** 2).sum(), v)[0]),
]


@pytest.mark.parametrize("name,fn", SCATTERS, ids=[c[0] for c in SCATTERS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_programs_compiled_equal_eager_and_the_interpreter(name, fn, dtype):
    """index_add, index_put with accumulate, scatter_add and a gather's gradient at sizes that reach the pool:
    the forced-parallel compile, the serial one, eager mode and the interpreter agree (the two compiles bit for
    bit)."""
    v0 = V2.astype(dtype)
    v = jg.tensor(v0, requires_grad=name.startswith("grad"))
    want = fn(v).detach().numpy()
    par, ser = _compiled(fn, True), _compiled(fn, False)
    got = par(jg.tensor(v0, requires_grad=v.requires_grad)).detach().numpy()
    np.testing.assert_array_equal(got, ser(jg.tensor(v0, requires_grad=v.requires_grad)).detach().numpy())
    itp = _compiled(fn, None, "interpret")(jg.tensor(v0, requires_grad=v.requires_grad)).detach().numpy()
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_allclose(itp, want, **tol)


def _facts(shape, out_strides, indexed, out_shape):
    g = types.SimpleNamespace(scatters=[object()], gathers=[])
    place = types.SimpleNamespace(shape=out_shape, strides=tuple(
        int(np.prod(out_shape[k + 1:], dtype=np.int64)) if all(type(d) is int for d in out_shape[k + 1:])
        else _prod(out_shape[k + 1:]) for k in range(len(out_shape))))
    return g, types.SimpleNamespace(shape=shape, out_places=[place], out_strides=[out_strides], indexed=[indexed])


def _prod(ds):
    p = 1
    for d in ds:
        p = p * d
    return p


def test_the_proof_from_strides():
    """``scatters_own_rows`` on the coalesced operands: B11's loop (8 molecules, 992 pairs, 3; its output (8, 32, 3)
    indexed along the atoms) owns its rows; a split along the indexed axis (stride 0 there), a slab one position
    overruns (the next row's elements reachable), a non-contiguous output: not proven.  Symbolic sizes: proven when
    the margin is the same constant for every size (atoms A: ``3A - 1 - 3 (A - 1) - 2 = 0``), never by the hint."""
    assert scatters_own_rows(*_facts([8, 992, 3], [96, 0, 1], (3, 32), (8, 32, 3)))
    assert not scatters_own_rows(*_facts([992, 3], [0, 1], (3, 32), (32, 3)))            # split axis indexed
    assert not scatters_own_rows(*_facts([8, 992, 3], [96, 0, 1], (3, 33), (8, 32, 3)))  # reaches the next row
    g, op = _facts([8, 992, 3], [96, 0, 1], (3, 32), (8, 32, 3))
    op.out_places[0].strides = (1, 8, 256)                                              # not C-contiguous
    assert not scatters_own_rows(g, op)
    env = ShapeEnv()
    A, B = env.symbol(32, "A"), env.symbol(8, "B")
    assert scatters_own_rows(*_facts([B, A * (A - 1), 3], [3 * A, 0, 1], (3, A), (B, A, 3)))
    # a margin that depends on the sizes (rows of 2A atoms, a position reaching A of them: 3A): true for every
    # size, but not proven this way, so serial
    assert not scatters_own_rows(*_facts([B, A * (A - 1), 3], [6 * A, 0, 1], (3, A), (B, 2 * A, 3)))


def test_an_index_out_of_range_in_a_split_scatter_loop_raises_like_eager():
    """A bad index met by any chunk of a split scatter loop raises eager mode's error after the launch (the loop
    records it; every chunk runs to its end), and a good call afterwards gives the serial bits."""
    v = jg.tensor(V2)

    def f(v, k):
        return jg.zeros((64, 7)).index_add(1, k, v.sin())
    par, ser = _compiled(f, True), _compiled(f, False)
    good = jg.tensor(IDX)
    want = ser(v, good).numpy()
    np.testing.assert_array_equal(par(v, good).numpy(), want)
    assert [x.parallel for x in _scatter_launches(par, v, good) if x.kind == "fused"] == [_pool()]
    bad = IDX.copy()
    bad[4000] = 9           # (every row reads it: each chunk meets it and records the same error)
    with pytest.raises(Exception) as eager:
        f(v, jg.tensor(bad))
    with pytest.raises(type(eager.value), match="index 9 is out of bounds for dimension 1 with size 7"):
        par(v, jg.tensor(bad))
    np.testing.assert_array_equal(par(v, good).numpy(), want)
