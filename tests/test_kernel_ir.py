"""The kernel IR (codegen/kernels/kernel_ir.py) and its renderers on randomly generated programs (hypothesis).

A program is a chain of elementwise ops over two inputs, built from the OpDefs' own scalar bodies (the IR values
codegen builds for them).  Each program runs four ways: rendered to LLVM IR (codegen/kernels/ir_loops.py) and compiled,
rendered to Numba text (codegen/kernels/numba_render.py) and compiled by Numba, run by the reference interpreter
(codegen/kernels/kernel_interp.py), and its scalar written with the math table's CUDA forms and run as Python, as
Numba's CUDA simulator runs a kernel.  LLVM and Numba agree to the bit; the interpreter (which fuses no FMA)
and the CUDA forms (libm's functions, not mathlib's) agree to rounding.  Plus: the printer, and typing.
"""
import ctypes
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jitgrad.codegen.native import cache, llvm_build, objload
from jitgrad.codegen.kernels import ir_loops, kernel_interp, kernel_ir as ki, kernel_listing, loops
from jitgrad.codegen.kernels.math_table import MathCalls
from jitgrad.codegen.kernels.numba_render import Exprs
from jitgrad.ir.ops.opdef import OPS

_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_T = {"float32": ki.F32, "float64": ki.F64}

# op -> arity; unary ops get a tame argument where their domain is limited
UNARY = ["neg", "exp", "tanh", "sigmoid", "sin", "cos", "abs", "relu", "erf", "sqrt", "log1p", "expm1", "atan",
         "floor", "sign"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "where_gt", "atan2", "hypot", "copysign"]
_TAME = {"exp": lambda m, x: m.tanh(x) * m.lit(4.0), "expm1": lambda m, x: m.tanh(x) * m.lit(4.0),
         "sqrt": lambda m, x: m.abs(x), "log1p": lambda m, x: m.abs(x)}


def _apply(m, name, args):
    if name == "where_gt":
        return OPS["where"].scalar(m, args[0] > args[1], args[0], args[1])
    if name in _TAME:
        args = [_TAME[name](m, args[0])]
    return OPS[name].scalar(m, *args)


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(["float32", "float64"]))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(UNARY)), (draw(st.integers(0, 7)),)))
        else:
            steps.append((draw(st.sampled_from(BINARY)), (draw(st.integers(0, 7)), draw(st.integers(0, 7)))))
    return dtype, steps


def _scalar(dtype, steps, xs):
    """The program's value over input values ``xs`` (kernel IR)."""
    m = MathCalls(dtype)
    vals = list(xs)
    for name, refs in steps:
        args = [vals[-1 - r % len(vals)] for r in refs]
        vals.append(ki.cast(ki.val(_apply(m, name, args)), _T[dtype]))
    return vals[-1]


def _kernel(dtype, steps):
    t = _T[dtype]
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    ps = [b.let(f"p{j}", b.A[1 + j].ptr(t)) for j in range(3)]
    with b.loop("i0", n0) as i0:
        xs = [b.let(f"x{j}", ps[j][i0]) for j in range(2)]
        b.store(ps[2], i0, b.let("t0", _scalar(dtype, steps, xs)))
    return loops.Kernel("kernel", b.finish(), rank=1, operands=(), classes=(), parallel=False)


def _block(args, out):
    return np.array([out.size] + [a.ctypes.data for a in args] + [out.ctypes.data], np.int64)


def _cuda_python(dtype, steps):
    """The program's scalar written with the CUDA forms, as a Python function (what the simulator runs)."""
    x0, x1 = (ki.read(ki.Var(f"x{j}", _T[dtype])) for j in range(2))
    ex = Exprs("cuda")
    text = ex(_scalar(dtype, steps, [x0, x1]))
    ns = {"math": math, "np": np, "float32": np.float32, "float64": np.float64, "int32": np.int32,
          "int64": np.int64, "uint8": np.uint8, "bool_": np.bool_}
    for name, src in ex.consts.items():
        ns[name] = eval(src, ns)        # noqa: S307 - constants the renderer wrote (np.float32(0.5))
    exec(f"def f(x0, x1):\n    return {text}\n", ns)    # noqa: S102 - as the simulator runs a kernel's text
    return ns["f"]


def _inputs(dtype, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * rng.choice([0.1, 1.0, 3.0], n)
    x[:4] = [0.0, -0.0, 1.0, -2.5]
    return x.astype(dtype)


def _close(a, b, dtype, what):
    tol = 2e-4 if dtype == "float32" else 1e-9
    scale = float(np.nanmax(np.abs(b), initial=1.0))
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=what)


@settings(max_examples=15)
@given(programs())
def test_random_programs_agree_across_renderers_and_the_interpreter(prog):
    dtype, steps = prog
    k = _kernel(dtype, steps)
    n = 64
    x, y = _inputs(dtype, n, 1), _inputs(dtype, n, 2)
    key = cache.cache_key(k.source, extra=("test-kernel-ir",))
    blob = llvm_build.compile_kernel(key, ir_loops.render(k.ir, key))
    llvm_out = np.empty_like(x)
    _CALL(objload.load([blob])[key])(_block((x, y), llvm_out).ctypes.data)
    numba_fn = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, k.source).kernel
    numba_out = np.empty_like(x)
    _CALL(numba_fn.address)(_block((x, y), numba_out).ctypes.data)
    same = (llvm_out == numba_out) | (np.isnan(llvm_out) & np.isnan(numba_out))
    assert same.all(), (steps, llvm_out[~same][:3], numba_out[~same][:3])
    interp_out = np.empty_like(x)
    kernel_interp.run(k.ir, _block((x, y), interp_out))
    _close(interp_out, llvm_out, dtype, f"interpreter vs LLVM: {steps}")
    f = _cuda_python(dtype, steps)
    with np.errstate(all="ignore"):
        cuda_out = np.array([f(a, b) for a, b in zip(x, y)], dtype)
    _close(cuda_out, llvm_out, dtype, f"CUDA forms vs LLVM: {steps}")


def test_a_kernel_prints_readably():
    k = _kernel("float32", [("tanh", (0,)), ("mul", (0, 1))])
    text = kernel_listing.format_kernel(k.ir)
    assert text.splitlines()[0] == "kernel(A):"
    assert "for i0 in range(n0):" in text and "p0: f32* = ptr<f32>(A[1])" in text
    assert "t0: f32 = (tanh_f32(x1) * x1)" in text and "p2[i0] = t0" in text
    assert k.listing() == text


def test_values_are_typed_as_numba_types_them():
    i32 = ki.read(ki.Var("a", ki.I32))
    u8 = ki.read(ki.Var("u", ki.U8))
    f32 = ki.read(ki.Var("f", ki.F32))
    assert (i32 + i32).t == ki.I64 and (u8 + u8).t == ki.U64 and (f32 + u8).t == ki.F32
    assert (f32 + i32).t == ki.F64 and (i32 / i32).t == ki.F64 and (f32 * np.float32(2)).t == ki.F32
    assert (f32 * 2.0).t == ki.F64 and ((i32 > 0) + i32).t == ki.I64 and ((u8 > 3) * f32).t == ki.F32
    assert ki.select(i32 > 0, f32, i32).t == ki.F64 and (-i32).t == ki.I64
    with pytest.raises(TypeError):
        bool(i32 > 0)           # no truth at build time: a select or an If
