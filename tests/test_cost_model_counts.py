"""The cost model's prices of transcendentals (``ir/plan.OP_BYTES``) against the instructions of their vectorised
loops, counted in the machine code this host compiles (never timed): the planner's store-or-recompute choice and
the pool's work threshold both read these prices, so a function many times dearer than another must cost more.
"""
import re

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import llvm_build
from jitgrad.ir.plan import OP_BYTES

from test_vector_kernels import _kernels, _loops


def _per_element(fn) -> float:
    """Instructions an element of the one kernel of ``fn`` over a float32 vector: its longest loop (the vector
    body) over the elements one trip covers (the largest constant its induction variable steps by)."""
    x = jg.tensor(np.linspace(0.1, 3.0, 4096, dtype=np.float32))
    (k,) = _kernels(jg.compile(fn, backend="numba", background=False), x)
    body = max(_loops(llvm_build.assembly(k.ir)), key=len)
    code = [ln for ln in body if ln.startswith("\t") and not ln.strip().startswith(".")]
    steps = [int(n) for ln in code for n in re.findall(r"addq\s+\$(\d+),", ln) if int(n) <= 256]
    return len(code) / max(steps or [1])


def test_sin_and_cos_are_priced_by_the_instructions_of_their_loops():
    """sin and cos cost ~12 exps each (their argument reduction, Payne-Hanek in 64-bit lanes): the prices' ratio is
    within a factor 2 of the counted one (AVX-512: cos 23.3 instructions an element, exp 1.9; AVX2: 67.8, 4.4)."""
    import llvmlite.binding as ll
    if not ll.get_host_cpu_features().get("avx2"):
        pytest.skip("counted for AVX2 and AVX-512 code")
    exp = _per_element(jg.exp)
    for name, fn in (("cos", jg.cos), ("sin", jg.sin)):
        counted = _per_element(fn) / exp
        priced = OP_BYTES[name] / OP_BYTES["exp"]
        assert 0.5 <= priced / counted <= 2.0, (name, counted, priced)
    assert OP_BYTES["tan"] >= OP_BYTES["sin"]         # the same reduction, then a division
