"""B3's gradient penalty in eager mode (``grad(..., create_graph=True)``, then a backward through it), counted: the
ops its first backward binds, the Python calls of a whole step, and what the engine leaves out.

``grad()`` asks an op's rule only for the input gradients on a path to what it captures (torch's
``task_should_compute_output``; ``runtime/backward/graph_walk.py``): the first backward makes no gradient for the
weights, the second none for the data.  Figures when the thresholds were set (B3's step at B=8, D=4, H=16): 208 ->
189 Python calls (871 -> 802 C calls), the first backward's matmuls 4 -> 2 (at B3's size, 7 -> 5 GEMMs of
256 x 64 x 256 a step).
"""
import sys

import numpy as np

import jitgrad as jg
from jitgrad.ir import dtypes as dt
from jitgrad.ir.ops import Aval
from jitgrad.runtime.backward import graph_walk
from jitgrad.runtime.node import Node
from test_eager_overhead import _count, bound_ops  # noqa: F401 - the fixture: ops bound, in order


def _b3(B=8, D=4, Hd=16, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = jg.tensor(rng.standard_normal((B, D)).astype(dtype), requires_grad=True)
    W1 = jg.tensor((rng.standard_normal((D, Hd)) * 0.1).astype(dtype), requires_grad=True)
    b1 = jg.tensor(np.zeros(Hd, dtype), requires_grad=True)
    W2 = jg.tensor((rng.standard_normal((Hd, 1)) * 0.1).astype(dtype), requires_grad=True)

    def step(inputs=None):
        d = jg.tanh(x @ W1 + b1) @ W2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        return loss, jg.autograd.grad(loss, inputs or [W1, b1, W2])
    return step, (x, W1, b1, W2)




def test_first_backward_binds_only_what_reaches_x(bound_ops):
    step, (x, W1, b1, W2) = _b3()
    d = jg.tanh(x @ W1 + b1) @ W2
    s = d.sum()
    bound_ops.clear()
    jg.autograd.grad(s, x, create_graph=True)
    # d = t @ W2: t's gradient only (not W2's); x @ W1: x's only (not W1's); + b1: nothing for b1
    assert bound_ops.count("matmul") == 2, bound_ops
    assert "sum" not in bound_ops, bound_ops
    assert bound_ops.count("tanh_backward") == 1


def test_b3_step_python_calls():
    step, _ = _b3()
    for _ in range(3):      # warm the rule caches and the plans
        step()
    calls, c_calls = _count(step)
    # (180 -> 176: the first backward's two matmuls over views, W1.T and W2.T, take their flat entries)
    assert calls <= 180, f"B3 eager step made {calls} Python calls (176 when this threshold was set)"
    assert c_calls <= 750, f"B3 eager step made {c_calls} C calls (741 when this threshold was set)"


def test_narrowed_gradients_are_the_full_ones():
    """The weights' gradients when x's is not asked for have the bits of those computed beside x's."""
    step, (x, W1, b1, W2) = _b3(B=16, D=8, Hd=32, seed=1)
    _, part = step()
    _, full = step([W1, b1, W2, x])
    for a, b in zip(part, full):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_retained_graph_keeps_its_needs():
    """A backward that needs fewer gradients leaves the graph as recorded: a second one over it gets the rest."""
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    W = jg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    y = jg.tanh(x @ W).sum()
    gx, = jg.autograd.grad(y, x, retain_graph=True)
    node = y.grad_fn.next_functions[0][0].next_functions[0][0]      # tanh <- matmul
    assert node.needs_grad == (True, True)
    gW, = jg.autograd.grad(y, W, retain_graph=True)
    xa, Wa = x.detach().numpy(), W.detach().numpy()
    t = np.tanh(xa @ Wa)
    np.testing.assert_allclose(gW.numpy(), xa.T @ (1 - t * t), rtol=1e-12)
    np.testing.assert_allclose(gx.numpy(), (1 - t * t) @ Wa.T, rtol=1e-12)
    y.backward()
    np.testing.assert_allclose(W.grad.numpy(), gW.numpy(), rtol=1e-12)


def test_ctx_copies_every_slot():
    x = jg.tensor(np.ones((2, 3)), requires_grad=True)
    W = jg.tensor(np.ones((3, 2)), requires_grad=True)
    node = (x @ W).grad_fn
    c = graph_walk.ctx(node, {node: (False, True)})
    assert c is not node and c.needs_grad == (False, True) and node.needs_grad == (True, True)
    for s in Node.__slots__:
        if s not in ("__weakref__", "needs_grad", "inputs"):
            assert getattr(c, s) is getattr(node, s), s
    # matmul saves x only for W's gradient and W only for x's: the copy keeps what a node so recorded keeps
    assert c.inputs[0] is node.inputs[0] and c.inputs[1] is None
    assert graph_walk.ctx(node, {}) is node and graph_walk.ctx(node, None) is node


def test_ctx_copies_a_slot_added_later():
    """The copy is rendered from the node's class: a slot added (here by a subclass) is copied too."""
    class Wider(Node):
        __slots__ = ("extra",)
    x = jg.tensor(np.ones((2, 3)), requires_grad=True)
    W = jg.tensor(np.ones((3, 2)), requires_grad=True)
    node = (x @ W).grad_fn
    wide = object.__new__(Wider)
    for s in Node.__slots__:
        if s != "__weakref__":
            setattr(wide, s, getattr(node, s))
    wide.extra = marker = object()
    c = graph_walk.ctx(wide, {wide: (False, True)})
    assert type(c) is Wider and c.extra is marker and c.op is node.op and c.needs_grad == (False, True)


def test_b3_gradgradcheck():
    rng = np.random.default_rng(3)
    x = jg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    W1 = jg.tensor(rng.standard_normal((3, 5)) * 0.5, requires_grad=True)
    b1 = jg.tensor(rng.standard_normal(5) * 0.1, requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((5, 1)) * 0.5, requires_grad=True)

    def penalty(x, W1, b1, W2):
        d = jg.tanh(x @ W1 + b1) @ W2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        return d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
    assert jg.autograd.gradcheck(penalty, (x, W1, b1, W2))
    assert jg.autograd.gradgradcheck(penalty, (x, W1, b1, W2))


def test_b3_step_at_size_counts(monkeypatch):
    """B3's own size (B=256, D=64, H=256): the Python calls of a warm step, no environment read (the thread count is
    read once per process: each large GEMM asked, ~12,000 instructions), and norm's backward makes no pass of
    NumPy's where (its per-row mask holds everywhere: a copy of ``x / n``).  On one thread (the eager GEMMs' row
    blocks add frames per thread).  Figures when set: 289 -> 230 Python calls (the thread count read once, the large
    GEMMs' impl made per signature: eager_gemm._threaded_gemm; blas._gemm_rows' addresses inline; 221 -> 217: the
    matmuls over views on their flat entries); where's walk over the (256, 64) gradient was ~164,000
    instructions a step."""
    from jitgrad.ir import settings
    from jitgrad.ir.ops import elementwise
    monkeypatch.setattr(settings.STATE, "num_threads", 1)
    walks = []
    where = elementwise._WHERE
    monkeypatch.setattr(elementwise, "_WHERE", lambda *a: walks.append(1) or where(*a))
    step, _ = _b3(B=256, D=64, Hd=256)
    for _ in range(3):
        step()
    files = []
    names = []

    def prof(frame, event, arg):
        if event == "call":
            files.append(frame.f_code.co_filename)
            names.append(frame.f_code.co_name)
    sys.setprofile(prof)
    try:
        step()
    finally:
        sys.setprofile(None)
    assert not [f for f in files if f.endswith(("os.py", "<frozen os>", "_collections_abc.py",
                                                 "<frozen _collections_abc>"))]
    assert len(files) <= 225, f"B3 eager step made {len(files)} Python calls (217 when this threshold was set)"
    assert walks == [] and names.count("_where_row_mask") == 1
    # the BLAS calls (frames: dispatch keeps each signature's impl process-wide, so spies set now may miss them):
    # 5 GEMMs of 256 x 64 x 256 (PyTorch's 5) and 3 matrix-vector products as ?gemv (t @ W2, and W2's two
    # gradients: blas_gemv.py), none a GEMM that packs a whole matrix for one column
    assert names.count("_gemm_rows") == 5
    assert names.count("gemv_one_signature") + names.count("matvec") == 3
    assert names.count("gemm_one_thread") == 0


def test_where_row_mask_same_bits():
    """where with a condition smaller than x (broadcast per row) and a number, or a number and a y (masked_fill):
    NumPy's bits and layout, a fresh array."""
    from jitgrad.ir.ops import elementwise
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    for cond in (np.ones((16, 1), bool), rng.random((16, 1)) < 0.5, np.zeros((16, 1), bool), np.ones(8, bool),
                 rng.random(8) < 0.5):
        for xa in (x, np.asfortranarray(x)):
            avals = [Aval(cond.shape, dt.bool_), Aval(xa.shape, dt.float32), Aval((), dt.float64, weak=True)]
            f = elementwise._where_signature(avals, {})
            assert f is elementwise._where_row_mask
            r = f(cond, xa, 0.0)
            ref = np.where(cond, xa, 0.0)
            assert r.dtype == ref.dtype and r.tobytes(order="A") == ref.tobytes(order="A")
            assert not np.shares_memory(r, xa)
    # a number where a smaller condition holds (masked_fill: B9's causal mask), on C- and F-ordered arrays
    for cond in (np.tril(np.ones((8, 8), bool))[None], rng.random((1, 8)) < 0.5, np.zeros((1, 8), bool)):
        ya = rng.standard_normal((4, 8, 8)).astype(np.float32)
        ya[0, 0, 0] = np.nan
        for yv in (ya, np.asfortranarray(ya), ya[:, :, ::-1]):
            avals = [Aval(cond.shape, dt.bool_), Aval((), dt.float64, weak=True), Aval(yv.shape, dt.float32)]
            f = elementwise._where_signature(avals, {})
            assert f is elementwise._where_fill
            for value in (-np.inf, 0.1, 0.0):
                r = f(cond, value, yv)
                ref = np.where(cond, value, yv)
                assert r.dtype == ref.dtype and r.tobytes(order="A") == ref.tobytes(order="A")
                assert not np.shares_memory(r, yv)
    # a full-size condition, or a y array of x's shape, keeps NumPy's where
    same = [Aval((16, 8), dt.bool_), Aval((16, 8), dt.float32), Aval((), dt.float64, weak=True)]
    assert elementwise._where_signature(same, {}) is elementwise._WHERE
    arr = [Aval((16, 1), dt.bool_), Aval((16, 8), dt.float32), Aval((16, 8), dt.float32)]
    assert elementwise._where_signature(arr, {}) is elementwise._WHERE
    # through a tensor: gradients of a norm with a zero row (the mask fails there) are NumPy's where's
    xt = jg.tensor(np.vstack([np.zeros((1, 8)), rng.standard_normal((7, 8))]), requires_grad=True)
    xt.norm(dim=1).sum().backward()
    xs = xt.detach().numpy()
    n = np.linalg.norm(xs, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(xt.grad.numpy(), np.where(n != 0, xs / n, 0.0), rtol=1e-12)


def test_b3_gradcheck_through_gemv():
    """The penalty's first and second order where ``t @ W2`` and W2's gradients are ?gemv calls (blas_gemv.py:
    at least ``EAGER_MIN_MACS`` multiply-adds, one column or row of output), in float64."""
    from jitgrad.ir.ops import eager_gemm
    # (128, 256) @ (256, 1) and its gradients' products: the signatures' impls are the ?gemv calls
    assert eager_gemm.gemm_for_signature(128, 256, 1, np.float64).__name__ == "gemv_one_signature"
    assert eager_gemm.gemm_for_signature(1, 128, 256, np.float64).__name__ == "gemv_one_signature"
    rng = np.random.default_rng(3)
    x = jg.tensor(rng.standard_normal((128, 4)), requires_grad=True)
    W1 = jg.tensor(rng.standard_normal((4, 256)) * 0.5, requires_grad=True)
    b1 = jg.tensor(rng.standard_normal(256) * 0.1, requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((256, 1)) * 0.5, requires_grad=True)

    def penalty(W2, b1):
        d = jg.tanh(x @ W1 + b1) @ W2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        return d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
    assert jg.autograd.gradcheck(penalty, (W2, b1))
    assert jg.autograd.gradgradcheck(lambda W2: penalty(W2, b1), (W2,))


def test_b3_step_native_kernels_at_size(sync):
    """B3's size: the forward's tanh and the three tanh_backward (the first backward's, and in the second its own
    gradient's and tanh's) run the compiled path's native kernels, no NumPy fallback (3 calls before tanh had
    one).  Figures when set (callgrind, 1 thread, ``benchmarks/b3_counts.py --instructions``): NumPy's float32 tanh
    on AVX2 was ~811,000 instructions a step, the kernel ~355,000; the step 11.09M -> 10.65M."""
    from jitgrad.ir import settings
    from jitgrad.jit import eager_kernels as ek
    settings_threads = settings.STATE.num_threads
    settings.STATE.num_threads = 1
    try:
        step, (x, W1, b1, W2) = _b3(B=256, D=64, Hd=256)
        for _ in range(3):
            step()
        before = dict(ek.COUNTS)
        step()
        after = dict(ek.COUNTS)
    finally:
        settings.STATE.num_threads = settings_threads
    assert after["native_calls"] - before["native_calls"] == 4
    assert after["numpy_calls"] == before["numpy_calls"]
    assert after["kernels_compiled"] + after["kernels_loaded"] == before["kernels_compiled"] + before["kernels_loaded"]
    # the forward's tanh is the kernel's (the compiled path's bits), close to NumPy's
    xa, W1a, b1a = (t.detach().numpy() for t in (x, W1, b1))
    t = jg.tanh(x @ W1 + b1).detach().numpy()
    np.testing.assert_allclose(t, np.tanh(xa @ W1a + b1a), rtol=1e-6, atol=1e-6)


def test_norm2_sums_without_numpy_wrappers():
    """norm's impl reduces with the ufunc itself (np.sum's Python layer is four frames a call), with np.sum's bits."""
    x = np.random.default_rng(5).standard_normal((33, 17)).astype(np.float32)
    t = jg.tensor(x)
    files = []

    def prof(frame, event, arg):
        if event == "call":
            files.append(frame.f_code.co_filename)
    sys.setprofile(prof)
    try:
        r = t.norm(dim=1)
    finally:
        sys.setprofile(None)
    assert not [f for f in files if "numpy" in f], files
    assert r.numpy().tobytes() == np.sqrt(np.sum(x * x, axis=1)).tobytes()
    assert t.norm().numpy().tobytes() == np.asarray(np.sqrt(np.sum(x * x))).tobytes()
