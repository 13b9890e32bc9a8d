"""Kernel IR rendered as Numba-compilable Python text: the CPU kernels Numba compiles, and CUDA kernels' scalars.

``module_text`` writes a whole CPU kernel (``@cfunc`` over the argument block, as ``abi.py`` defines it) from its
``KernelIR``: every value with its type spelled out (casts, typed constants), so Numba types the text exactly as
the IR typed it and computes the bits ``ir_loops.py``'s LLVM IR computes.  This text is also a kernel's identity
(its key is the text's hash) and its listing (``f.source()``).  Numba compiles it only where the LLVM renderer
cannot (``ir_loops.Unsupported``: ``intmath``'s ``pow_i64``/``fmod_i64``, ``philox``'s draws, float ``//`` and
``%``), or everywhere under ``JITGRAD_IR_LOOPS=0``.

``Exprs`` renders single values for a target: ``cpu`` (math calls of ``mathlib_numba``/``intmath``/``philox``
functions, recorded in ``uses`` for the imports) or ``cuda`` (the math table's inline CUDA forms:
``cuda_kernels.py`` builds its kernels' scalar bodies in the IR and writes them with this).  Nothing here
imports Numba, and nothing reads the text back.
"""
from __future__ import annotations

import math

from . import kernel_ir as ki
from .math_table import MATH

_NAME = {ki.F32: "float32", ki.F64: "float64", ki.I64: "int64", ki.I32: "int32", ki.U8: "uint8",
         ki.U64: "uint64", ki.BOOL: "bool"}
_PTR = {ki.F32: "ptr_f32", ki.F64: "ptr_f64", ki.I64: "ptr_i64", ki.I32: "ptr_i32", ki.U8: "ptr_u8"}
_INTR = {"fabs": "abs", "sqrt": "math.sqrt", "floor": "np.floor", "ceil": "np.ceil", "trunc": "np.trunc",
         "rint": "np.rint", "copysign": "np.copysign", "frem": "np.fmod"}
_BITCAST = {(ki.F32, ki.I32): "f32_as_i32", (ki.I32, ki.F32): "i32_as_f32", (ki.F64, ki.I64): "f64_as_i64",
            (ki.I64, ki.F64): "i64_as_f64"}
_MODULE = {"mathlib": "mathlib_numba", "intmath": "intmath", "philox": "philox"}


class Exprs:
    """Values as Python text for ``target`` (cpu | cuda).  ``consts``: the module-level constants used (name ->
    text, in first-use order); ``uses``: (module, function) the text calls (cpu)."""

    def __init__(self, target="cpu", consts=None):
        self.target = target
        self.consts = {} if consts is None else consts
        self.uses = set()

    def const(self, x) -> str:
        v, t = x.attr, x.t
        if t == ki.BOOL:
            return "True" if v else "False"
        if t == ki.I64:
            return str(v) if v >= 0 else f"({v})"
        if t in (ki.I32, ki.U8):
            return f"{_NAME[t]}({v})"
        if t in ki.FLOATS:
            text = repr(v) if math.isfinite(v) else f"float('{v}')"
            src = f"np.{_NAME[t]}({text})"
        else:
            src = f"np.{_NAME[t]}({v})"
        for name, s in self.consts.items():
            if s == src:
                return name
        name = f"c{len(self.consts)}"
        self.consts[name] = src
        return name

    def __call__(self, x: ki.Val) -> str:
        op = x.op
        if op == "const":
            return self.const(x)
        if op == "var":
            return x.attr.name
        a = [self(y) for y in x.args]
        if op in ("bin", "cmp"):
            return f"({a[0]} {x.attr} {a[1]})"
        if op == "neg":
            return f"(-{a[0]})"
        if op == "invert":
            return f"(~{a[0]})"
        if op == "not":
            return f"(not {a[0]})"
        if op == "select":
            return f"({a[1]} if {a[0]} else {a[2]})"
        if op == "cast":
            return f"{_NAME[x.t]}({a[0]})"
        if op == "bitcast":
            fn = _BITCAST[(x.args[0].t, x.t)]
            self.uses.add(("mathlib", fn))
            return f"{fn}({a[0]})"
        if op == "ptr":
            return f"{_PTR[x.t.elem]}({a[0]})"
        if op == "load":
            if x.attr is not None:
                return f"load({a[0]}, {a[1]}, {x.attr[0]}, {x.attr[1]})"
            return f"{a[0]}[{a[1]}]"
        if op == "intr":
            if x.attr == "fma":
                fn = f"fma_{x.t}"
                self.uses.add(("mathlib", fn))
                return f"{fn}({', '.join(a)})"
            return f"{_INTR[x.attr]}({', '.join(a)})"
        if op == "libm":
            fn = "np.nextafter" if x.attr == "nextafter" else f"math.{x.attr}"
            return f"{fn}({', '.join(a)})"
        if op == "math":
            return self.math(x, a)
        raise TypeError(f"numba_render: cannot write a {op} value")

    def math(self, x, a) -> str:
        name, prec, dtype = x.attr
        row = MATH[name]
        if self.target == "cuda":
            if row.cuda is None:
                raise KeyError(f"cuda codegen: no CUDA form for math function {name!r}")
            return "(" + row.cuda.format(*a, T=dtype if dtype != "bool" else "bool_") + ")"
        mod, fn = row.cpu(prec)
        if mod is None:
            return f"{fn}({', '.join(a)})"
        self.uses.add((mod, fn))
        return f"{fn}({', '.join(a)})"


_FASTMATH = "{" + ", ".join(repr(f) for f in ki.KERNEL_FASTMATH) + "}"


def module_text(k: ki.KernelIR, header: str = "# generated by jitgrad.codegen.kernels.loops") -> str:
    """The kernel as a Python module defining ``kernel``, a ``@cfunc`` Numba compiles (``numba_build.py``)."""
    ex = Exprs("cpu")
    lines = ["def kernel(A):"]
    scoped, claims = [False], [False]

    def block(stmts, ind):
        for s in stmts:
            if isinstance(s, ki.Assign):
                lines.append(f"{ind}{s.var.name} = {ex(s.value)}")
            elif isinstance(s, ki.Store):
                if s.alias is not None:
                    scoped[0] = True
                    lines.append(f"{ind}store_to({ex(s.ptr)}, {ex(s.idx)}, {ex(s.value)}, {s.alias[0]}, {s.alias[1]})")
                else:
                    lines.append(f"{ind}store({ex(s.ptr)}, {ex(s.idx)}, {ex(s.value)})")
            elif isinstance(s, ki.For):
                rng = "prange" if s.parallel else "range"
                if s.gate is not None:
                    # (Numba's prange always splits the loop; the IR build takes the pool from this work on)
                    lines.append(f"{ind}# on the pool from work {ex(s.gate[0])} * {s.gate[1]!r}")
                if s.short:
                    lines.append(f"{ind}# short: vectorised without interleaving")
                if s.step == 1 and s.start.op == "const" and s.start.attr == 0:
                    lines.append(f"{ind}for {s.var.name} in {rng}({ex(s.stop)}):")
                else:
                    lines.append(f"{ind}for {s.var.name} in {rng}({ex(s.start)}, {ex(s.stop)}, {s.step}):")
                n = len(lines)
                block(s.body, ind + "    ")
                if len(lines) == n:
                    lines.append(ind + "    pass")
            elif isinstance(s, ki.If):
                lines.append(f"{ind}if {ex(s.cond)}:")
                n = len(lines)
                block(s.then, ind + "    ")
                if len(lines) == n:
                    lines.append(ind + "    pass")
                if s.orelse:
                    lines.append(f"{ind}else:")
                    block(s.orelse, ind + "    ")
            elif isinstance(s, ki.Claim):
                claims[0] = True
                p, at, key = ex(s.ptr), ex(s.at), ex(s.key)
                lines.extend([f"{ind}if claim({p}, {at}, {key}):", f"{ind}    lock({p}, {at} + 1)",
                              f"{ind}    if holds({p}, {at}, {key}):"])
                n = len(lines)
                block(s.body, ind + "        ")
                if len(lines) == n:
                    lines.append(ind + "        pass")
                lines.append(f"{ind}    unlock({p}, {at} + 1)")
            elif isinstance(s, ki.Continue):
                lines.append(f"{ind}continue")
            elif isinstance(s, ki.Comment):
                lines.append(f"{ind}# {s.text}")
    block(k.body, "    ")
    if scoped[0] or any(v.op == "load" and v.attr is not None
                        for top in ki.statement_values(k.body) for v in ki.walk_values(top)):
        scoped[0] = True
    head = [header, "import math", "import numpy as np", "from numba import cfunc, prange",
            "from numpy import float32, float64, int32, int64, uint8, uint64",
            "from jitgrad.codegen.kernels.abi import KERNEL_SIGNATURE, ptr_f32, ptr_f64, ptr_i64, ptr_i32, ptr_u8, store"]
    if scoped[0]:
        head.append("from jitgrad.codegen.kernels.alias_scopes import load, store_to")
    if claims[0]:
        head.append("from jitgrad.codegen.kernels.abi import claim, holds, lock, unlock")
    head += [f"from jitgrad.codegen.kernels.{_MODULE[mod]} import {fn}" for mod, fn in sorted(ex.uses)]
    head += [f"{n} = {v}" for n, v in ex.consts.items()]
    deco = (f"@cfunc(KERNEL_SIGNATURE, cache=CACHE_ENABLED, fastmath={_FASTMATH}, parallel={k.parallel}, "
            "error_model='numpy')")
    return "\n".join(head) + "\n\n\n" + deco + "\n" + "\n".join(lines) + "\n"


__all__ = ["Exprs", "module_text"]
