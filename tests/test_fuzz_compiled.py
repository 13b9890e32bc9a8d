"""Random row-wise / parallel programs (hypothesis): the generated kernels (backend="numba") == the reference
interpreter == eager jitgrad == torch, call after call, at two batch sizes.

A program is a chain over one value ``h`` of shape ``(..., n)``: elementwise ops, innermost-axis reductions
broadcast back (softmax, log_softmax, layer_norm, standardise by mean/std, var, amax/amin/max, logsumexp, masked
and scaled softmax), reductions over the other axes broadcast back, reads of a captured parameter and of a
momentum buffer; then optionally ``.backward()`` inside with the grads returned, in-place updates of the
captured state (SGD on the parameter, ``buf.mul_(0.9).add_(h)``) and outputs returned twice or as views.  These
are the paths of ``ir/passes/row_chains.py``, ``codegen/kernels/rowwise_loops.py``, ``codegen/places.py`` (views,
in-place state, slot reuse) and the parallel kernels of ``codegen/kernels/ir_loops.py``; ``parallel=True`` runs the
chunked ``prange`` loops at sizes CI can afford.  Inputs are transposed, strided or expanded views sometimes.
CI runs a few derandomized examples over small shapes; to explore, ``HYPOTHESIS_PROFILE=dev FUZZ_EXAMPLES=300``,
and ``FUZZ_BIG=1`` (or ``only``) for the shapes that cross the real thresholds (PARALLEL_MIN, COLUMN_MAX).
"""
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import jitgrad as jg
import jitgrad.nn.functional as JF
import torch.nn.functional as TF

SMALL = [(8, 300), (5, 3, 64), (33, 129), (2, 1, 700), (1, 513), (7, 40)]
BIG = [(64, 2048), (2048, 1024), (3, 5, 4096), (1, (1 << 20) + 7), (1025, 1023), (1024, 1024), (257, 4099)]
SHAPES = {"1": SMALL + BIG, "only": BIG}.get(os.environ.get("FUZZ_BIG", ""), SMALL)

# h -> h over shape (..., n); ``c`` holds the call's other values: x, w (n,), p (captured parameter, (n,)),
# buf (captured state, full shape), the module pair (M, F) and the values so far
OPS = {
    "tanh": lambda h, c: h.tanh(),
    "sigmoid": lambda h, c: h.sigmoid() * 2.0 - 0.5,
    "relu": lambda h, c: h.relu() - 0.25,
    "sq": lambda h, c: h * h.tanh(),
    "exp_t": lambda h, c: h.tanh().exp(),
    "mul_w": lambda h, c: h * c["w"],
    "add_p": lambda h, c: h + c["p"],
    "mul_p": lambda h, c: h * c["p"].tanh(),
    "read_buf": lambda h, c: h + 0.5 * c["buf"],
    "add_prev": lambda h, c: h + c["vals"][len(c["vals"]) // 2],
    "softmax": lambda h, c: h.softmax(-1) * h.shape[-1] ** 0.5,
    "log_softmax": lambda h, c: h.log_softmax(-1) * 0.1,
    "scaled_softmax": lambda h, c: (h * 0.125).softmax(-1) * 10.0,
    "masked_softmax": lambda h, c: h.masked_fill(c["x"] > 1.5, -math.inf).softmax(-1) * 10.0,
    "layer_norm": lambda h, c: c["F"].layer_norm(h, (h.shape[-1],)),
    "layer_norm_w": lambda h, c: c["F"].layer_norm(h, (h.shape[-1],), c["w"], c["p"], eps=1e-3),
    "center": lambda h, c: h - h.mean(-1, keepdim=True),
    "standardize": lambda h, c: (h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 0.1),
    "var_scale": lambda h, c: h * (h.var(-1, keepdim=True) + 1.0).rsqrt(),
    "amax_div": lambda h, c: h / (h.abs().amax(-1, keepdim=True) + 1.0),
    "amin_sub": lambda h, c: (h - h.amin(-1, keepdim=True)).tanh(),
    "max_sub": lambda h, c: (h - h.max(-1, keepdim=True).values).exp(),
    "lse_sub": lambda h, c: (h - h.logsumexp(-1, keepdim=True)) * 0.1,
    "col_mean": lambda h, c: h - h.mean(0, keepdim=True),
    "softmax_T": lambda h, c: h.transpose(-1, -2).softmax(-1).transpose(-1, -2) * 4.0,
    "masked_col": lambda h, c: h.masked_fill(c["w"] > 1.3, -math.inf).softmax(-1) * 10.0,
    "row_out": lambda h, c: h - _row(c, h.amax(-1, keepdim=True)),
    "std_out": lambda h, c: h / (_row(c, h.std(-1, keepdim=True)) + 0.5),
    "upd_buf": lambda h, c: h + 0.1 * _update(c["M"], c["buf"], h),
    "col_sum": lambda h, c: h * h.sum(tuple(range(h.ndim - 1))).tanh(),
}
OUTS = ("h", "h_again", "h_T", "h_strided", "h_flat", "mid", "rowsum", "rowmax", "colsum", "rowval", "buf", "p",
        "allsum", "allmax")


def _row(c, r):
    """A row value the program returns too ("rowval"): a row kernel's row output."""
    c["rows"].append(r)
    return r


def _update(M, buf, h):
    """``buf.mul_(0.9).add_(h)`` in the middle of the chain: later ops read the new value."""
    with M.no_grad():
        buf.mul_(0.9).add_(h.detach())
    return buf


@st.composite
def programs(draw, shapes=SHAPES):
    shape = draw(st.sampled_from(shapes))
    ops = draw(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6))
    return dict(
        shape=shape, ops=ops,
        dtype=draw(st.sampled_from(["float32", "float64"])),
        x_layout=draw(st.sampled_from(["contig", "transposed", "strided", "expanded"])),
        g_layout=draw(st.sampled_from(["contig", "expanded", "strided"])),
        mode=draw(st.sampled_from(["backward", "no_grad", "plain"])),
        sgd=draw(st.booleans()), momentum=draw(st.booleans()),
        outs=draw(st.lists(st.sampled_from(OUTS), min_size=1, max_size=3)),
        parallel=draw(st.sampled_from([None, True])),
        seed=draw(st.integers(0, 2 ** 16)))


def _arg(M, a, layout, dtype, grad):
    """``a`` (float64 NumPy) as a tensor of ``dtype`` laid out as ``layout`` (always a leaf when ``grad``)."""
    t = M.tensor(np.ascontiguousarray(a), dtype=dtype)
    if layout == "transposed" and a.ndim >= 2:      # rows strided: the buffer holds the transpose
        t = M.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dtype=dtype).transpose(-1, -2)
    elif layout == "strided":                       # every other element of a buffer twice as wide
        b = np.repeat(a, 2, axis=-1)
        b[..., 1::2] = 7.0
        t = M.tensor(b, dtype=dtype)[..., ::2]
    elif layout == "expanded":                      # one row broadcast to all (stride 0)
        t = M.tensor(np.ascontiguousarray(a.reshape(-1, a.shape[-1])[:1]), dtype=dtype)
        t = t.reshape((1,) * (a.ndim - 1) + a.shape[-1:]).expand(*a.shape)
    if grad:
        t = t.detach().requires_grad_()
    return t


def make(prog, M, F, state):
    """The step function of ``prog`` over module ``M`` (jitgrad or torch) and its captured ``state``."""
    p, buf = state["p"], state["buf"]

    def step(x, w, g):
        c = dict(x=x, w=w, p=p, buf=buf, M=M, F=F, vals=[x], rows=[])
        h = x
        for name in prog["ops"]:
            h = OPS[name](h, c)
            c["vals"].append(h)
        outs = []
        for o in prog["outs"]:
            y = h.detach() if prog["mode"] == "backward" else h
            outs.append({"h": y, "h_again": y, "h_T": y.transpose(-1, -2) if y.ndim >= 2 else y,
                         "h_strided": y[..., ::2], "h_flat": y.reshape(-1),
                         "mid": c["vals"][(len(c["vals"]) + 1) // 2].detach(),
                         "rowsum": y.sum(-1), "rowmax": y.amax(-1, keepdim=True),
                         "colsum": y.sum(tuple(range(y.ndim - 1))),
                         "rowval": c["rows"][0] if c["rows"] else y.mean(-1, keepdim=True),
                         "buf": buf, "p": p, "allsum": y.sum(), "allmax": y.amax()}[o])
        if prog["mode"] == "backward":
            (h * g).sum().backward()
            outs += [x.grad, w.grad]
        with M.no_grad():
            if prog["sgd"]:
                if prog["mode"] == "backward" and p.grad is not None:
                    p.sub_(0.1 * p.grad)
                else:
                    p.sub_(0.01 * h.mean(tuple(range(h.ndim - 1))))
            if prog["momentum"]:
                buf.mul_(0.9).add_(h.detach())
        p.grad = None           # (a .grad left set would be a new guard next call: a retrace, not a replay)
        return tuple(outs)
    return step


def _np(t):
    return None if t is None else t.detach().numpy().astype(np.float64)


def run(prog, shapes, how, calls=2):
    """``prog`` at each of ``shapes``, ``calls`` times, run ``how`` ("torch", "eager", "interpret", "numba"): per
    call, the outputs and the state afterwards, as float64 NumPy arrays.  One compiled function serves every
    shape (a new trace, the same kernels over new sizes) unless the program reads the full-shape buffer."""
    M, F = (torch, TF) if how == "torch" else (jg, JF)
    dtype = getattr(M, prog["dtype"])
    rng = np.random.default_rng(prog["seed"])
    n = shapes[0][-1]
    uses_buf = prog["momentum"] or {"read_buf", "upd_buf"} & set(prog["ops"]) or "buf" in prog["outs"]
    state = dict(p=M.tensor(rng.uniform(0.5, 1.5, n), dtype=dtype, requires_grad=True))
    res, step = [], None
    for shape in shapes:
        if step is None or uses_buf:
            state["buf"] = M.tensor(rng.standard_normal(shape) * 0.5, dtype=dtype)
            step = make(prog, M, F, state)
            if how in ("interpret", "numba"):
                step = jg.compile(step, backend=how, background=False, parallel=prog["parallel"])
        res += _calls(prog, step, state, M, dtype, shape, rng, calls)
    if how == "numba":
        s = step.stats          # traced once per shape, then the cached code; every call ran the kernels
        traces = 1 if uses_buf else len(shapes)
        assert (s["traces"], s["hits"], s["compiled_calls"]) == (traces, traces * (calls - 1), traces * calls), s
    return res


def _calls(prog, step, state, M, dtype, shape, rng, calls):
    n, res = shape[-1], []
    for k in range(calls):
        grad = prog["mode"] == "backward"
        xa, wa, ga = rng.standard_normal(shape), rng.uniform(0.5, 1.5, n), rng.standard_normal(shape)
        x = _arg(M, xa, prog["x_layout"], dtype, grad)
        w = _arg(M, wa, "contig", dtype, grad)
        g = _arg(M, ga, prog["g_layout"], dtype, False)
        if prog["mode"] == "no_grad":
            with M.no_grad():
                outs = step(x, w, g)
        else:
            outs = step(x, w, g)
        res.append(([_np(o) for o in outs], [_np(state["p"]), _np(state["buf"])]))
    return res


def _close(got, want, dtype, what):
    assert len(got) == len(want), f"{what}: {len(got)} values, expected {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        assert (a is None) == (b is None), f"{what}[{k}]: one is None"
        if a is None:
            continue
        assert a.shape == b.shape, f"{what}[{k}]: shape {a.shape} vs {b.shape}"
        scale = float(np.nanmax(np.abs(b), initial=1.0)) if b.size else 1.0
        rtol = 2e-3 if dtype == "float32" else 1e-8
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=what + f"[{k}]")


def check(prog, shapes):
    want = run(prog, shapes, "eager")
    for how in ("numba", "interpret", "torch"):
        got = run(prog, shapes, how)
        for call, ((go, gs), (wo, ws)) in enumerate(zip(got, want)):
            _close(go, wo, prog["dtype"], f"{how} vs eager, call {call} (2 per shape of {shapes}), outputs")
            _close(gs, ws, prog["dtype"], f"{how} vs eager, call {call} (2 per shape of {shapes}), state")


def _second(shape):
    """Another batch size: the same kernels over new sizes."""
    return (shape[0] + 3,) + tuple(shape[1:]) if shape[0] < 64 else (shape[0] // 2 + 1,) + tuple(shape[1:])


@pytest.mark.filterwarnings("error::jitgrad.codegen.program.cpu.CodegenWarning")
@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 25)))
@given(programs())
def test_random_row_programs_numba_interpret_eager_torch(prog):
    check(prog, [prog["shape"], _second(prog["shape"])])


@pytest.mark.filterwarnings("error::jitgrad.codegen.program.cpu.CodegenWarning")
@pytest.mark.parametrize("ops,dtype", [
    # amax's backward compared a recomputed input with the max: NaN rows (fuse.exact_value)
    (["layer_norm_w", "amax_div"], "float32"),
    (["row_out", "masked_col", "col_sum"], "float64"),
])
def test_fixed_programs(ops, dtype):
    prog = dict(shape=(8, 300), ops=ops, dtype=dtype, x_layout="contig", g_layout="contig", mode="backward",
                sgd=True, momentum=True, outs=["h_T", "rowval"], parallel=None, seed=0)
    check(prog, [prog["shape"], _second(prog["shape"])])
