"""Compiled functions on CUDA (Numba's simulator) == the same functions compiled for the CPU == eager.

Focused cases (state that is a view of another CUDA tensor, ...) and random small programs.  A program is a chain
of ops over one value ``h`` of shape ``(R, C)`` (sizes that are not multiples of the simulator's 16 threads per
block; a full reduction of more than 64 elements is split across blocks and finished by a second kernel): elementwise math, broadcasting against a captured parameter, reductions over either axis
broadcast back (sum/mean/amax/amin/var/logsumexp/softmax/log_softmax/layer_norm), views (strided slices,
transpose, expand, reshape, unsqueeze, flip), matmul, gathers, cat and setitem, then ``.backward()`` inside the
compiled function, in-place updates of captured state (SGD, momentum) and outputs returned twice or as views.
Each compiled version is called twice, so state written back by call 1 is read by call 2.  These are the paths
of ``codegen/places.py`` (views, workspace slot reuse, state updated in place, outputs, write-backs) as
``codegen/gpu/cuda.py`` takes them, with CUDA's plan (no row-wise kernels) and split reductions.

The simulator runs each CUDA thread as a Python thread, so CI runs six fixed programs that between them use
every op and output (about 25 s); to explore,
``CUDA_FUZZ_SEEDS=0:200`` (a range) with ``JITGRAD_CUDA_TEST_ROLE=compiled NUMBA_ENABLE_CUDASIM=1 python -m
pytest tests/test_cuda_compiled.py -n 0 -k sim``.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

_ROLE = os.environ.get("JITGRAD_CUDA_TEST_ROLE", "")
_HAVE = importlib.util.find_spec("numba_cuda") is not None

sim = pytest.mark.skipif(_ROLE != "compiled", reason="runs in its own process on the CUDA simulator "
                                                     "(test_compiled_cuda_set_on_the_simulator)")


@pytest.mark.skipif(_ROLE != "", reason="the parent test of a child process")
def test_compiled_cuda_set_on_the_simulator():
    # the simulator must be switched on before Numba's CUDA module is imported: a process of its own
    if not _HAVE:
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    env = dict(os.environ, JITGRAD_CUDA_TEST_ROLE="compiled")
    if os.environ.get("JITGRAD_CUDA_REAL") != "1":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-k", "sim"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]
    assert " passed" in out and " failed" not in out, out[-3000:]


if _ROLE == "compiled":
    import jitgrad as jg
    import jitgrad.nn.functional as JF
    # the simulator's launcher polls its threads in a busy loop: a short GIL switch interval lets the threads
    # run (about 3x faster here)
    sys.setswitchinterval(5e-4)


# ---- focused cases ---------------------------------------------------------------------------------------------

@sim
@pytest.mark.parametrize("view", ["row", "strided", "transposed"])
def test_sim_state_that_is_a_view_of_a_cuda_tensor_writes_through_to_its_base(view):
    """CUDA views are copies that eager in-place ops write through to their base (cuda/eager.py); a compiled
    step's write-back into such a view must too, and refresh the base's other views."""
    def run(dev):
        big = jg.tensor(np.arange(30.0).reshape(3, 10) / 7.0, device=dev)
        s = {"row": lambda: big[1], "strided": lambda: big[:, ::2], "transposed": lambda: big.t()}[view]()
        other = big[:, 1]

        @jg.compile
        def step(x):
            with jg.no_grad():
                s.mul_(0.5).add_(x)
            return s * 2.0
        res = []
        for k in range(2):
            out = step(jg.tensor(np.full(tuple(s.shape), k + 1.0), device=dev))
            res.append([t.detach().cpu().numpy().copy() for t in (out, s, big, other)])
        return res
    for got, want in zip(run("cuda"), run("cpu")):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)


@sim
def test_sim_compiled_backward_accumulates_into_the_existing_grad_tensor():
    """As on the CPU (and in torch), ``.backward()`` on CUDA, compiled or eager, accumulates into the ``.grad``
    tensor already there (the same object, updated in place), so a reference taken to it sees the new gradient."""
    def run(dev, compiled):
        p = jg.tensor(np.arange(4.0), device=dev, requires_grad=True)

        def step(x):
            (p * x).sum().backward()
            return x * 2.0
        step = jg.compile(step) if compiled else step
        step(jg.tensor(np.ones(4), device=dev))
        g = p.grad
        step(jg.tensor(np.full(4, 3.0), device=dev))
        assert g is p.grad
        return g.cpu().numpy()
    for compiled in (True, False):      # eagerly too: a CUDA .grad was replaced by old + g
        np.testing.assert_array_equal(run("cuda", compiled), run("cpu", compiled))


# ---- random programs -------------------------------------------------------------------------------------------

# h -> h, shape (R, C) kept; ``c``: the call's other values (x, p (C,) parameter, W (C, C), idx, buf (R, C))
OPS = {
    "tanh": lambda h, c: h.tanh(),
    "sigmoid": lambda h, c: h.sigmoid() * 2.0 - 0.5,
    "sq": lambda h, c: h * h.tanh(),
    "exp_t": lambda h, c: h.tanh().exp(),
    "relu": lambda h, c: h.relu() - 0.25,
    "add_p": lambda h, c: h + c["p"],
    "mul_p": lambda h, c: h * c["p"].tanh(),
    "col_bcast": lambda h, c: h * c["x"][:, :1],
    "row_bcast": lambda h, c: h - c["x"][1:2] if h.shape[0] > 1 else h + c["x"],
    "read_buf": lambda h, c: h + 0.5 * c["buf"],
    "add_prev": lambda h, c: h + c["vals"][len(c["vals"]) // 2],
    "sum0": lambda h, c: h - h.sum(0, keepdim=True) * 0.5,
    "sum1": lambda h, c: h - h.sum(1, keepdim=True) * 0.1,
    "mean0": lambda h, c: h - h.mean(0),
    "sum_all": lambda h, c: h * (h.sum() * 0.01).tanh(),
    "mean_all": lambda h, c: h - h.mean(),
    "amax0": lambda h, c: h - h.amax(0, keepdim=True),
    "amax1": lambda h, c: h / (h.abs().amax(1, keepdim=True) + 1.0),
    "amin0": lambda h, c: (h - h.amin(0)).tanh(),
    "amax_all": lambda h, c: h - h.amax(),
    "var1": lambda h, c: h * (h.var(1, keepdim=True, correction=0) + 1.0).rsqrt(),
    "var0": lambda h, c: h * (h.var(0, keepdim=True, correction=0) + 1.0).rsqrt(),
    "lse1": lambda h, c: (h - h.logsumexp(1, keepdim=True)) * 0.1,
    "lse0": lambda h, c: h - h.logsumexp(0, keepdim=True),
    "softmax1": lambda h, c: h.softmax(-1) * h.shape[-1] ** 0.5,
    "softmax0": lambda h, c: h.softmax(0) * 2.0,
    "log_softmax1": lambda h, c: h.log_softmax(-1) * 0.1,
    "log_softmax0": lambda h, c: h.log_softmax(0) * 0.1,
    "layer_norm": lambda h, c: JF.layer_norm(h, (h.shape[-1],), c["p"], None, eps=1e-3),
    "layer_norm_T": lambda h, c: JF.layer_norm(h.t(), (h.shape[0],), eps=1e-3).t(),
    "transpose": lambda h, c: (h.t() * 1.5).t(),
    "flip": lambda h, c: h.flip(1) + h,
    "step_slice": lambda h, c: jg.cat([h[:, ::2] * 2.0, h[:, 1::2]], 1),
    "rev_rows": lambda h, c: h.flip(0) * 0.5 + h,
    "expand_sum": lambda h, c: h.unsqueeze(0).expand(3, *h.shape).sum(0) * 0.25,
    "reshape": lambda h, c: h.reshape(-1).tanh().reshape(h.shape),
    "reshape_T": lambda h, c: h.t().reshape(-1).reshape(h.shape[1], h.shape[0]).t() * 0.5,
    "matmul": lambda h, c: h @ c["W"],
    "matmul_T": lambda h, c: (c["W"] @ h.t()).t() * 0.5,
    "gather": lambda h, c: h[:, c["idx"]],
    "gather_rows": lambda h, c: h[c["ridx"]] + h,
    "cat_halves": lambda h, c: jg.cat([h[:, h.shape[1] // 2:], h[:, :h.shape[1] // 2]], 1),
    "setitem": lambda h, c: _setitem(h),
    "cumsum1": lambda h, c: h.cumsum(1) * 0.2,
    "cumsum0": lambda h, c: h.flip(0).cumsum(0) * 0.5,
    "where": lambda h, c: jg.where(h > 0.1, h, h * 0.1),
    "clamp": lambda h, c: h.clamp(-0.5, 0.8),
    "unsq": lambda h, c: (h.unsqueeze(1) * c["p"].unsqueeze(0).unsqueeze(0)[..., :1]).squeeze(1),
}

OUTS = ("h", "h_again", "h_T", "h_strided", "h_row", "allsum", "colsum", "rowmax", "p", "buf", "p_grad",
        "mid", "x", "buf_T")


def _setitem(h):
    y = h * 1.0
    y[:, 0] = y[:, -1] * 2.0
    return y


SHAPES = [(1, 5), (2, 17), (3, 16), (4, 37), (3, 23), (4, 9), (1, 33), (2, 1)]


def program(seed, ops=None, outs=None, shape=None):
    """The program of ``seed`` (its ops, outputs and shape drawn unless given): a dict, printed when a check
    fails."""
    rng = np.random.default_rng(seed)
    names = sorted(OPS)
    drawn = [names[k] for k in rng.integers(len(names), size=rng.integers(1, 6))]
    drawn_shape = SHAPES[rng.integers(len(SHAPES))]
    return dict(seed=seed, shape=drawn_shape if shape is None else shape,
                dtype=["float64", "float32"][rng.integers(2)], ops=drawn if ops is None else ops,
                backward=bool(rng.integers(3) > 0), sgd=bool(rng.integers(2)), momentum=bool(rng.integers(2)),
                clear_grad=bool(rng.integers(2)), x_layout=["contig", "transposed", "strided", "expanded"][rng.integers(4)],
                outs=[OUTS[k] for k in rng.integers(len(OUTS), size=rng.integers(1, 4))] if outs is None else outs)


def make(prog, dev):
    """The step function of ``prog`` and its captured state, on device ``dev``."""
    rng = np.random.default_rng(prog["seed"] + 1)
    R, C = prog["shape"]
    dtype = getattr(jg, prog["dtype"])
    p = jg.tensor(rng.uniform(0.5, 1.5, C), dtype=dtype, device=dev, requires_grad=True)
    W = jg.tensor(rng.standard_normal((C, C)) / np.sqrt(C), dtype=dtype, device=dev, requires_grad=True)
    buf = jg.tensor(rng.standard_normal((R, C)) * 0.5, dtype=dtype, device=dev)
    idx = jg.tensor(rng.permutation(C)[rng.integers(C, size=C) % C], device=dev)
    ridx = jg.tensor(rng.integers(R, size=R), device=dev)
    g = jg.tensor(rng.uniform(0.5, 1.5, (R, C)), dtype=dtype, device=dev)
    state = [p, W, buf]

    def step(x):
        c = dict(x=x, p=p, W=W, buf=buf, idx=idx, ridx=ridx, vals=[x])
        h = x * p if prog["backward"] else x       # something to differentiate
        for name in prog["ops"]:
            h = OPS[name](h, c)
            c["vals"].append(h)
        if prog["backward"]:
            (h * g).sum().backward()
        y = h.detach() if prog["backward"] else h
        outs = []
        for o in prog["outs"]:
            outs.append({"h": lambda: y, "h_again": lambda: y, "h_T": lambda: y.t(), "h_strided": lambda: y[:, ::2],
                         "h_row": lambda: y[-1], "allsum": lambda: y.sum(), "colsum": lambda: y.sum(0),
                         "rowmax": lambda: y.amax(1, keepdim=True), "p": lambda: p, "buf": lambda: buf,
                         "p_grad": lambda: p.grad, "x": lambda: x, "buf_T": lambda: buf.t(), "mid": lambda: c["vals"][(len(c["vals"]) + 1) // 2]}[o]())
        with jg.no_grad():
            if prog["sgd"]:
                if p.grad is not None:
                    p.sub_(0.1 * p.grad)
                else:
                    p.sub_(0.01 * y.mean(0))
                if W.grad is not None:
                    W.sub_(0.1 * W.grad)
            if prog["momentum"]:
                buf.mul_(0.9).add_(y)
        if prog["clear_grad"]:
            p.grad = None
            W.grad = None
        return tuple(outs)
    return step, state


def _arg(a, layout, dtype, dev):
    """``a`` as an argument tensor laid out as ``layout`` (a view of a bigger or transposed buffer)."""
    if layout == "transposed":
        return jg.tensor(np.ascontiguousarray(a.T), dtype=dtype, device=dev).t()
    if layout == "strided":
        return jg.tensor(np.repeat(a, 2, axis=1), dtype=dtype, device=dev)[:, ::2]
    if layout == "expanded":
        return jg.tensor(a[:1], dtype=dtype, device=dev).expand(*a.shape)
    return jg.tensor(a, dtype=dtype, device=dev)


def run(prog, how, calls=2):
    """Per call: the outputs, then the state and its grads afterwards (NumPy float64)."""
    dev = "cuda" if how == "cuda" else "cpu"
    step, state = make(prog, dev)
    if how != "eager":
        step = jg.compile(step, backend="numba", background=False)
    rng = np.random.default_rng(prog["seed"] + 2)
    res = []
    for _ in range(calls):
        x = _arg(rng.uniform(-1.5, 1.5, prog["shape"]), prog["x_layout"], getattr(jg, prog["dtype"]), dev)
        outs = step(x)
        res.append([None if o is None else o.detach().cpu().numpy().astype(np.float64) for o in outs]
                   + [s.detach().cpu().numpy().astype(np.float64) for s in state]
                   + [None if s.grad is None else s.grad.detach().cpu().numpy().astype(np.float64) for s in state])
    return res


def check(prog):
    want = run(prog, "eager")
    tol = dict(rtol=1e-9, atol=1e-11) if prog["dtype"] == "float64" else dict(rtol=2e-4, atol=2e-5)
    for how in ("cpu", "cuda"):
        got = run(prog, how)
        for k, (gc, wc) in enumerate(zip(got, want)):
            assert len(gc) == len(wc)
            for j, (a, b) in enumerate(zip(gc, wc)):
                assert (a is None) == (b is None), f"{how} call {k} value {j}: None mismatch; {prog}"
                if a is not None:
                    np.testing.assert_allclose(a, b, **tol, err_msg=f"{how} call {k} value {j}; {prog}")


# CI's shapes: none a multiple of the simulator's 16 threads but one, 3 x 23 = 69 > 4 x 16 splits a full reduction
CI_SHAPES = [(3, 23), (2, 17), (4, 9), (1, 33), (3, 16), (2, 37)]
CI_PROGRAMS = len(CI_SHAPES)


def _programs():
    """CI: ``CI_PROGRAMS`` fixed programs that between them use every op and every output once (in a fixed
    shuffled order: the chains mix kinds); exploring: the drawn programs of the seeds in ``CUDA_FUZZ_SEEDS``."""
    spec = os.environ.get("CUDA_FUZZ_SEEDS")
    if spec:
        lo, hi = (int(s) for s in spec.split(":"))
        return [program(s) for s in range(lo, hi)]
    rng = np.random.default_rng(2026)
    ops, outs = [sorted(OPS)[k] for k in rng.permutation(len(OPS))], [OUTS[k] for k in rng.permutation(len(OUTS))]
    return [program(k, ops[k::CI_PROGRAMS], outs[k::CI_PROGRAMS], CI_SHAPES[k]) for k in range(CI_PROGRAMS)]


@sim
@pytest.mark.parametrize("prog", _programs(), ids=lambda p: str(p["seed"]))
def test_sim_random_program_matches_cpu_and_eager(prog):
    check(prog)
