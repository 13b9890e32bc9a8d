"""Transformer kernels (issue 18, item 4) on the Numba backend: compiled == eager == interpreter, and the
structure of the compiled code (counted steps and kernels, never time).

- batched / N-D matmul as BLAS from the driver: rows folded into one GEMM for a shared right operand (``Linear``
  on [B, T, C]), otherwise a ``bgemm`` step over strided batch entries (attention's ``q @ k.mT``);
- row reductions (softmax's and LayerNorm's sums, max/min) accumulated in a register;
- ``index_put`` with a basic index (the backward of ``split`` and slicing) and row gather/scatter (an embedding
  and its backward) as native kernels;
- AdamW with ``clip_grad_norm_``: one fused pass per parameter, the clip as sums of squares;
- a small GPT step with the whole call in the njit driver (no Python driver, no host step).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F

pytestmark = pytest.mark.filterwarnings("error::jitgrad.codegen.program.cpu.CodegenWarning")


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _cg(f):
    from jitgrad.jit.graph_code import compiled_graph
    (entries,) = f._cache.values()
    return compiled_graph(entries[0].graph, entries[0].gf.writes)


def _kinds(cg):
    out = {}
    for s in cg.program.steps:
        out[s.kind] = out.get(s.kind, 0) + 1
    return out


def _labels(cg):
    return [s.label for s in cg.program.steps]


def _three_ways(f, *args):
    """f compiled on Numba, on the interpreter, and eagerly; returns (compiled fn, [results per mode])."""
    fc = jg.compile(f, backend="numba", background=False)
    fi = jg.compile(f, backend="interpret")
    res = [fc(*args), fi(*args), f(*args)]
    assert fc.stats["compiled_calls"] == 1 and fi.stats["interpreted_calls"] == 1
    return fc, [[np.asarray(t.detach().numpy()) for t in (r if isinstance(r, tuple) else (r,))] for r in res]


def _close(res, tol):
    for a, b, c in zip(*res):
        np.testing.assert_allclose(a, c, rtol=tol, atol=tol)
        np.testing.assert_allclose(b, c, rtol=tol, atol=tol)


CASES = [((2, 3, 4, 5), (2, 3, 5, 6)), ((6, 8, 5), (5, 7)), ((3, 4, 5), (1, 5, 6)), ((4, 5), (3, 5, 6)),
         ((2, 1, 4, 5), (3, 5, 2)), ((1, 4, 5), (5, 2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_matmul_values_and_grads_in_blas_steps(dtype):
    rng = np.random.default_rng(0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for sa, sb in CASES:
        a = jg.tensor(rng.standard_normal(sa).astype(dtype), requires_grad=True)
        b = jg.tensor(rng.standard_normal(sb).astype(dtype), requires_grad=True)

        def f(a, b):
            y = a @ b
            ga, gb = jg.autograd.grad((y * y).sum(), [a, b])
            return y, ga, gb

        fc, res = _three_ways(f, a, b)
        _close(res, tol)
        cg = _cg(fc)
        k = _kinds(cg)
        assert cg.nopython and "py" not in k, (sa, sb, k)
        assert k.get("gemm", 0) + k.get("bgemm", 0) == 3, (sa, sb, k)     # forward and both grads


def test_strided_operands_read_in_place():
    """Heads of a [B, T, 3C] projection, transposed: the bgemm reads them by leading dimension, no copy."""
    rng = np.random.default_rng(1)
    x = jg.tensor(rng.standard_normal((2, 5, 12)).astype(np.float32))

    def f(x):
        q, k, v = x.split(4, dim=2)
        q = q.view(2, 5, 2, 2).transpose(1, 2)
        k = k.view(2, 5, 2, 2).transpose(1, 2)
        v = v.view(2, 5, 2, 2).transpose(1, 2)
        return (q @ k.transpose(-2, -1)) @ v

    fc, res = _three_ways(f, x)
    _close(res, 1e-5)
    cg = _cg(fc)
    assert _kinds(cg) == {"bgemm": 2}, _kinds(cg)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heads_written_in_the_order_their_reader_permutes_them(dtype):
    """Attention's ``(att @ v).transpose(1, 2).reshape(B, T, C)`` and, backward, the heads' gradients on their way
    into the [B, T, 3C] projection's gradient: each bgemm writes its products straight into the permuted order
    (C's leading dimension and batch strides), so the reshapes are free views: no layout copy at all, and the
    results are the same bits as the copied ones."""
    rng = np.random.default_rng(3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    x = jg.tensor(rng.standard_normal((2, 5, 12)).astype(dtype), requires_grad=True)
    w = jg.tensor(rng.standard_normal((5, 12)).astype(dtype))

    def f(x, w):
        q, k, v = x.split(4, dim=2)
        q, k, v = (t.view(2, 5, 2, 2).transpose(1, 2) for t in (q, k, v))
        y = ((q @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 4)
        (g,) = jg.autograd.grad((y * w[:, :4]).sum(), [x])
        return y, g

    fc, res = _three_ways(f, x, w)
    _close(res, tol)
    labels = _labels(_cg(fc))
    assert labels.count("matmul (batched, BLAS)") + labels.count("matmul (batched, small kernel)") == 6, labels
    assert "copy (layout)" not in labels, labels
    # with the permute's result read twice, the product keeps its own order and the reshape copies
    fc2 = jg.compile(lambda x: ((x @ x.mT).transpose(0, 1).reshape(-1), (x @ x.mT)[0].sum()), backend="numba",
                     background=False)
    xs = jg.tensor(rng.standard_normal((3, 4, 2)).astype(dtype))
    for a, b in zip(fc2(xs), ((xs @ xs.mT).transpose(0, 1).reshape(-1), (xs @ xs.mT)[0].sum())):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_product_read_transposed_is_computed_transposed(dtype):
    """``(a @ b).transpose(-2, -1)`` read as a contiguous array (reshaped): C would be column-major in that order,
    so the bgemm computes ``b^T a^T`` row-major into it (operands swapped, read transposed by flag): no layout
    copy, and eager's values."""
    rng = np.random.default_rng(4)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    a = jg.tensor(rng.standard_normal((3, 2, 5, 4)).astype(dtype))
    b = jg.tensor(rng.standard_normal((3, 2, 4, 6)).astype(dtype))

    def f(a, b):
        return (a @ b).transpose(-2, -1).reshape(3, 2, 30) * 2.0

    fc = jg.compile(f, backend="numba", background=False)
    np.testing.assert_allclose(fc(a, b).numpy(), f(a, b).numpy(), rtol=tol, atol=tol)
    labels = _labels(_cg(fc))
    assert "copy (layout)" not in labels, labels
    assert labels.count("matmul (batched, BLAS)") + labels.count("matmul (batched, small kernel)") == 1, labels


def test_linear_on_3d_is_one_gemm_each_way():
    """x @ W.T on [B, T, C]: the batch folded into M (forward, input grad) and into K (weight grad)."""
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.standard_normal((3, 4, 6)).astype(np.float32), requires_grad=True)
    w = jg.tensor(rng.standard_normal((5, 6)).astype(np.float32), requires_grad=True)

    def f(x, w):
        y = F.linear(x, w)
        gx, gw = jg.autograd.grad(y.sum() + (y * y).sum(), [x, w])
        return y, gx, gw

    fc, res = _three_ways(f, x, w)
    _close(res, 1e-4)
    k = _kinds(_cg(fc))
    assert k.get("gemm") == 3 and "bgemm" not in k, k


def test_row_reductions_match_eager_with_nan_and_inf():
    x = np.random.default_rng(3).standard_normal((6, 33)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    x[4, 7] = -np.inf

    def f(t):
        return t.amax(dim=1), t.amin(dim=1), t.sum(dim=1), t.amax(dim=1, keepdim=True)

    fc, res = _three_ways(f, jg.tensor(x))
    for a, b, c in zip(*res):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_allclose(b, c, rtol=1e-5)
    src = fc.source(jg.tensor(x))
    # amax, amin (keepdim shares the kernel): a select and a NaN flag per row, over int32 keys (float32)
    assert src.count("acc = (acc if (int64(nans) == 0) else") == 2
    assert src.count("hacc = int32(") >= 4 and src.count("nans = int32((int64(nans) | ") == 2


def test_softmax_masked_forward_backward():
    rng = np.random.default_rng(4)
    x = jg.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True)
    mask = jg.tril(jg.ones(8, 8)).view(1, 1, 8, 8)

    def f(x):
        y = F.softmax(x.masked_fill(mask == 0, float("-inf")) * 0.5, dim=-1)
        (g,) = jg.autograd.grad((y * y.detach().cos()).sum(), [x])
        return y, g

    fc, res = _three_ways(f, x)
    _close(res, 1e-5)
    cg = _cg(fc)
    assert cg.nopython
    # the row sums accumulate in registers: no reduction writes its output inside the inner loop
    assert "store(p3, b3_0, p3[b3_0] +" not in fc.source(x)


def test_split_backward_and_basic_index_put_native():
    rng = np.random.default_rng(5)
    x = jg.tensor(rng.standard_normal((3, 4, 12)).astype(np.float32), requires_grad=True)

    def f(x):
        q, k, v = x.split(4, dim=2)
        loss = (q * 2 + k * k + v[:, -1:].exp()).sum() + x[1, ::2, 3].sum()
        (g,) = jg.autograd.grad(loss, [x])
        return g

    fc, res = _three_ways(f, x)
    _close(res, 1e-5)
    cg = _cg(fc)
    assert cg.nopython and "py" not in _kinds(cg)
    assert _labels(cg).count("index_put (region)") >= 3

    def h(a, b):
        a = a.clone()
        a[:, 1:3] = b
        a[0, ..., 2] += 1.0
        return a

    a = jg.tensor(rng.standard_normal((3, 4, 5)))
    b = jg.tensor(rng.standard_normal((3, 1, 5)))
    hc, res = _three_ways(h, a, b)
    _close(res, 0)
    assert _cg(hc).nopython


def test_embedding_rows_gather_scatter():
    rng = np.random.default_rng(6)
    w = jg.tensor(rng.standard_normal((7, 3, 2)).astype(np.float32), requires_grad=True)
    idx = jg.tensor(np.array([[1, 2, 1], [0, -1, 6]]))     # a repeated and a negative index

    def f(w, i):
        y = w[i]
        (g,) = jg.autograd.grad((y * y).sum(), [w])
        return y, g

    fc, res = _three_ways(f, w, idx)
    _close(res, 1e-6)
    cg = _cg(fc)
    assert cg.nopython and {"row gather", "row scatter"} <= set(_labels(cg))
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 7") as ei:
        fc(w, jg.tensor(np.array([[1, 2, 1], [0, 7, 6]])))
    assert "compiled code" in str(ei.value), fc.stats


def _adamw_setup():
    jg.manual_seed(0)
    model = jg.nn.Sequential(jg.nn.Linear(6, 8), jg.nn.GELU(), jg.nn.Linear(8, 3))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = jg.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                         lr=1e-2, betas=(0.9, 0.95))

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        jg.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return model, step


def test_adamw_with_clipping_one_pass_per_parameter():
    rng = np.random.default_rng(7)
    x = jg.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    y = jg.tensor(rng.integers(0, 3, 5))
    m_e, step_e = _adamw_setup()
    m_c, step_c = _adamw_setup()
    fc = jg.compile(step_c, backend="numba", background=False)
    for _ in range(4):
        le, lc = step_e(x, y), fc(x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5)
    for pe, pc in zip(m_e.parameters(), m_c.parameters()):
        np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-5, atol=1e-6)
    cg = _cg(fc)
    assert cg.nopython
    plan = fc.fusion_plan(x, y)
    upd = [ln for ln in str(plan).splitlines() if "sqrt,div,add,div,mul,sub" in ln]
    assert len(upd) == 4, plan          # one AdamW loop per parameter ...
    # ... with the clip scale in it: no loop of its own scales a gradient
    assert not [ln for ln in str(plan).splitlines() if "[mul]  over" in ln], plan
    assert "norm2" not in str(plan) and "cat" not in str(plan)
    assert fc.stats["compiled_calls"] == 4
    # the update is in place: each state is stored through the pointer it was loaded by, so LLVM vectorises the
    # loop with no runtime overlap check (which fails for equal pointers: B9's update ran scalar, ~8x the
    # vector loop's instructions)
    from jitgrad.codegen.kernels import ir_loops
    from jitgrad.codegen.native import llvm_build
    kernels = [s.kernel for s in cg.program.steps if s.kind == "kernel" and "sqrt,div,add,div,mul,sub" in s.label]
    assert kernels
    for k in kernels:
        module, _ = llvm_build._optimised(ir_loops.render(k.ir, k.key))
        text = str(module)
        assert "vector.body" in text and "vector.memcheck" not in text, k.label


def test_gpt_step_runs_in_the_njit_driver():
    """A small GPT step with B9's idioms (split heads, masked softmax, GELU MLP, LayerNorm, tied embeddings,
    cross_entropy, clip_grad_norm_, AdamW): compiled == eager, and every step native."""
    from test_gpt_training import L, T, VOCAB, make_gpt, make_optimizer, make_step

    def build():
        jg.manual_seed(0)
        model = make_gpt(jg, 0.0, False).double()
        return model, make_step(jg, model, model, make_optimizer(jg, model))

    rng = np.random.default_rng(8)
    xs = [(jg.tensor(rng.integers(0, VOCAB, (3, T))), jg.tensor(rng.integers(0, VOCAB, (3, T)))) for _ in range(3)]
    m_e, step_e = build()
    m_c, step_c = build()
    fc = jg.compile(step_c, backend="numba", background=False)
    for x, y in xs:
        np.testing.assert_allclose(fc(x, y).numpy(), step_e(x, y).numpy(), rtol=1e-10)
    for pe, pc in zip(m_e.parameters(), m_c.parameters()):
        np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-8, atol=1e-12)
    assert fc.stats["compiled_calls"] == len(xs)
    cg = _cg(fc)
    k = _kinds(cg)
    assert cg.nopython and "py" not in k and "pycopy" not in k, k
    assert k["bgemm"] == 6 * L      # per layer: q @ k.mT and att @ v, and two grads of each
    # the heads' products written in the order the next step reads them: no layout copy forward or backward
    assert "copy (layout)" not in _labels(cg), _labels(cg)
    assert math.isfinite(float(fc(*xs[0])))
