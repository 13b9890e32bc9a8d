"""The CUDA target, tested on Numba's CUDA simulator and (PTX) with numba-cuda's NVVM, no GPU needed.

How it runs: the CUDA set needs ``NUMBA_ENABLE_CUDASIM=1`` set before Numba's CUDA module is imported, which
must not leak into the other tests' processes; and PTX must be built by the real CUDA target, which the
simulator replaces.  So the ordinary test process runs two tests, each of which starts a fresh pytest process
on this file: ``test_cuda_set_on_the_simulator`` (the ``sim`` tests below, with the simulator on) and
``test_ptx_for_sm90`` (the ``ptx`` tests, without it).  In those child processes the other tests skip.
Everything skips cleanly when numba-cuda is not installed (``pip install -e '.[cuda]'``; the test extra has it).
On a machine with a GPU, ``JITGRAD_CUDA_REAL=1`` runs the ``sim`` set on the device instead of the simulator.

The simulator runs each CUDA thread as a Python thread, so shapes are tiny and the set is representative:
every primitive's forward and gradient against the CPU (one small case each), a compiled training step (values,
state updates, gradients), double backward through a compiled function, anomaly mode naming the user's line,
the profiler, and the device errors.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

_ROLE = os.environ.get("JITGRAD_CUDA_TEST_ROLE", "")      # "", "sim" or "ptx"
_HAVE = importlib.util.find_spec("numba_cuda") is not None

sim = pytest.mark.skipif(_ROLE != "sim", reason="runs in its own process on the CUDA simulator "
                                                "(test_cuda_set_on_the_simulator)")
ptx = pytest.mark.skipif(_ROLE != "ptx", reason="runs in its own process (test_ptx_for_sm90)")
parent = pytest.mark.skipif(_ROLE != "", reason="the parent test of a child process")


def _child(role, extra_env):
    if not _HAVE:
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    env = dict(os.environ, JITGRAD_CUDA_TEST_ROLE=role, **extra_env)
    if role == "ptx":
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-k", role]
    # a hang guard, not a speed bound: the PTX set takes minutes on a quiet machine and over 20 on a loaded one
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]
    assert " passed" in out and " failed" not in out, out[-3000:]
    return out


@parent
def test_cuda_set_on_the_simulator():
    sim_env = {} if os.environ.get("JITGRAD_CUDA_REAL") == "1" else {"NUMBA_ENABLE_CUDASIM": "1"}
    _child("sim", sim_env)


@parent
def test_ptx_for_sm90():
    _child("ptx", {})


@parent
def test_cpu_work_never_imports_cuda_modules():
    code = ("import sys, jitgrad as jg\n"
            "x = jg.ones(3, requires_grad=True)\n"
            "(x * 2).tanh().sum().backward()\n"
            "f = jg.compile(lambda a: (a * 2).sum(), backend='interpret')\n"
            "f(jg.ones(2)); print(x.device, x.is_cuda, repr(x.cpu()))\n"
            "bad = [m for m in sys.modules if m.startswith(('numba.cuda', 'numba_cuda'))]\n"
            "assert not bad, bad\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "cpu False tensor([1., 1., 1.], requires_grad=True)" in r.stdout


# ==== the simulator set ======================================================================================

if _ROLE in ("sim", "ptx"):
    import jitgrad as jg
    from jitgrad.ir.ops import OPS
    # the simulator's launcher polls its threads in a busy loop: a short GIL switch interval lets the threads run
    sys.setswitchinterval(5e-4)


def _t(a, device, rg=False):
    return jg.tensor(np.asarray(a), device=device, requires_grad=rg)


def _values(rng, shape, domain):
    if domain == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "distinct":
        return rng.permutation(np.prod(shape)).reshape(shape) * 0.37 - 1.0
    v = rng.uniform(-2.0, 2.0, shape)
    return np.where(np.abs(v) < 0.2, 0.7, v)        # away from 0 (abs, sign, relu, division)


# one small case per primitive: (function of tensors, input shapes, domain); the function may use ops around
# the primitive (a gradient needs floats), and must bind the primitive itself on CUDA tensors
CASES = {
    "neg": (lambda a: -a, [(2, 3)], "any"), "copy": (lambda a: a.clone(), [(2, 3)], "any"),
    "exp": (lambda a: a.exp(), [(2, 3)], "any"),
    "log": (lambda a: a.log(), [(2, 3)], "pos"), "log1p": (lambda a: a.log1p(), [(2, 3)], "pos"),
    "expm1": (lambda a: a.expm1(), [(2, 3)], "any"), "sqrt": (lambda a: a.sqrt(), [(2, 3)], "pos"),
    "rsqrt": (lambda a: a.rsqrt(), [(2, 3)], "pos"), "sin": (lambda a: a.sin(), [(2, 3)], "any"),
    "cos": (lambda a: a.cos(), [(2, 3)], "any"), "tan": (lambda a: a.tan(), [(2, 3)], "unit"),
    "tanh": (lambda a: a.tanh(), [(2, 3)], "any"), "sigmoid": (lambda a: a.sigmoid(), [(2, 3)], "any"),
    "relu": (lambda a: a.relu(), [(2, 3)], "any"), "abs": (lambda a: a.abs(), [(2, 3)], "any"),
    "sign": (lambda a: a.sign() * a, [(2, 3)], "any"), "reciprocal": (lambda a: a.reciprocal(), [(2, 3)], "any"),
    "erf": (lambda a: a.erf(), [(2, 3)], "any"),
    "isfinite": (lambda a: jg.where(a.isfinite(), a, 0.0), [(2, 3)], "any"),
    "logical_not": (lambda a: jg.where(jg.logical_not(a > 0), a, 0.0), [(2, 3)], "any"),
    "cast": (lambda a: a.to(jg.float32).to(jg.float64) * a, [(2, 3)], "any"),
    "add": (lambda a, b: a + b, [(2, 3), (3,)], "any"), "sub": (lambda a, b: a - b, [(2, 3), (3,)], "any"),
    "mul": (lambda a, b: a * b, [(2, 3), (1, 3)], "any"), "div": (lambda a, b: a / b, [(2, 3), (3,)], "any"),
    "floordiv": (lambda a: (a // 0.75) * a, [(2, 3)], "any"), "mod": (lambda a: a % 0.75, [(2, 3)], "pos"),
    "pow": (lambda a, b: a ** b, [(2, 3), (3,)], "pos"),
    "maximum": (lambda a, b: jg.maximum(a, b), [(2, 3), (3,)], "any"),
    "minimum": (lambda a, b: jg.minimum(a, b), [(2, 3), (3,)], "any"),
    "lt": (lambda a: jg.where(a < 0.5, a, 1.0), [(2, 3)], "any"),
    "le": (lambda a: jg.where(a <= 0.5, a, 1.0), [(2, 3)], "any"),
    "gt": (lambda a: jg.where(a > 0.5, a, 1.0), [(2, 3)], "any"),
    "ge": (lambda a: jg.where(a >= 0.5, a, 1.0), [(2, 3)], "any"),
    "eq": (lambda a: jg.where(a == a, a, 1.0), [(2, 3)], "any"),
    "ne": (lambda a: jg.where(a != 0.7, a, 1.0), [(2, 3)], "any"),
    "logical_and": (lambda a: jg.where(jg.logical_and(a > 0, a < 1), a, 0.0), [(2, 3)], "any"),
    "logical_or": (lambda a: jg.where(jg.logical_or(a > 1, a < -1), a, 0.0), [(2, 3)], "any"),
    "where": (lambda a, b: jg.where(a > 0, a, b), [(2, 3), (3,)], "any"),
    "clamp": (lambda a: a.clamp(-0.45, 0.35), [(2, 3)], "any"),
    # relu's pullback (g broadcast against x, a threshold of its own): the scalar body's CUDA loop; x only
    # selects (no gradient of its own), so x is added for one
    "threshold_backward": (lambda g, x: _bind("threshold_backward", g, x, 0.25) + x, [(3,), (2, 3)], "any"),
    "threshold": (lambda a: jg.nn.functional.threshold(a, 0.25, -0.7), [(2, 3)], "any"),
    "sum": (lambda a: a.sum(1), [(2, 3)], "any"), "amax": (lambda a: a.amax(1), [(2, 3)], "distinct"),
    "amin": (lambda a: a.amin(0), [(2, 3)], "distinct"), "prod": (lambda a: a.prod(1), [(2, 3)], "any"),
    "prod_others": (lambda a: a.prod(0), [(2, 3)], "any"), "norm2": (lambda a: a.norm(dim=1), [(2, 3)], "any"),
    "argmax": (lambda a: a * jg.argmax(a, 1, keepdim=True).to(a.dtype), [(2, 3)], "distinct"),
    "argmin": (lambda a: a * jg.argmin(a, 0).to(a.dtype), [(2, 3)], "distinct"),
    "reshape": (lambda a: a.mT.reshape(2, 3), [(2, 3)], "any"),     # from (3, 2): a reshape of a permuted view
    "permute": (lambda a: a.permute(1, 0) * 2.0, [(2, 3)], "any"),
    "broadcast_to": (lambda a: a.expand(2, 2, 3) * 1.5, [(2, 3)], "any"),
    "cat": (lambda a, b: jg.cat([a, b], 0), [(2, 3), (1, 3)], "any"),
    "matmul": (lambda a, b: a @ b, [(2, 3), (3, 2)], "any"),
    "getitem": (lambda a: a[1:, jg.tensor([0, 2, 2], device=a.device)] + a[jg.tensor([1, 0], device=a.device),
                                                                         jg.tensor([2, 2], device=a.device)].sum(),
                [(2, 3)], "any"),
    "index_put": (None, [(2, 3), (2, 2)], "any"),
    "scatter_reduce": (lambda a, b: sum(a.scatter_reduce(0, jg.tensor([[1, 0, 1], [1, 1, 0]], device=a.device), b, r,
                                                         include_self=r != "amin") for r in ("prod", "amax", "amin")),
                       [(2, 3), (2, 3)], "any"),
    # an identity whose gradient raises (scatter_reduce's refused double backward): run on a value off the graph
    "delayed_error": (lambda a: a * _bind("delayed_error", a.detach(), msg="no double backward"), [(2, 3)], "any"),
    # the fused primitives: on a device they run as their decompositions (OpDef.decompose)
    "tanh_backward": (lambda g, y: _bind("tanh_backward", g, y), [(2, 3), (2, 3)], "unit"),
    "gelu_backward": (lambda g, x: _bind("gelu_backward", g, x), [(2, 3), (2, 3)], "any"),
    "softmax": (lambda a: _bind("softmax", a, axis=1), [(2, 3)], "any"),
    "diagonal": (lambda a: _bind("diagonal", a, offset=1, dim1=0, dim2=1) * 2.0, [(3, 4)], "any"),
    "sdpa": (lambda q, k, v, m: _bind("sdpa", q, k, v, m, scale=0.5), [(2, 3, 2), (2, 4, 2), (2, 4, 3), (3, 4)], "any"),
    # the key-tiled attention has no CUDA kernel: host steps (F.sdpa keeps device tensors on "sdpa")
    "sdpa_tiled": (lambda q, k, v, m: _bind("sdpa_tiled", q, k, v, m, scale=0.5, causal=True, block_q=2, block_k=2),
                   [(2, 3, 2), (2, 4, 2), (2, 4, 3), (3, 4)], "any"),
    "sdpa_tiled_backward": (lambda q, k, v, o, g: _bind("sdpa_tiled_backward", q, k, v, o, g, scale=0.5, causal=False,
                                                        block_q=2, block_k=3, mask_grad=False),
                            [(2, 3, 2), (2, 4, 2), (2, 4, 3), (2 * 3 * 4,), (2 * 3 * 4,)], "any"),
    # convolutions have no CUDA kernel: host steps (their vjps bind conv_transpose and conv_weight on the device)
    **{name: (lambda x, w: _bind("conv", x, w, stride=(1, 2), padding=((1, 1), (0, 1)), dilation=(1, 1), groups=2),
              [(2, 4, 3, 3), (2, 2, 2, 2)], "any") for name in ("conv", "conv_weight")},
    "conv_transpose": (lambda g, w: _bind("conv_transpose", g, w, stride=(2, 1), padding=((0, 0), (1, 1)),
                                          dilation=(1, 1), groups=1, size=(5, 3)), [(1, 2, 2, 3), (2, 3, 2, 3)],
                       "any"),
    "max_pool_indices": (lambda a: jg.nn.functional.max_pool2d(a, 2, stride=1, padding=1), [(1, 2, 3, 3)],
                         "distinct"),
    "gelu": (lambda a: _bind("gelu", a, approximate="none") + _bind("gelu", a, approximate="tanh"), [(2, 3)], "any"),
    "layer_norm": (lambda a: _bind("layer_norm", a, naxes=1, eps=1e-5), [(2, 3)], "any"),
    "layer_norm_backward": (lambda g, x, y: _bind("layer_norm_backward", g, x, y, naxes=1, eps=1e-5),
                            [(2, 3), (2, 3), (2, 3)], "any"),
    "log_softmax": (lambda a: _bind("log_softmax", a, axis=0), [(2, 3)], "any"),
    "log_softmax_backward": (lambda g, o: _bind("log_softmax_backward", g, o, axis=1), [(2, 3), (2, 3)], "any"),
    "softmax_backward": (lambda g, o: _bind("softmax_backward", g, o, axis=1), [(2, 3), (2, 3)], "any"),
    "nll_loss": (lambda a: _bind("nll_loss", _bind("log_softmax", a, axis=1), jg.tensor([2, 0], device=a.device),
                                 ignore_index=-100, reduction="mean"), [(2, 3)], "any"),
    "nll_grad_weights": (lambda a: a * _bind("nll_grad_weights", jg.tensor([2, 0], device=a.device), n_cls=3,
                                             dtype=a.dtype, ignore_index=-100, reduction="mean"), [(2, 3)], "any"),
    "flip": (lambda a: a.flip(1) * a, [(2, 3)], "any"),
    "normp": (lambda a: a.norm(p=3, dim=1), [(2, 3)], "any"),
    "cumsum": (lambda a: a.cumsum(1) + a.flip(0).cumsum(0), [(2, 3)], "any"),
    "cumprod": (lambda a: a.cumprod(1) * 1.5, [(2, 3)], "any"),
    "argsort": (lambda a: a.sort(1, descending=True)[0] * a.argsort(0).to(a.dtype), [(2, 3)], "distinct"),
    "histc": (lambda a: a * jg.histc(a.detach(), 3, -2.0, 2.0), [(2, 3)], "any"),
    "atan2": (lambda a, b: jg.atan2(a, b), [(2, 3), (3,)], "any"),
    # ir/ops/pointwise_math.py: rounding (zero gradient: multiplied by a for one), hypot, fmod, copysign, erfc
    **{n: ((lambda n: lambda a: getattr(jg, n)(a * 3.0) * a)(n), [(2, 3)], "any")
       for n in ("floor", "ceil", "trunc", "round")},
    "hypot": (lambda a, b: jg.hypot(a, b), [(2, 3), (3,)], "any"),
    "fmod": (lambda a, b: jg.fmod(a * 3.0, b), [(2, 3), (3,)], "any"),
    "copysign": (lambda a, b: jg.copysign(a, b), [(2, 3), (3,)], "any"),
    "erfc": (lambda a: jg.erfc(a), [(2, 3)], "any"),
    "xlogy": (lambda a, b: jg.xlogy(a, b.abs()) + jg.special.xlog1py(a, b.abs()), [(2, 3), (3,)], "any"),
    # ir/ops/special.py: lgamma is a math-table row; polygamma and erfinv run as their decompositions
    "lgamma": (lambda a: jg.lgamma(a), [(2, 3)], "any"),
    "polygamma": (lambda a: jg.digamma(a) + jg.polygamma(2, a * a + 0.5), [(2, 3)], "any"),
    "erfinv": (lambda a: jg.erfinv(a), [(2, 3)], "unit"),
    # igamma has no kernel: a host step (SciPy) on CUDA tensors too; differentiable in x only
    "igamma": (lambda a: jg.igamma(a.detach().abs() + 0.5, a.abs()) + jg.igammac(a.detach().abs() + 0.5, a.abs()),
               [(2, 3)], "pos"),
    # ir/ops/trig_bessel.py: math-table rows; bessel_i runs as its decomposition
    **{n: ((lambda n: lambda a: getattr(jg, n)(a))(n), [(2, 3)], "unit")
       for n in ("asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh")},
    "acosh": (lambda a: jg.acosh(a + 1.0), [(2, 3)], "pos"),
    "bessel_i": (lambda a: jg.i0(a) + jg.special.i1(a * 5.0) + jg.special.i0e(a * 9.0) + jg.special.i1e(a),
                 [(2, 3)], "any"),
    # integer ops: run on values off the graph, scaled into the float result
    **{n: ((lambda n: lambda a: a * getattr(jg, n)((a.detach() * 10).to(jg.int64),
                                                  jg.tensor([3, 6, 1], device=a.device)).to(a.dtype))(n),
           [(2, 3)], "any")
       for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "gcd",
                 "lcm")},
    "bitwise_not": (lambda a: a * jg.bitwise_not((a.detach() * 10).to(jg.int64)).to(a.dtype), [(2, 3)], "any"),
    "nextafter": (lambda a: a * jg.nextafter(a.detach(), jg.tensor([0.0, 3.0, -np.inf], device=a.device)),
                  [(2, 3)], "any"),
    "searchsorted": (lambda a: a * jg.searchsorted(jg.tensor([-1.0, 0.0, 1.0], device=a.device),
                                                   a.detach()).to(a.dtype), [(2, 3)], "any"),
    "isin": (lambda a: jg.where(jg.isin(a.detach(), a.detach()[0]), a, 0.0), [(2, 3)], "any"),
    # a data-dependent size's coordinates at its bound (compiled x[mask] binds it): a host step on CUDA
    "nonzero_bounded": (lambda a: a * _bind("nonzero_bounded", a.detach() > 0, (a.detach() > 0).sum(),
                                            size=6)[:, 1].reshape(2, 3).to(a.dtype), [(2, 3)], "any"),
    "eigh": (lambda a: (lambda d, u: d.sum() + (u * u * a[:, :1]).sum())(*jg.lobpcg(a @ a.mT + a, k=1)), [(3, 3)],
             "any"),
    # jitgrad.linalg's primitives: host steps on CUDA tensors
    "inv": (lambda a: jg.linalg.inv(a + 3 * _eye(a)), [(3, 3)], "any"),
    "solve": (lambda a, b: jg.linalg.solve(a + 3 * _eye(a), b), [(3, 3), (3, 2)], "any"),
    "solve_triangular": (lambda a, b: jg.linalg.solve_triangular(a + 3 * _eye(a), b, upper=False), [(3, 3), (3, 2)],
                         "any"),
    "det": (lambda a: jg.linalg.det(a), [(2, 3, 3)], "any"),
    "matrix_exp": (lambda a: jg.linalg.matrix_exp(a * 0.5), [(2, 3, 3)], "any"),
    "slogdet": (lambda a: jg.linalg.slogdet(a + 3 * _eye(a)).logabsdet, [(3, 3)], "any"),
    "pinv": (lambda a: jg.linalg.pinv(a), [(4, 3)], "any"),
    "cholesky": (lambda a: jg.linalg.cholesky(a @ a.mT + 3 * _eye(a)), [(3, 3)], "any"),
    "qr": (lambda a: (lambda q, r: (q * q).sum() + (r * r).sum())(*jg.linalg.qr(a)), [(4, 3)], "any"),
    "svd": (lambda a: (lambda u, s, vh: (u * u).sum() + s.sum() + (vh * vh).sum())(*jg.linalg.svd(a, False)),
            [(4, 3)], "any"),
    "linalg_info": (lambda a: a * jg.linalg.inv_ex(a.detach() + 3 * _eye(a)).info.to(a.dtype), [(3, 3)], "any"),
    # draws: the same generator state gives the CPU's numbers on the device
    "rand_uniform": (lambda a: a * jg.rand(2, 3, dtype=a.dtype, generator=_gen(), device=a.device), [(2, 3)], "any"),
    "rand_normal": (lambda a: a * jg.randn(2, 3, dtype=a.dtype, generator=_gen(), device=a.device), [(2, 3)], "any"),
    "multinomial": (lambda a: a * jg.multinomial(a.detach().abs(), 3, True, generator=_gen()).to(a.dtype),
                    [(2, 3)], "any"),
    "randperm": (lambda a: a[:, jg.randperm(3, generator=_gen(), device=a.device)], [(2, 3)], "any"),
    # collectives in the process group of one (no MPI): host steps on CUDA tensors
    "all_reduce": (lambda a: _bind("all_reduce", a, group=0, reduce_op="sum"), [(2, 3)], "any"),
    "broadcast": (lambda a: _bind("broadcast", a, group=0, src=0), [(2, 3)], "any"),
    "all_gather": (lambda a: _bind("all_gather", a, group=0, size=1), [(2, 3)], "any"),
    "reduce_scatter": (lambda a: _bind("reduce_scatter", a, group=0, reduce_op="sum", size=1), [(1, 3)], "any"),
    **{name: (lambda a: _bind("all_reduce_wait", _bind("all_reduce_start", a, group=0, reduce_op="sum", seq=1), a,
                              group=0, reduce_op="sum"), [(2, 3)], "any")
       for name in ("all_reduce_start", "all_reduce_wait")},
}


def _bind(name, *args, **params):
    from jitgrad.runtime.dispatch import bind
    return bind(OPS[name], *args, **params)


def _gen():
    return jg.Generator().manual_seed(20261123)


def _index_put(a, v):
    y = a * 1.0
    y[:, jg.tensor([0, 2], device=a.device)] = v
    return y


def _eye(a):
    return jg.eye(a.shape[-1], dtype=a.dtype, device=a.device)


def _run(fn, arrays, device):
    xs = [_t(a, device, True) for a in arrays]
    out = fn(*xs)
    w = _t(np.linspace(0.5, 1.5, out.numel()).reshape(out.shape), device)
    (out * w).sum().backward()
    return out.detach().cpu().numpy(), [x.grad.cpu().numpy() for x in xs], [x.grad.device for x in xs]


@sim
def test_sim_every_primitive_has_a_case():
    assert set(CASES) == set(OPS), sorted(set(OPS) ^ set(CASES))


@sim
@pytest.mark.parametrize("name", sorted(CASES))
def test_sim_primitive_forward_and_grad_match_cpu(name):
    fn, shapes, domain = CASES[name]
    fn = _index_put if name == "index_put" else fn
    rng = np.random.default_rng(7)
    arrays = [_values(rng, s, domain) for s in shapes]
    out_c, g_c, _ = _run(fn, arrays, "cpu")
    from jitgrad.cuda.eager import _GRAPHS
    _GRAPHS.clear()
    out_g, g_g, devs = _run(fn, arrays, "cuda")
    ran = {key[0] for key in _GRAPHS}
    if OPS[name].decompose is None:
        assert name in ran, sorted(ran)    # bound on CUDA tensors
    else:       # a fused op runs on a device as its decomposition (ir/ops/opdef.py OpDef.decompose)
        assert name not in ran and ran, sorted(ran)
    np.testing.assert_allclose(out_g, out_c, rtol=1e-6, atol=1e-9)
    for a, b in zip(g_g, g_c):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    assert all(d == "cuda:0" for d in devs)        # gradients live on the parameters' device


@sim
def test_sim_float32_math_and_split_reduction():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 150)).astype(np.float32)      # rows longer than 4 x 16 threads: two passes
    x = jg.tensor(a, device="cuda")
    np.testing.assert_allclose(x.sum(1).cpu().numpy(), a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(x.amax().cpu().numpy(), a.max(), rtol=0)
    np.testing.assert_allclose(x.sum().cpu().numpy(), a.sum(), rtol=1e-5, atol=1e-4)
    y = (x.tanh() * x.sigmoid()).exp()
    assert y.dtype is jg.float32
    np.testing.assert_allclose(y.cpu().numpy(), np.exp(np.tanh(a) / (1 + np.exp(-a))), rtol=1e-5)
    z = jg.tensor([0.0, -1.0, np.inf, np.nan], device="cuda")
    np.testing.assert_array_equal(z.log().cpu().numpy(), np.log(np.array([0.0, -1.0, np.inf, np.nan], np.float32)))
    b = rng.standard_normal((2, 3, 5)).astype(np.float32)
    c = rng.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose((jg.tensor(b, device="cuda") @ jg.tensor(c, device="cuda")).cpu().numpy(), b @ c,
                               rtol=1e-5, atol=1e-6)


_X = np.random.default_rng(3).standard_normal((4, 3, 5)).astype(np.float32)
_MODULES = {        # a module made with device= and an input for it
    "Linear": (lambda dev: jg.nn.Linear(5, 2, device=dev), _X),
    "Embedding": (lambda dev: jg.nn.Embedding(6, 3, device=dev), np.array([[0, 5, 2], [1, 1, 4]])),
    "LayerNorm": (lambda dev: jg.nn.LayerNorm(5, device=dev), _X),
    "BatchNorm1d": (lambda dev: jg.nn.BatchNorm1d(3, momentum=None, device=dev), _X),
    "InstanceNorm1d": (lambda dev: jg.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, device=dev), _X),
}


@sim
@pytest.mark.parametrize("name", sorted(_MODULES))
def test_sim_modules_made_on_the_device_train_there(name):
    """``device=``: the parameters and buffers are made (and initialised) on the device, and a training step
    there gives the output and the buffers of the same module on the CPU with the same parameter values."""
    make, x = _MODULES[name]
    gpu, cpu = make("cuda"), make("cpu")
    tensors = list(gpu.parameters()) + list(gpu.buffers())
    assert tensors and all(t.is_cuda for t in tensors)
    with jg.no_grad():
        for p, q in zip(cpu.parameters(), gpu.parameters()):
            p.copy_(jg.tensor(q.cpu().numpy()))
    out_c, out_g = cpu(jg.tensor(x)), gpu(jg.tensor(x, device="cuda"))
    np.testing.assert_allclose(out_g.detach().cpu().numpy(), out_c.detach().numpy(), rtol=1e-5, atol=1e-6)
    for (n, bc), (_, bg) in zip(cpu.named_buffers(), gpu.named_buffers()):
        np.testing.assert_allclose(bg.cpu().numpy(), bc.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


@sim
@pytest.mark.parametrize("kind", ["causal", "bool", "float"])
def test_sim_attention_masks_on_the_device_match_cpu(kind):
    """F.scaled_dot_product_attention on device tensors with each kind of mask (the causal one and a boolean
    one are made on the query's device): the values and gradients of the CPU."""
    import jitgrad.nn.functional as F
    r = np.random.default_rng(5)
    arrays = [r.standard_normal(s).astype(np.float32) for s in ((2, 3, 2), (2, 4, 2), (2, 4, 3))]
    mask = {"causal": None, "bool": r.random((3, 4)) > 0.3, "float": r.standard_normal((3, 4)).astype(np.float32)}[kind]
    got = []
    for dev in ("cpu", "cuda"):
        xs = [jg.tensor(a, device=dev, requires_grad=True) for a in arrays]
        m = None if mask is None else jg.tensor(mask, device=dev)
        out = F.scaled_dot_product_attention(*xs, attn_mask=m, is_causal=mask is None)
        assert out.device == xs[0].device
        (out * out).sum().backward()
        got.append([out.detach().cpu().numpy()] + [x.grad.cpu().numpy() for x in xs])
    for c, g in zip(*got):
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6)


@sim
def test_sim_dropout_of_a_device_tensor_draws_on_the_device_with_the_cpus_mask():
    """F.dropout / nn.Dropout on a device tensor (the draw was made on the CPU: a device mismatch): the result
    stays on the device and equals the CPU's for the same seed, gradient included."""
    import jitgrad.nn.functional as F
    a = np.random.default_rng(7).standard_normal((6, 5)).astype(np.float32)
    got = []
    for dev in ("cpu", "cuda"):
        jg.manual_seed(3)
        x = jg.tensor(a, device=dev, requires_grad=True)
        y = F.dropout(x, 0.4) + jg.nn.Dropout(0.25)(x)
        assert y.device == x.device
        y.sum().backward()
        got.append((y.detach().cpu().numpy(), x.grad.cpu().numpy()))
    for c, g in zip(*got):
        np.testing.assert_allclose(g, c, rtol=1e-6, atol=1e-7)
    assert (got[0][1] == 0).any() and (got[0][1] != 0).any()


@sim
def test_sim_random_draws_run_on_the_device_with_the_cpus_numbers():
    from jitgrad.cuda.eager import _GRAPHS
    _GRAPHS.clear()
    for dtype in (jg.float32, jg.float64):
        for draw in (jg.rand, jg.randn):
            gens = [jg.Generator().manual_seed(-12345678901) for _ in range(2)]
            for g in gens:
                g._offset.fill_(2 ** 33 + 7)          # counters above 32 bits: both words of the offset
            c = draw(3, 5, dtype=dtype, generator=gens[0])
            d = draw(3, 5, dtype=dtype, generator=gens[1], device="cuda")
            assert d.is_cuda and d.dtype is dtype
            if draw is jg.rand or os.environ.get("JITGRAD_CUDA_REAL") != "1":
                np.testing.assert_array_equal(d.cpu().numpy(), c.numpy())
            else:       # on a GPU, Box-Muller's log and cos are libdevice's: the last bit may differ from libm's
                np.testing.assert_allclose(d.cpu().numpy(), c.numpy(), rtol=1e-6, atol=1e-7)
            assert int(gens[1]._offset) == int(gens[0]._offset)
    assert {key[0] for key in _GRAPHS} == {"rand_uniform", "rand_normal"}
    assert all(st.kind == "kernel" for cg in _GRAPHS.values() for st in cg.steps)      # Philox in the kernel
    x = jg.tensor([0.2, 0.9, 0.5], device="cuda")
    b = jg.bernoulli(x, generator=jg.Generator().manual_seed(4))
    assert b.is_cuda and b.cpu().tolist() == jg.bernoulli(x.cpu(), generator=jg.Generator().manual_seed(4)).tolist()

    def make(device):       # device= inside a compiled function: its graph runs where its arguments are
        g = jg.Generator().manual_seed(3)
        return g, jg.compile(lambda a: a * (jg.rand(a.shape, generator=g, dtype=a.dtype, device=device) < 0.5)
                             .to(a.dtype) + jg.randn(a.shape, generator=g, dtype=a.dtype, device=device))
    (gc, fc), (gg, fg) = make("cpu"), make("cuda")
    a = np.arange(12.0).reshape(3, 4)
    for _ in range(2):          # the generator's offset (on the CPU) advances after each call on the device
        np.testing.assert_allclose(fg(jg.tensor(a, device="cuda")).cpu().numpy(), fc(jg.tensor(a)).numpy(),
                                   rtol=1e-14, atol=1e-14)
        assert int(gg._offset) == int(gc._offset)
    src = str(fg.source(jg.tensor(a, device="cuda")))
    assert "PHX_M0" in src and "host step" not in src


@sim
def test_sim_scans_are_native_kernels():
    from jitgrad.cuda.eager import _GRAPHS
    from jitgrad.runtime.dispatch import bind
    _GRAPHS.clear()
    a = np.arange(24.0).reshape(2, 3, 4) * 0.37 - 3.0
    x = jg.tensor(a, device="cuda")
    np.testing.assert_allclose(x.cumsum(1).cpu().numpy(), np.cumsum(a, 1), rtol=1e-15)
    np.testing.assert_allclose(x.permute(2, 0, 1).cumprod(0).cpu().numpy(), np.cumprod(a.transpose(2, 0, 1), 0),
                               rtol=1e-15)
    np.testing.assert_allclose(bind(OPS["cumsum"], x, axis=2, reverse=True).cpu().numpy(),
                               np.flip(np.cumsum(np.flip(a, 2), 2), 2), rtol=1e-15)
    i = jg.tensor(np.array([[1, 2, 3], [4, 5, 6]], np.int32), device="cuda")
    c = i.cumsum(1)
    assert c.dtype is jg.int64 and c.cpu().tolist() == [[1, 3, 6], [4, 9, 15]]
    assert all(st.kind == "kernel" for cg in _GRAPHS.values() for st in cg.steps)
    assert any(k.startswith("scan_") for cg in _GRAPHS.values() for k in (kk.name for kk in cg.kernels.values()))


@sim
def test_sim_new_primitives_in_a_compiled_function_match_cpu():
    """Scans, sorting, histc, flips, the softmax family and every draw inside one compiled function on CUDA
    (its forward, backward and the generator's offset) against the same function on the CPU."""
    def make():
        g = jg.Generator().manual_seed(11)

        def f(x, t):
            F = jg.nn.functional
            y = x.cumsum(1) * x.flip(0).cumprod(1) + x.sort(1)[0] * x.argsort(0).to(x.dtype)
            y = y + F.softmax(x, 1) + jg.histc(x.detach(), 4, -2.0, 2.0)[:3] * x.tanh()
            y = y * jg.rand(x.shape, generator=g, dtype=x.dtype) + jg.randn(x.shape, generator=g, dtype=x.dtype)
            k = jg.multinomial(x.detach().abs(), 2, generator=g) + jg.randperm(3, generator=g)[:2]
            return F.cross_entropy(y, t) + x.norm(p=3) + k.sum().to(x.dtype)
        return g, jg.compile(lambda x, t: jg.autograd.grad(f(x, t), x, create_graph=True)[0].sum() + f(x, t))
    rng = np.random.default_rng(2)
    a = rng.uniform(-2.0, 2.0, (2, 3))
    t = np.array([2, 0])
    (gc, fc), (gg, fg) = make(), make()
    for _ in range(2):
        xc, xg = jg.tensor(a, requires_grad=True), jg.tensor(a, device="cuda", requires_grad=True)
        yc, yg = fc(xc, jg.tensor(t)), fg(xg, jg.tensor(t, device="cuda"))
        yc.backward()
        yg.backward()
        assert yg.is_cuda and xg.grad.is_cuda
        np.testing.assert_allclose(yg.item(), yc.item(), rtol=1e-10)
        np.testing.assert_allclose(xg.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-9, atol=1e-11)
        assert int(gg._offset) == int(gc._offset)
    assert fg.stats["traces"] == 1 and fg.stats["eager_fallbacks"] == 0 and fg.stats["compiled_calls"] == 4
    src = str(fg.source(xg, jg.tensor(t, device="cuda")))
    assert "PHX_M0" in src and "scan_" in src and "host step: argsort" in src and "host step: randperm" in src


# ---- the device surface ------------------------------------------------------------------------------------

@sim
def test_sim_device_surface():
    assert jg.cuda.is_available() and jg.cuda.device_count() == 1
    d = jg.device("cuda:0")
    assert d.type == "cuda" and d.index == 0 and str(d) == "cuda:0" and d == "cuda"
    for make in (lambda: jg.zeros(2, 3, device="cuda"), lambda: jg.ones(2, device=d), lambda: jg.full((2,), 3.0, device="cuda"),
                 lambda: jg.arange(4, device="cuda"), lambda: jg.randn(2, device="cuda"), lambda: jg.eye(2, device="cuda"),
                 lambda: jg.tensor([1.0, 2.0], device="cuda"), lambda: jg.linspace(0, 1, 3, device="cuda"),
                 lambda: jg.rand(2, device="cuda"), lambda: jg.randint(0, 3, (2,), device="cuda"),
                 lambda: jg.empty(2, device="cuda"), lambda: jg.zeros_like(jg.ones(2, device="cuda"))):
        t = make()
        assert t.is_cuda and t.device == d and t.device.type == "cuda"
    x = jg.tensor([1.0, 2.0])
    g = x.cuda()
    assert g.is_cuda and not x.is_cuda and g.is_leaf
    assert g.cpu().device == "cpu" and g.to("cpu").numpy().tolist() == [1.0, 2.0]
    assert x.to("cuda").is_cuda and x.to(d, jg.float64).dtype is jg.float64 and g.cuda() is g
    assert repr(g) == "tensor([1., 2.], device='cuda:0')"
    assert g.tolist() == [1.0, 2.0] and g[1].item() == 2.0 and g.shape == (2,) and g.size(-1) == 2
    jg.cuda.synchronize()


@sim
def test_sim_device_errors_are_torchs():
    g = jg.tensor([1.0, 2.0], device="cuda")
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu\(\) to "
                                        r"copy the tensor to host memory first."):
        g.numpy()
    with pytest.raises(TypeError, match="can't convert cuda:0"):
        np.asarray(g)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least two "
                                           r"devices, cuda:0 and cpu! \(when checking argument for argument 1 in "
                                           r"method mul\)"):
        g * jg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cpu"):
        jg.tensor([1.0, 2.0]) @ g
    f = jg.compile(lambda a: a * 2, device="cuda")
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cpu"):
        f(jg.ones(2))


@sim
def test_sim_gradients_cross_devices_and_live_on_the_parameters_device():
    w = jg.tensor([1.0, -2.0, 3.0], requires_grad=True)            # a CPU leaf
    y = (w.cuda() * 2.0).tanh()
    assert y.is_cuda and y.grad_fn is not None
    assert w.cuda().grad_fn.name() == "ToCopyBackward0"
    y.sum().backward()
    assert w.grad.device == "cpu"
    np.testing.assert_allclose(w.grad.numpy(), 2 * (1 - np.tanh(2 * w.detach().numpy()) ** 2), rtol=1e-6)
    p = jg.tensor([1.0, -2.0, 3.0], device="cuda", requires_grad=True)   # a CUDA leaf
    (p * p).sum().backward()
    assert p.grad.is_cuda and p.grad.cpu().tolist() == [2.0, -4.0, 6.0]
    (p * p).sum().backward()        # accumulates on the device
    assert p.grad.cpu().tolist() == [4.0, -8.0, 12.0]


@sim
def test_sim_out_of_range_index_raises_after_the_step_and_updates_nothing():
    W = jg.tensor([1.0, 2.0, 3.0], device="cuda", requires_grad=True)

    @jg.compile
    def step(i):
        loss = (W[i] * 2.0).sum()
        loss.backward()
        with jg.no_grad():
            W.sub_(0.5 * W.grad)
            W.grad = None
        return loss.detach()

    step(jg.tensor([0, 2], device="cuda"))
    before = W.detach().cpu().numpy().copy()
    with pytest.raises(IndexError, match=r"getitem: index 7 is out of bounds for dimension 0 with size 3"):
        step(jg.tensor([0, 7], device="cuda"))
    np.testing.assert_array_equal(W.detach().cpu().numpy(), before)

    def put(y, i):
        y = y.clone()
        y[i] = 7.0
        return y
    fp = jg.compile(put)
    np.testing.assert_array_equal(fp(jg.zeros(4, device="cuda"), jg.tensor([1, -1], device="cuda")).cpu().numpy(),
                                  [0.0, 7.0, 0.0, 7.0])
    with pytest.raises(IndexError, match=r"index_put: index -5 is out of bounds for dimension 0 with size 4"):
        fp(jg.zeros(4, device="cuda"), jg.tensor([-5], device="cuda"))
    fd = jg.compile(lambda a, b: a // b)
    np.testing.assert_array_equal(fd(jg.tensor([7, -7], device="cuda"), jg.tensor([2, 2], device="cuda")).cpu().numpy(),
                                  [3, -4])
    with pytest.raises(RuntimeError, match="floordiv: ZeroDivisionError"):
        fd(jg.tensor([7, 1], device="cuda"), jg.tensor([2, 0], device="cuda"))


@sim
def test_sim_bad_indices_met_at_once_report_the_first_in_launch_order():
    """Threads of a gather launch meet bad indices at once (three blocks here, the simulator's threads racing): the
    least key, the step id above the flat position, claims the record (``cuda_kernels.claim``), so the report is
    the first bad position of the first failing step, whole, call after call, as eager mode's."""
    x = jg.tensor(np.arange(5.0), device="cuda")
    f = jg.compile(lambda i, j: x[i] * 2.0 + x[j])
    good = np.arange(600) % 5
    bad_i, bad_j = good.copy(), good.copy()
    bad_i[[10, 300, 599]] = [40, 50, -60]
    bad_j[[0, 500]] = [70, 80]
    for i, j, want in ((bad_i, good, 40), (good, bad_j, 70), (bad_i, bad_j, 40)):
        with pytest.raises(IndexError) as eager:
            x.cpu()[jg.tensor(i)] * 2.0 + x.cpu()[jg.tensor(j)]
        assert f"index {want} is out of bounds" in str(eager.value)
        for _ in range(2):
            with pytest.raises(IndexError, match=f"getitem: index {want} is out of bounds for dimension 0 with size 5"):
                f(jg.tensor(i, device="cuda"), jg.tensor(j, device="cuda"))
    np.testing.assert_array_equal(f(jg.tensor(good, device="cuda"), jg.tensor(good, device="cuda")).cpu().numpy(),
                                  good * 3.0)


def test_index_keys_order_steps_then_positions_of_any_size():
    """Each step that records index errors gets a key base past every earlier step's positions (``Launches.
    index_step``): a step of 2^41 positions (past the old 40-bit shift) keeps its keys below the next step's, and
    a program whose positions an int64 key cannot order is refused with a clear error."""
    from jitgrad.codegen.gpu.cuda_launches import Launches
    from jitgrad.codegen.kernels.index_checks import NO_KEY
    cg = Launches.__new__(Launches)
    cg.index_steps, cg.key_next = [], 0
    e = type("E", (), {"op": type("Op", (), {"name": "getitem"})})()
    assert cg.index_step(e, 2 ** 41) == (0, 0)
    assert cg.index_step(e) == (1, 2 ** 41)             # a guard: one key
    assert cg.index_step(e, 5) == (2, 2 ** 41 + 1)
    with pytest.raises(ValueError, match="getitem: the program's index checks span"):
        cg.index_step(e, NO_KEY)
    assert len(cg.index_steps) == 3
    # a symbolic size (CUDA programs are laid out per concrete shape): refused naming the op, nothing recorded
    from jitgrad.ir.symbolic import ShapeEnv
    n, at = ShapeEnv().symbol(6, "B") * 4, cg.key_next
    with pytest.raises(NotImplementedError, match="getitem: a CUDA program's index checks need each step's size"):
        cg.index_step(e, n)
    assert len(cg.index_steps) == 3 and cg.key_next == at


@sim
def test_sim_keys_past_40_bits_report_the_first_step(monkeypatch):
    """Key bases far past 2^40 (``Launches.key_next`` started at 2^62): the gather kernels' keys (base + position)
    still order the records, so the first launch's first bad position is reported, as eager mode's."""
    from jitgrad.codegen.gpu import cuda_launches
    init = cuda_launches.Launches.__init__

    def high(self, *a, **k):
        init(self, *a, **k)
        self.key_next = 2 ** 62
    monkeypatch.setattr(cuda_launches.Launches, "__init__", high)
    x = jg.tensor(np.arange(5.0), device="cuda")
    f = jg.compile(lambda i, j: x[i] * 2.0 + x[j])
    bad_i, bad_j = np.arange(600) % 5, np.arange(600) % 5
    bad_i[[300, 599]] = [40, 50]
    bad_j[[0, 10]] = [70, 80]
    for _ in range(2):
        with pytest.raises(IndexError, match="getitem: index 40 is out of bounds for dimension 0 with size 5"):
            f(jg.tensor(bad_i, device="cuda"), jg.tensor(bad_j, device="cuda"))
    good = np.arange(600) % 5
    np.testing.assert_array_equal(f(jg.tensor(good, device="cuda"), jg.tensor(good, device="cuda")).cpu().numpy(),
                                  good * 3.0)


@sim
def test_sim_claim_keeps_the_least_key_met_last_whole():
    """``cuda_kernels.claim`` alone: thread t records key n - t with fields naming t, so the least key is met last
    (the simulator starts a block's threads in order); a first-come claim would keep thread 0's record, the claim
    keeps thread n - 1's, every field its own, and frees the lock."""
    from jitgrad.codegen.gpu.cuda import _dispatcher
    from jitgrad.codegen.gpu.cuda_kernels import CudaKernel, claim
    body = ["    i = cuda.grid(1)", "    if i < n:"] + claim("n - i", ["1", "i", "3 * i", "i % 7"], "        ")
    kern = CudaKernel("claim", "\n".join(body), [("ierr", "int64[::1]"), ("n", "int64")])
    from numba import cuda
    n = 300
    ierr = cuda.to_device(np.array([0, 0, 0, 0, np.iinfo(np.int64).max, 0], np.int64))
    _dispatcher(kern)[2, 256](ierr, n)
    assert ierr.copy_to_host().tolist() == [1, n - 1, 3 * (n - 1), (n - 1) % 7, 1, 0]


# ---- compiled programs ----------------------------------------------------------------------------------------

def _mlp(device, seed=0):
    rng = np.random.default_rng(seed)
    W1 = jg.tensor(rng.standard_normal((4, 6)) * 0.5, device=device, requires_grad=True)
    b1 = jg.zeros(6, dtype=jg.float64, device=device, requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((6, 3)) * 0.5, device=device, requires_grad=True)
    params = [W1, b1, W2]

    @jg.compile
    def step(x, y):
        h = (x @ W1 + b1).tanh()
        logits = h @ W2
        loss = jg.nn.functional.cross_entropy(logits, y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None
        return loss.detach()
    return params, step


@sim
def test_sim_compiled_training_step_matches_cpu():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4))
    y = np.array([0, 2, 1, 1, 0])
    pc, sc = _mlp("cpu")
    pg, sg = _mlp("cuda")
    for _ in range(2):
        lc = sc(jg.tensor(x), jg.tensor(y))
        lg = sg(jg.tensor(x, device="cuda"), jg.tensor(y, device="cuda"))
        assert lg.is_cuda
        np.testing.assert_allclose(lg.item(), lc.item(), rtol=1e-10)
    for a, b in zip(pg, pc):
        assert a.is_cuda and a.grad is None
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert sg.stats["traces"] == 1 and sg.stats["compiled_calls"] == 2
    src = str(sg.source(jg.tensor(x, device="cuda"), jg.tensor(y, device="cuda")))
    assert "CUDA target" in src and "cuda.grid(1)" in src and "cuda.shared.array" in src


@sim
def test_sim_compiled_gradients_and_double_backward_match_cpu():
    def f(x, w):
        return ((x @ w).sin() * x.sum(1, keepdim=True)).sum()
    fc = jg.compile(f)
    rng = np.random.default_rng(5)
    xa, wa = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    res = {}
    for dev in ("cpu", "cuda"):
        x, w = _t(xa, dev, True), _t(wa, dev, True)
        y = fc(x, w)
        gx, gw = jg.autograd.grad(y, (x, w), create_graph=True)
        hx, = jg.autograd.grad((gx * gx).sum() + gw.sum(), x)
        res[dev] = [t.detach().cpu().numpy() for t in (y, gx, gw, hx)]
        if dev == "cuda":
            assert gx.is_cuda and hx.is_cuda
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@sim
def test_sim_compiled_anomaly_names_the_users_line():
    p = jg.tensor([1.0, -1.0, 4.0], device="cuda", requires_grad=True)

    @jg.compile
    def step(x):
        loss = (x * p).sqrt().sum()      # sqrt(-1) = nan forward; SqrtBackward0 returns nan
        loss.backward()
        with jg.no_grad():
            p.sub_(0.1 * p.grad)
        p.grad = None
        return loss.detach()
    with jg.autograd.detect_anomaly():
        with pytest.raises(RuntimeError) as ei:
            step(jg.ones(3, device="cuda"))
    msg = str(ei.value)
    assert "Function 'SqrtBackward0' returned nan values in its 0th output." in msg
    assert "test_cuda.py" in msg and "(x * p).sqrt().sum()" in msg
    assert p.cpu().tolist() == [1.0, -1.0, 4.0]       # an anomaly leaves the state untouched


@sim
def test_sim_profiler_events_per_kernel():
    f = jg.compile(lambda a, b: (a @ b).tanh().sum())
    a, b = jg.ones(2, 3, device="cuda"), jg.ones(3, 2, device="cuda")
    f(a, b)
    with jg.autograd.profiler.profile(use_cuda=True) as prof:
        f(a, b)
        (a * 2).sum()
    names = [e.key for e in prof.key_averages()]
    assert any(n.startswith("compiled:") for n in names)
    assert any("tiled GEMM" in n for n in names) and any(n.startswith("fused_") for n in names)
    assert "mul" in names
    kernels = [e for e in prof.function_events if e.name.startswith(("fused_", "matmul"))]
    assert kernels and all(e.self_cuda_time_total > 0 for e in kernels)    # CUDA-event times
    assert all(e.self_cuda_time_total == 0 for e in prof.function_events if e.name == "compiled:<lambda>")
    table = prof.key_averages().table(sort_by="self_cuda_time_total")
    assert "Self CUDA" in table and "Self CUDA time total" in table


# ==== PTX ======================================================================================================

@ptx
def test_ptx_kernels_of_several_programs_target_sm90():
    import jitgrad as jg
    rng = np.random.default_rng(0)
    W = jg.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)

    @jg.compile
    def step(x, i):
        h = (x @ W).tanh()                          # GEMM, elementwise
        loss = h.sum() + h.amax(1).mean() + x[i, i].sum()   # reductions, gather (scatter in the backward)
        loss.backward()
        with jg.no_grad():
            W.sub_(0.1 * W.grad)
        return loss.detach()

    x = jg.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
    i = jg.tensor([0, 2])
    with jg.autograd.detect_anomaly():
        kernels = step.ptx(x, i, cc=(9, 0))           # anomaly checks compiled in
    kinds = {name.split("_")[0] for name in kernels}
    assert {"gemm", "fused", "reduce", "gather", "scatter", "check", "copy"} <= kinds, kinds
    for name, text in kernels.items():
        assert ".target sm_90" in text, name
        assert text.count(".entry ") == 1, name
    assert any("atom.global.add" in t or "red.global.add" in t for t in kernels.values())   # counters, scatter-add


@sim
def test_sim_eager_anomaly_on_cuda_names_the_forward_line():
    x = jg.tensor([1.0, -1.0], device="cuda", requires_grad=True)
    with jg.autograd.detect_anomaly():
        y = x.sqrt()                            # the forward line anomaly mode must name
        with pytest.raises(RuntimeError) as ei:
            y.sum().backward()
    assert "Function 'SqrtBackward0' returned nan values in its 0th output." in str(ei.value)
    assert "y = x.sqrt()" in str(ei.value)


@sim
def test_sim_kernels_are_keyed_by_structure_and_cat_is_native():
    from jitgrad.cuda.eager import _GRAPHS
    _GRAPHS.clear()
    jg.ones(2, 3, device="cuda").tanh()
    jg.ones(7, device="cuda").tanh()        # another size, another rank after coalescing: the same loop
    keys = [set(cg.kernels) for cg in _GRAPHS.values()]
    assert len(keys) == 2 and keys[0] == keys[1]
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(4, dtype=np.int64).reshape(2, 2)
    out = jg.cat([jg.tensor(a, device="cuda"), jg.tensor(b, device="cuda"), jg.tensor(a, device="cuda")], 1)
    np.testing.assert_array_equal(out.cpu().numpy(), np.concatenate([a, b, a], 1))
    assert all(st.kind != "host" for cg in _GRAPHS.values() for st in cg.steps)


@sim
def test_sim_shared_arrays_are_one_per_block_when_the_first_lookup_races(monkeypatch):
    """The simulator makes a launch's shared array at its first lookup by source line, unlocked: a thread that
    loses the GIL between its miss and its store keeps a private array (garbage to the rest of its block; the
    sim set's rare wrong values).  Force that interleaving for every thread (a slow ``np.empty`` there):
    reductions, their second pass and the GEMM must still be exact."""
    if not jg.cuda.is_simulator():
        pytest.skip("the simulator's shared arrays")
    import time
    import types
    from numba.cuda.simulator import kernelapi

    made = [0]

    class SlowEmpty(types.ModuleType):
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(*args, **kw):
            made[0] += 1
            time.sleep(0.02)                    # gives up the GIL between the lookup and the store
            return np.empty(*args, **kw)
    monkeypatch.setattr(kernelapi, "np", SlowEmpty("numpy"))
    x = np.arange(1.0, 301.0)
    a, b = np.arange(12.0).reshape(3, 4), np.arange(8.0).reshape(4, 2)
    assert jg.tensor(x, device="cuda").sum().cpu().item() == x.sum()          # block trees, then the finish pass
    np.testing.assert_array_equal(jg.tensor(x.reshape(3, 100), device="cuda").amax(1).cpu().numpy(),
                                  x.reshape(3, 100).max(1))
    np.testing.assert_array_equal((jg.tensor(a, device="cuda") @ jg.tensor(b, device="cuda")).cpu().numpy(), a @ b)
    assert made[0] > 2 * 6          # the race was forced: 6 shared-array lines ran (2 reductions, 2 finishes, GEMM)


# the compile-agreement programs on CUDA (a representative subset: the simulator is slow; programs that read
# module-level CPU tensors, e.g. fixed index tensors, are left out since those would be a device mix)
AGREEMENT = ["exp", "sigmoid", "where_scalar", "pow_tensor", "sum_tuple_dims", "amax_amin", "logsumexp",
             "transpose_permute", "getitem_basic", "setitem_nonleaf", "cat_dim1", "stack", "matmul_vec",
             "layernorm_by_hand", "gelu"]     # ~100 s on the simulator (softmax, var_std, batched matmul: 25-60 s each)


@sim
@pytest.mark.parametrize("name", AGREEMENT)
def test_sim_compile_agreement_programs_on_cuda(name):
    sys.path.insert(0, os.path.dirname(__file__))
    from compiled import evaluate
    from test_compile_agreement import PROGRAMS, _arrays
    _, fn, shapes, domain = next(p for p in PROGRAMS if p[0] == name)
    arrays = _arrays(name, shapes, domain)
    want = evaluate(fn, arrays, "eager")
    got = evaluate(fn, arrays, "compiled", device="cuda")
    for key in ("values", "grads", "outer", "hvp", "inner_hvp"):
        if key not in want:
            continue
        assert len(got[key]) == len(want[key]), key
        for a, b in zip(got[key], want[key]):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=f"{name}: {key}")


@sim
def test_sim_emit_nvtx_pushes_a_range_per_op_kernel_and_block(monkeypatch):
    nvtx = pytest.importorskip("nvtx")
    pushed, depth = [], [0]

    def push(name):
        pushed.append(name)
        depth[0] += 1

    def pop():
        depth[0] -= 1
    monkeypatch.setattr(nvtx, "push_range", push)
    monkeypatch.setattr(nvtx, "pop_range", pop)
    f = jg.compile(lambda a: (a * 2.0).tanh().sum())
    a = jg.ones(3, device="cuda")
    f(a)
    with jg.autograd.profiler.emit_nvtx():
        with jg.autograd.profiler.record_function("my_block"):
            f(a)
            a.exp()
    assert depth[0] == 0
    assert "my_block" in pushed and "exp" in pushed and "compiled:<lambda>" in pushed
    assert any(n.startswith("fused_") for n in pushed)


@ptx
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ptx_every_primitive_forward_and_backward_typechecks_for_the_gpu(dtype):
    """The simulator runs kernels as Python, so it cannot catch a kernel the real CUDA target fails to type:
    every primitive's forward and backward kernels (with anomaly checks) must build PTX."""
    for name in sorted(CASES):
        fn, shapes, domain = CASES[name]
        fn = _index_put if name == "index_put" else fn
        rng = np.random.default_rng(7)
        xs = [jg.tensor(_values(rng, s, domain).astype(dtype), requires_grad=True) for s in shapes]

        def step(*xs):
            out = fn(*xs)
            (out * 1.5).sum().backward()
            return out.detach()
        with jg.autograd.detect_anomaly():
            kernels = jg.compile(step).ptx(*xs)
        assert kernels, name
        for k, text in kernels.items():
            assert ".target sm_90" in text and text.count(".entry ") == 1, (name, k)


@sim
def test_sim_deepcopy_and_pickle_keep_the_device():
    import copy
    import pickle
    p = jg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    (p * p).sum().backward()
    q = copy.deepcopy(p)
    assert q.is_cuda and q.requires_grad and q.grad.is_cuda and q.grad.cpu().tolist() == [2.0, 4.0]
    r = pickle.loads(pickle.dumps(p.detach()))
    assert r.is_cuda and r.cpu().tolist() == [1.0, 2.0]


@sim
def test_sim_inplace_writes_reach_aliases():
    x = jg.tensor([1.0, 2.0, 3.0], device="cuda")
    d = x.detach()
    d.add_(1.0)
    assert x.cpu().tolist() == [2.0, 3.0, 4.0]
    p = jg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    p.data.mul_(3.0)                   # old-style SGD through .data
    assert p.detach().cpu().tolist() == [3.0, 6.0]
    x[1] = 10.0
    x[jg.tensor([0, 2], device="cuda")] += 1.0
    assert x.cpu().tolist() == [3.0, 10.0, 5.0] and x._version >= 3
    y = x.to(jg.float64)
    y *= 2
    assert y.dtype is jg.float64 and y.cpu().tolist() == [6.0, 20.0, 10.0]


@sim
def test_sim_tensor_metadata_on_cuda():
    g = jg.ones(2, 3, device="cuda", dtype=jg.float64)
    assert g.is_contiguous() and g.contiguous() is g and g.element_size() == 8 and g.numel() == 6
    c = jg.zeros(1, dtype=jg.float32).to(g)        # to(other): other's dtype and device
    assert c.is_cuda and c.dtype is jg.float64
    assert g.new_zeros((2,)).is_cuda and len(g) == 2 and [r.cpu().tolist() for r in g] == [[1.0] * 3] * 2


@sim
def test_sim_gpu_benchmark_smoke(capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import cuda_b1_b2_b3
    assert cuda_b1_b2_b3.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "B1 MLP step" in out and "B3 hvp" in out and "B2 achieved bandwidth" in out


@sim
def test_sim_gradcheck_and_gradgradcheck_on_cuda_inputs():
    x = jg.tensor(np.array([0.3, -0.7, 1.2]), device="cuda", requires_grad=True)
    w = jg.tensor(np.array([[0.3, -0.7], [1.0, 2.0], [0.5, 0.1]]), device="cuda", requires_grad=True)

    def f(a, b):
        return ((a @ b).tanh() * a.sum()).exp()
    assert jg.autograd.gradcheck(f, (x, w))
    assert jg.autograd.gradgradcheck(f, (x, w))
    assert jg.autograd.gradcheck(jg.compile(f), (x, w))
    assert x.grad is None and x.is_cuda


@sim
def test_sim_cpu_scalar_tensors_mix_with_cuda_as_in_torch():
    g = jg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    s = jg.tensor(3.0, requires_grad=True)          # 0-dim, on the CPU
    y = (g * s).sum()
    y.backward()
    assert y.is_cuda and g.grad.is_cuda and s.grad.device == "cpu" and s.grad.item() == 3.0
    lr = jg.tensor(0.5)
    f = jg.compile(lambda a: a * lr)                 # a captured CPU scalar inside a compiled CUDA function
    assert f(g.detach()).cpu().tolist() == [0.5, 1.0]


@sim
def test_sim_inplace_through_a_view_reaches_the_base():
    x = jg.zeros(2, 3, device="cuda")
    v = x[0]
    v += 1.0
    x[1, 1:] += 2.0
    t = x.T
    t[0].mul_(5.0)                                  # a view of a view: through permute and getitem
    x.reshape(6)[5] = 7.0
    assert x.cpu().tolist() == [[5.0, 1.0, 1.0], [0.0, 2.0, 7.0]]
    assert v.cpu().tolist() == [5.0, 1.0, 1.0] and t.cpu().tolist() == [[5.0, 0.0], [1.0, 2.0], [1.0, 7.0]]
    x.add_(1.0)                                     # views made earlier see the base's new values
    assert v.cpu().tolist() == [6.0, 2.0, 2.0] and t[1].cpu().tolist() == [2.0, 3.0]
    p = jg.ones(3, device="cuda", requires_grad=True) * 1.0
    with pytest.raises(RuntimeError, match="in-place modification of a view"):
        p[0:2].mul_(2.0)


@sim
def test_sim_scatter_reduce_and_index_reduce_on_2d_device_tensors():
    import warnings
    out = []
    for dev in ("cuda", "cpu"):
        idx = jg.tensor([[0, 1], [0, 0], [2, 1]], device=dev)
        x = jg.tensor(np.arange(6.0).reshape(3, 2), device=dev, requires_grad=True)
        s = jg.tensor(np.arange(6.0).reshape(3, 2) * 0.5, device=dev, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # index_reduce's beta warning
            y = (x.scatter_reduce(0, idx, s, "amax", include_self=False) + x.scatter_reduce(0, idx, s, "mean")
                 + x.index_reduce(0, jg.tensor([2, 0, 0], device=dev), s, "prod") + x.scatter_add(0, idx, s))
        (y * y).sum().backward()
        assert y.device == dev and s.grad.device == dev
        out.append([t.cpu().detach().numpy() for t in (y, x.grad, s.grad)])
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@sim
@pytest.mark.parametrize("background", [True, False])
def test_sim_compiled_function_making_cuda_tensors_inside(background):
    """A CUDA tensor made inside a compiled function is a constant of its graph (as on the CPU), not a captured
    input: the trace's tensor dies with the trace, and later calls must not need it."""
    def g(x):
        y = jg.zeros(2, device="cuda")
        y.add_(x)                               # in place on a tensor made inside: fresh each call, as eager
        return x + jg.ones(2, device="cuda"), y * jg.arange(2.0, device="cuda")
    f = jg.compile(g, background=background)
    x = jg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    for _ in range(3):
        a, b = f(x)
        assert a.is_cuda and b.is_cuda
        np.testing.assert_allclose(a.detach().cpu().numpy(), [2.0, 3.0])
        np.testing.assert_allclose(b.detach().cpu().numpy(), [0.0, 2.0])
    (a.sum() + b.sum()).backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), [1.0, 2.0])


@sim
def test_sim_masked_loss_with_a_data_dependent_size_compiles_once():
    """x[mask] on device tensors inside @jg.compile: a size bounded by the mask (ir/passes/bounded_sizes.py), the
    nonzero step a host step; the loss, its gradient and the returned x[mask] equal NumPy's for every density."""
    rng = np.random.default_rng(5)
    xn = rng.standard_normal((4, 3)).astype(np.float32)
    x = jg.tensor(xn, device="cuda", requires_grad=True)

    @jg.compile(backend="numba", background=False)
    def step(x, m):
        loss = (x[m] ** 2).mean()
        loss.backward()
        return loss.detach(), (x[m] * 2).detach()
    for dens in (0.5, 0.0, 1.0):
        mn = rng.random((4, 3)) < dens
        x.grad = None
        with np.errstate(all="ignore"):       # (the simulator's scalar 0 / 0 for an empty mask's mean)
            loss, y = step(x, jg.tensor(mn, device="cuda"))
        np.testing.assert_allclose(float(loss.cpu()), (xn[mn] ** 2).mean() if mn.any() else np.nan, rtol=1e-6)
        np.testing.assert_allclose(y.cpu().numpy(), 2 * xn[mn], rtol=1e-6)
        np.testing.assert_allclose(x.grad.cpu().numpy(), np.where(mn, 2 * xn / max(mn.sum(), 1), 0), rtol=1e-5,
                                   atol=1e-7)
    assert step.stats["traces"] == 1 and step.stats["eager_fallbacks"] == 0
