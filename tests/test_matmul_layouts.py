"""matmul over every operand layout (contiguous, transposed, sliced views; vectors; batched), eager and compiled,
values against NumPy and gradients against finite differences; the GEMMs and copies of a compiled MLP step,
counted; the BLAS kernel choice (issue 12)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import settings
from jitgrad.ir.ops import blas_library
from jitgrad.jit.graph_code import _COMPILED

R = np.random.default_rng(12)

# (name, (shape of a's base, view of it), (shape of b's base, view of it)); every product is defined
LAYOUTS = [
    ("nn", (6, 5), lambda a: a, (5, 4), lambda b: b),
    ("tn", (5, 6), lambda a: a.T, (5, 4), lambda b: b),
    ("nt", (6, 5), lambda a: a, (4, 5), lambda b: b.T),
    ("tt", (5, 6), lambda a: a.T, (4, 5), lambda b: b.T),
    ("row_slice", (12, 5), lambda a: a[::2], (5, 4), lambda b: b),
    ("col_slice", (6, 10), lambda a: a[:, 1::2], (5, 8), lambda b: b[:, ::2]),
    ("sliced_t", (10, 6), lambda a: a[::2].T[:, :5], (5, 9), lambda b: b[:, 2:6]),
    ("vec_mat", (5,), lambda a: a, (5, 4), lambda b: b),
    ("mat_vec_t", (6, 5), lambda a: a, (4, 5), lambda b: b.T[:, 1]),
    ("vec_vec_strided", (10,), lambda a: a[::2], (5,), lambda b: b),
    ("batched", (2, 6, 5), lambda a: a, (2, 5, 4), lambda b: b),
    ("batched_mT", (2, 5, 6), lambda a: _mT(a), (5, 4), lambda b: b),
]


def _mT(x):
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.mT


def _np_view(view, base):
    return view(base)


def _program(_):
    def f(*ts):
        outs = []
        for (_, _, va, _, vb), a, b in zip(LAYOUTS, ts[0::2], ts[1::2]):
            outs.append(va(a) @ vb(b))
        return tuple(outs)
    return f


def _inputs(dtype):
    arrs = []
    for _, sa, _, sb, _ in LAYOUTS:
        arrs += [R.standard_normal(sa).astype(dtype), R.standard_normal(sb).astype(dtype)]
    return arrs


def _expected(arrs):
    return [_np_view(va, a) @ _np_view(vb, b)
            for (_, _, va, _, vb), a, b in zip(LAYOUTS, arrs[0::2], arrs[1::2])]


@pytest.fixture(scope="module")
def compiled():
    return jg.compile(_program(None), backend="numba", background=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_match_numpy_eager_and_compiled(compiled, dtype):
    arrs = _inputs(dtype)
    want = _expected(arrs)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    eager = _program(None)(*[jg.tensor(a) for a in arrs])
    comp = compiled(*[jg.tensor(a) for a in arrs])
    for (name, *_), w, e, c in zip(LAYOUTS, want, eager, comp):
        assert e.numpy().dtype == c.numpy().dtype == dtype
        np.testing.assert_allclose(e.numpy(), w, **tol, err_msg=f"eager {name}")
        np.testing.assert_allclose(c.numpy(), w, **tol, err_msg=f"compiled {name}")
    assert compiled.stats["compiled_calls"] >= 1


def test_layout_gradients_gradcheck_eager_and_compiled(compiled):
    arrs = _inputs(np.float64)
    ts = [jg.tensor(a, requires_grad=True) for a in arrs]
    weights = [jg.tensor(R.standard_normal(np.shape(w))) for w in _expected(arrs)]

    def loss(fn):
        return lambda *xs: sum(((o * w).sum() for o, w in zip(fn(*xs), weights)), jg.tensor(0.0, dtype=jg.float64))

    assert jg.autograd.gradcheck(loss(_program(None)), ts)
    assert jg.autograd.gradcheck(loss(compiled), ts)
    # eager and compiled gradients agree with each other and with the hand-derived NumPy ones
    ge = jg.autograd.grad(loss(_program(None))(*ts), ts)
    gc = jg.autograd.grad(loss(compiled)(*ts), ts)
    for a, b in zip(ge, gc):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_transposed_view_gradcheck_second_order():
    a = jg.tensor(R.standard_normal((4, 3)), requires_grad=True)
    b = jg.tensor(R.standard_normal((5, 4)), requires_grad=True)
    fn = lambda a, b: ((a.T @ b.T) ** 2).sum()      # noqa: E731
    assert jg.autograd.gradgradcheck(fn, (a, b))


def _mlp_step(sizes, batch):
    """The B1 step (3 layers, relu, cross-entropy, SGD with grads cleared), small."""
    import jitgrad.nn.functional as F
    d, h, c = sizes
    x = jg.tensor(R.standard_normal((batch, d)).astype(np.float32))
    y = jg.tensor(R.integers(0, c, batch))
    params = [jg.tensor((R.standard_normal(s) * 0.1).astype(np.float32), requires_grad=True)
              for s in [(d, h), (h,), (h, h), (h,), (h, c), (c,)]]
    W1, b1, W2, b2, W3, b3 = params

    def step(x, y):
        a = jg.relu(x @ W1 + b1)
        a = jg.relu(a @ W2 + b2)
        loss = F.cross_entropy(a @ W3 + b3, y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                p -= 0.01 * p.grad
        for p in params:
            p.grad = None
        return loss.detach()
    return step, x, y


def test_compiled_mlp_step_counts_gemms_and_copies():
    step, x, y = _mlp_step((24, 16, 4), 8)
    f = jg.compile(step, backend="numba", background=False)
    before = set(_COMPILED.keys())
    f(x, y)
    cg = [v for k, v in _COMPILED.items() if k not in before][-1]
    steps = cg.program.steps
    gemms = [s for s in steps if s.kind == "gemm"]
    # 3 forward + 5 backward (dW3, dh2, dW2, dh1, dW1); no GEMM for the input batch's gradient (nothing reads it)
    assert len(gemms) == 8, [s.shapes for s in gemms]
    assert [24, 8] not in [s.shapes[1] for s in gemms]          # no g @ W1.T (dx: [8,16] @ [16,24])
    # transposed operands (h.T @ g, g @ W.T) go to BLAS by flag: no layout copies anywhere in the step
    copies = [s.label for s in steps if s.label.startswith("copy (layout)") or s.kind == "pycopy"]
    assert copies == [], copies
    # the parameter updates land in the parameters' own buffers (no write-back pass)
    assert cg.program.writes == []


def test_blas_kernel_choice_reported_and_respected():
    info = blas_library.info()
    assert set(info) == {"library", "corename", "before", "action"}
    flags = blas_library._cpu_flags()
    if info["library"] and blas_library._AVX512 <= flags and os.environ.get(blas_library.ENV_VAR, "auto") == "auto":
        assert info["corename"].lower() in blas_library._WIDE, info
    code = ("import jitgrad as jg; from jitgrad.ir.ops import blas_library; import numpy as np;"
            "c = jg.ones(64, 64) @ jg.ones(64, 64); assert float(c[0, 0]) == 64.0; print(blas_library.info()['action'])")
    env = dict(os.environ, JITGRAD_BLAS_CORETYPE="keep")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "keep" in out.stdout or "unknown BLAS" in out.stdout, out.stdout


def _run_steps(step_fn, n, compiled):
    step, x, y = step_fn()
    f = jg.compile(step, backend="numba", background=False) if compiled else step
    before = set(_COMPILED.keys())
    losses = [float(f(x, y)) for _ in range(n)]
    new = [v for k, v in _COMPILED.items() if k not in before]
    return losses, step, new


def _params_of(step):
    return [c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, list)][0]


def _folded_step_labels(sizes, batch):
    """Three SGD steps of the B1-shaped MLP, eager and compiled, checked equal; the GEMM steps' labels."""
    seed = int(R.integers(1 << 30))

    def make():
        global R
        R = np.random.default_rng(seed)
        return _mlp_step(sizes, batch)
    le, se, _ = _run_steps(make, 3, compiled=False)
    lc, sc, cgs = _run_steps(make, 3, compiled=True)
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    for a, b in zip(_params_of(sc), _params_of(se)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    return [s.label for s in cgs[-1].program.steps if s.kind in ("gemm", "bgemm")]


def test_sgd_update_folds_into_the_weight_gradient_gemm_and_matches_eager():
    labels = _folded_step_labels((24, 16, 4), 8)
    assert sum(x.endswith(" + update") for x in labels) == 3, labels       # W1, W2, W3: no update pass of their own


@pytest.mark.skipif(settings.default_threads() < 2, reason="needs a pool of two workers")
def test_sgd_update_folds_into_a_gemm_whose_rows_are_split_on_the_pool(monkeypatch):
    """B1's shape of step, big enough for the pool to split the weight gradients' rows (256 of them: the last
    block lower than the others): the update still rides each weight's GEMM (alpha = -lr, beta = 1 into the
    weight, block by block, the last one too), equal to eager."""
    from jitgrad.codegen.program import layout
    monkeypatch.setattr(layout, "POOL_GEMMS", True)
    labels = _folded_step_labels((256, 128, 64), 64)
    assert "matmul (BLAS, rows on the pool) + update" in labels, labels
    assert sum(x.endswith(" + update") for x in labels) == 3 and not any("last" in x for x in labels), labels


def test_update_not_folded_when_the_old_weight_is_read_after_its_gradient():
    def program(x, W):
        loss = (x @ W).tanh().sum()
        loss.backward()
        later = (W * W).sum()            # reads W's old value after W's gradient GEMM: the update must wait
        with jg.no_grad():
            W -= 0.1 * W.grad
        W.grad = None
        return later.detach()

    x = jg.tensor(R.standard_normal((5, 4)))
    W0 = R.standard_normal((4, 3))
    We, Wc = jg.tensor(W0.copy(), requires_grad=True), jg.tensor(W0.copy(), requires_grad=True)
    f = jg.compile(lambda x: program(x, Wc), backend="numba", background=False)
    before = set(_COMPILED.keys())
    for _ in range(2):
        e, c = program(x, We), f(x)
        labels = [s.label for v in [v for k, v in _COMPILED.items() if k not in before] for s in v.program.steps]
        assert not any(x.endswith(" + update") for x in labels), labels
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-12)
        np.testing.assert_allclose(Wc.detach().numpy(), We.detach().numpy(), rtol=1e-12)


def _gemm_program(fn, *args):
    """The values and the CPU program of ``jg.compile(fn, backend="numba")`` for ``args``."""
    from jitgrad.jit.graph_code import compiled_graph
    cf = jg.compile(fn, backend="numba", background=False)
    out = cf(*args)
    (entries,) = cf._cache.values()
    e = entries[0]
    return out, compiled_graph(e.graph, e.gf.writes, e.gf.parallel, e.gf.disk_cache, e.gf.background).program


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_of_two_products_accumulates_into_one_gemm(dtype):
    """``A B + C D``: the later GEMM accumulates into the earlier one's result (beta = 1), no add loop: into the
    output array itself when the sum is returned, into the earlier product's buffer when a later step reads it;
    not when a product is read elsewhere too.  Values against NumPy."""
    rng = np.random.default_rng(4)
    a, b, c, d, w = (rng.standard_normal(s).astype(dtype) for s in ((6, 5), (5, 7), (6, 3), (3, 7), (7, 2)))
    ta, tb, tc, td, tw = (jg.tensor(v) for v in (a, b, c, d, w))
    tol = dict(rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6 if dtype == np.float32 else 1e-13)

    out, prog = _gemm_program(lambda a, b, c, d: a @ b + c @ d.T.T, ta, tb, tc, td)
    np.testing.assert_allclose(out.numpy(), a @ b + c @ d, **tol)
    assert [s.kind for s in prog.steps] == ["gemm", "gemm"] and prog.steps[1].label.endswith(" + accumulate")

    out, prog = _gemm_program(lambda a, b, c, d, w: (a @ b + c @ d) @ w, ta, tb, tc, td, tw)
    np.testing.assert_allclose(out.numpy(), (a @ b + c @ d) @ w, **tol)
    assert [s.kind for s in prog.steps] == ["gemm", "gemm", "gemm"]

    out, prog = _gemm_program(lambda a, b, c, d: (a @ b + c @ d, (a @ b).sum()), ta, tb, tc, td)
    np.testing.assert_allclose(out[0].numpy(), a @ b + c @ d, **tol)
    np.testing.assert_allclose(float(out[1]), (a @ b).sum(), rtol=1e-5)
    assert not any(s.label.endswith(" + accumulate") for s in prog.steps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_of_two_split_products_accumulates_their_last_rows_too(dtype):
    """``A B + C D`` over GEMMs big enough for the pool's row blocks, 263 rows (odd: the last block lower than the
    others whatever OpenBLAS's unit, 1 on AVX-512 hosts; batched_gemm.split_rows): every block of the later
    product, the last one too, accumulates into the earlier one's, in the returned array and in the earlier
    product's buffer.  Values against NumPy."""
    rng = np.random.default_rng(5)
    a, b, c, d = (rng.standard_normal(s).astype(dtype) for s in ((263, 512), (512, 160), (263, 384), (384, 160)))
    w = rng.standard_normal((160, 3)).astype(dtype)
    ta, tb, tc, td, tw = (jg.tensor(v) for v in (a, b, c, d, w))
    tol = dict(rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-3 if dtype == np.float32 else 1e-11)
    ref = a.astype(np.float64) @ b + c.astype(np.float64) @ d
    out, prog = _gemm_program(lambda a, b, c, d: a @ b + c @ d, ta, tb, tc, td)
    np.testing.assert_allclose(out.numpy(), ref, **tol)
    labels = [s.label for s in prog.steps]
    if not any("on the pool" in x for x in labels):
        pytest.skip(f"not split here: {labels}")
    nb, h = prog.split_rows(263, 263 * 512 * 160, dtype)
    assert nb >= 2 and 263 - (nb - 1) * h != h, (nb, h)        # a last block of its own height
    assert [s.kind for s in prog.steps] == ["bgemm", "bgemm"], labels     # no add loop, no call for the rows left
    assert labels[1].endswith(" + accumulate"), labels
    out, prog = _gemm_program(lambda a, b, c, d, w: (a @ b + c @ d) @ w, ta, tb, tc, td, tw)
    np.testing.assert_allclose(out.numpy(), ref @ w, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_that_no_loop_takes_in_folds_into_its_gemm(dtype, monkeypatch, high_thresholds):
    """``(x @ W + b) @ V`` (attention's qkv: the biased product read by products only): C filled with the bias
    before the GEMM, which accumulates onto it (beta = 1), no add loop; bit for bit the program with the add loop
    (the fold turned off), and equal to NumPy.  Not folded past ``BIAS_FOLD_MAX_K`` terms, nor when the product
    is read elsewhere too."""
    from jitgrad.codegen.program import gemm_steps
    rng = np.random.default_rng(6)
    x, w, b, v = (rng.standard_normal(s).astype(dtype) for s in ((4, 32, 48), (48, 40), (40,), (40, 8)))
    tx, tw, tb, tv = (jg.tensor(a) for a in (x, w, b, v))
    tol = dict(rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4 if dtype == np.float32 else 1e-12)
    out, prog = _gemm_program(lambda x, w, b, v: (x @ w + b) @ v, tx, tw, tb, tv)
    np.testing.assert_allclose(out.numpy(), (x @ w + b) @ v, **tol)
    labels = [s.label for s in prog.steps]
    assert labels[:2] == ["copy (bias)", labels[1]] and labels[1].endswith(" + bias"), labels
    assert not any(s.kind == "kernel" and "add" in s.label for s in prog.steps), labels
    monkeypatch.setattr(gemm_steps, "BIAS_FOLD_MAX_K", 47)
    unfolded, prog = _gemm_program(lambda x, w, b, v: (x @ w + b) @ v, tx, tw, tb, tv)
    assert not any(s.label.endswith(" + bias") for s in prog.steps)
    np.testing.assert_array_equal(out.numpy(), unfolded.numpy())
    monkeypatch.undo()
    out, prog = _gemm_program(lambda x, w, b, v: ((x @ w + b) @ v, (x @ w).sum()), tx, tw, tb, tv)
    np.testing.assert_allclose(out[0].numpy(), (x @ w + b) @ v, **tol)
    assert not any(s.label.endswith(" + bias") for s in prog.steps)
