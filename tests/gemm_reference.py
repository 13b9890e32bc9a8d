"""The reference bits of a float GEMM for the tests of split and pooled products: one single-threaded call of SciPy's
OpenBLAS over the whole product (``ir/ops/blas.py``'s routine, as its row blocks must reproduce it)."""
from __future__ import annotations

import numpy as np

from jitgrad.ir.ops import blas


def one_call(a, b):
    """``a @ b`` (2-D, one float dtype) as one single-threaded OpenBLAS call."""
    blas.BlasPacer.use(1)
    c = np.empty((a.shape[0], b.shape[1]), a.dtype)
    aa, ta, lda = blas._raw_operand(a)
    bb, tb, ldb = blas._raw_operand(b)
    blas._gemm_rows(aa, ta, lda, bb, tb, ldb, c, 0, a.shape[0])
    return c
