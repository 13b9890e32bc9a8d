"""The reference interpreter of the kernel IR: runs a ``KernelIR`` statement by statement on NumPy scalars, reading
and writing memory at the addresses its argument block holds (as the compiled kernel does).

Every value computes in its IR type with NumPy's scalar of that type (float32 arithmetic stays float32, integer
arithmetic wraps), math calls through mathlib's own IR builders (so the interpreter checks the definitions the
LLVM renderer compiles), loops in order.  What it does not model: fast-math contraction (LLVM may fuse ``a * b +
c`` into one FMA) and reassociation of the parallel or vectorised sums, so compiled results agree with it to a
few ulp, not bit for bit.  For tests: it is slow (Python per element).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from ...ir import philox as np_philox
from . import kernel_ir as ki


class _Continue(Exception):
    pass


class _Ptr:
    __slots__ = ("addr", "t")

    def __init__(self, addr, t):
        self.addr, self.t = int(addr), t


def _read(p: _Ptr, i):
    dt = np.dtype(ki.NP[p.t] if p.t != ki.BOOL else np.uint8)
    buf = (ctypes.c_char * dt.itemsize).from_address(p.addr + int(i) * dt.itemsize)
    return np.frombuffer(buf, dt)[0]


def _write(p: _Ptr, i, v):
    dt = np.dtype(ki.NP[p.t])
    data = np.array(v, dt).tobytes()
    ctypes.memmove(p.addr + int(i) * dt.itemsize, data, dt.itemsize)


def _libm(name, args, t):
    f = {"atan2": np.arctan2, "nextafter": np.nextafter, "hypot": np.hypot, "asin": np.arcsin,
         "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
         "acosh": np.arccosh, "atanh": np.arctanh}.get(name)
    if f is not None:
        return ki.NP[t](f(*args))
    x = float(args[0])
    if name == "erfc":
        return ki.NP[t](math.erfc(x))
    if name == "lgamma":
        if math.isinf(x) or (x <= 0 and x == math.floor(x)):
            return ki.NP[t](math.inf)
        return ki.NP[t](x if x != x else math.lgamma(x))
    raise NotImplementedError(f"kernel_interp: libm {name}")


def _pow_i64(b, e):
    b, e = int(b), int(e)
    if e < 0:
        return 1 if b == 1 else ((1 if e % 2 == 0 else -1) if b == -1 else 0)
    r = 1
    while e > 0:
        if e & 1:
            r = (r * b) & (2 ** 64 - 1)
        b = (b * b) & (2 ** 64 - 1)
        e >>= 1
    return np.int64(np.uint64(r).view(np.int64)) if r >= 2 ** 63 else np.int64(r)


class Interpreter:
    """Runs a kernel: ``Interpreter(kir).run(block)`` with ``block`` the int64 argument block (an array)."""

    def __init__(self, kir: ki.KernelIR):
        self.kir = kir
        self.env = {}
        self._expanded = {}

    def run(self, block: np.ndarray) -> None:
        self.env = {"A": _Ptr(block.ctypes.data, ki.I64)}
        with np.errstate(all="ignore"):
            self.block(self.kir.body)

    # ---- statements -----------------------------------------------------------------------------------------
    def block(self, stmts):
        for s in stmts:
            if isinstance(s, ki.Assign):
                self.env[s.var.name] = self.value(s.value, {})
            elif isinstance(s, ki.Store):
                memo = {}
                _write(self.value(s.ptr, memo), self.value(s.idx, memo), self.value(s.value, memo))
            elif isinstance(s, ki.For):
                start, stop = int(self.value(s.start, {})), int(self.value(s.stop, {}))
                for i in range(start, stop, s.step):
                    self.env[s.var.name] = np.int64(i)
                    try:
                        self.block(s.body)
                    except _Continue:
                        pass
            elif isinstance(s, ki.If):
                self.block(s.then if self.value(s.cond, {}) else s.orelse)
            elif isinstance(s, ki.Claim):     # (one thread: the atomics and the lock are plain steps)
                memo = {}
                ptr, at, key = (self.value(v, memo) for v in (s.ptr, s.at, s.key))
                if _read(ptr, at) > key:
                    _write(ptr, at, key)
                    self.block(s.body)
            elif isinstance(s, ki.Continue):
                raise _Continue()

    # ---- values ---------------------------------------------------------------------------------------------
    def value(self, x: ki.Val, memo):
        got = memo.get(id(x))
        if got is not None:
            return got[1]
        v = self._eval(x, memo)
        memo[id(x)] = (x, v)
        return v

    def _eval(self, x, memo):
        op, t = x.op, x.t
        if op == "const":
            return ki.NP[t](x.attr) if not ki.is_ptr(t) else x.attr
        if op == "var":
            return self.env[x.attr.name]
        if op == "param":
            return memo["params"][x.attr]
        if op == "math":
            return self._math(x, [self.value(a, memo) for a in x.args])
        a = [self.value(y, memo) for y in x.args]
        if op == "ptr":
            return _Ptr(a[0], t.elem)
        if op == "load":
            return _read(a[0], a[1])
        if op == "bin":
            return self._bin(x.attr, t, *a)
        if op == "cmp":
            return np.bool_({"<": a[0] < a[1], "<=": a[0] <= a[1], ">": a[0] > a[1], ">=": a[0] >= a[1],
                             "==": a[0] == a[1], "!=": a[0] != a[1]}[x.attr])
        if op == "neg":
            return -a[0]
        if op == "invert":
            return ~a[0]
        if op == "not":
            return np.bool_(not a[0])
        if op == "select":
            return a[1] if a[0] else a[2]
        if op == "cast":
            if t == ki.BOOL:
                return np.bool_(a[0] != 0 or a[0] != a[0])
            return ki.NP[t](a[0])
        if op == "bitcast":
            return np.array(a[0], ki.NP[x.args[0].t]).view(ki.NP[t])[()]
        if op == "intr":
            return self._intr(x.attr, t, a)
        if op == "libm":
            return _libm(x.attr, a, t)
        if op == "table":
            return x.attr[int(a[0])]
        raise NotImplementedError(f"kernel_interp: {op}")

    @staticmethod
    def _bin(op, t, x, y):
        if op in ("//", "%") and t in ki.INTS:
            xi, yi = int(x), int(y)
            if yi == 0 or (t == ki.I64 and xi == -(1 << 63) and yi == -1):
                return ki.NP[t](0)
            return ki.NP[t](xi // yi if op == "//" else xi % yi)
        if op in ("<<", ">>") and t in ki.INTS:
            return ki.NP[t](x << y if op == "<<" else x >> y)
        f = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
             "%": np.remainder, "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op]
        return ki.NP[t](f(x, y))

    @staticmethod
    def _intr(name, t, a):
        T = ki.NP[t]
        if name == "fma":
            if t == ki.F32:
                return T(np.float64(a[0]) * np.float64(a[1]) + np.float64(a[2]))
            return T(np.longdouble(a[0]) * np.longdouble(a[1]) + np.longdouble(a[2]))
        f = {"fabs": np.abs, "sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
             "rint": np.rint, "copysign": np.copysign, "frem": np.fmod}[name]
        return T(f(*a))

    def _math(self, x, args):
        name, prec, _ = x.attr
        if prec in ("f32", "f64") and name.startswith("rng_"):
            seed, offset, index = (int(v) for v in args)
            dtype = np.float32 if prec == "f32" else np.float64
            if name == "rng_uniform":
                return np_philox.uniform_at(seed, offset, np.array([index], np.uint64), dtype)[0]
            z = np_philox.normal(seed, offset, (index + 1,), dtype)
            return z[index]
        if prec in ("f32", "f64"):
            got = self._expanded.get((name, prec, tuple(a.t for a in x.args)))
            if got is None:
                from . import mathlib
                params = [ki.param(a.t, k) for k, a in enumerate(x.args)]
                got = (params, ki.cast(mathlib.expand(name, prec, params), x.t))
                self._expanded[(name, prec, tuple(a.t for a in x.args))] = got
            return self.value(got[1], {"params": args})
        v = [int(a) for a in args]
        if name == "sign":
            return np.int64((v[0] > 0) - (v[0] < 0))
        if name == "isfinite":
            return np.bool_(True)
        if name == "pow":
            return _pow_i64(*v)
        if name == "fmod":
            if v[1] == 0:
                return np.int64(0)
            r = abs(v[0]) % abs(v[1])
            return np.int64(r if v[0] >= 0 else -r)
        raise NotImplementedError(f"kernel_interp: math {name}_{prec}")


def run(kir: ki.KernelIR, block: np.ndarray) -> None:
    """Run ``kir`` over argument block ``block`` (an int64 array of sizes, addresses and strides)."""
    Interpreter(kir).run(block)


__all__ = ["Interpreter", "run"]
