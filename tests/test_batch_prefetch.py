"""Batches of small products prefetch each next product's operands (``codegen/program/batch_prefetch.py``): which
blocks ask for it, that the entry's loops emit it, and that it changes no bits (native entry and the Python
driver, with the block's prefetch slot on and off)."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.program import batch_prefetch, entry
from jitgrad.jit.graph_code import compiled_graph


def _cg(f):
    e = next(iter(f._cache.values()))[0]
    return compiled_graph(e.graph, e.gf.writes, e.gf.parallel)


def _slot(cg, st):
    t = cg.program.table
    return st.block + 14 + 4 * int(t[st.block + 13]) + batch_prefetch.SLOT


def _attention(x):
    q, k, v = x.split(16, dim=-1)
    return (q @ k.transpose(-2, -1)) @ v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_product_batches_ask_for_prefetch_with_their_item_size(dtype):
    x = jg.tensor(np.random.default_rng(0).standard_normal((2, 3, 24, 48)).astype(dtype))
    f = jg.compile(_attention, backend="numba", parallel=False)
    f(x)
    cg = _cg(f)
    batches = [st for st in cg.program.steps if st.kind == "bgemm"]
    assert len(batches) == 2 and all(st.gemm.startswith("small_") for st in batches)
    assert [int(cg.program.table[_slot(cg, st)]) for st in batches] == [np.dtype(dtype).itemsize] * 2
    # the entry's batch loop prefetches A, B and C: three prefetch calls in its text (one loop for every batch)
    ir = entry.entry_ir(cg.program, len(cg.graph.inputs), len(cg.checks), "e")
    assert ir.count('call void @"llvm.prefetch.p0"') == 3
    assert 'call void @"llvm.prefetch.p0"(ptr %' in ir and ", i32 1, i32 3, i32 1)" in ir     # C: for writing


def test_blas_batches_do_not_prefetch():
    """Products big enough for OpenBLAS (it packs its own blocks) leave the slot at 0."""
    a = jg.tensor(np.ones((2, 160, 160), np.float32))
    f = jg.compile(lambda a: a @ a, backend="numba", parallel=False)
    f(a)
    cg = _cg(f)
    batches = [st for st in cg.program.steps if st.kind == "bgemm"]
    assert batches and all(st.gemm == "sgemm" for st in batches)
    assert [int(cg.program.table[_slot(cg, st)]) for st in batches] == [0] * len(batches)


@pytest.mark.parametrize("parallel", [False, True])
def test_prefetch_changes_no_bits(parallel):
    """The same products with the block's prefetch slot set and cleared, through the native entry and through the
    Python driver (``abi.call_gemm_batched``): bit for bit."""
    x = jg.tensor(np.random.default_rng(1).standard_normal((4, 3, 40, 48)).astype(np.float32))
    f = jg.compile(_attention, backend="numba", parallel=parallel)
    on = f(x).numpy().copy()
    cg = _cg(f)
    slots = [_slot(cg, st) for st in cg.program.steps if st.kind == "bgemm"]
    assert slots and all(int(cg.A[s]) == 4 for s in slots)     # the live table holds what the program laid out
    driver_on = cg._python_run(np.ascontiguousarray(x.numpy()))[0].copy()
    for s in slots:
        cg.A[s] = 0
    try:
        off = f(x).numpy()
        driver_off = cg._python_run(np.ascontiguousarray(x.numpy()))[0]
    finally:
        for s in slots:
            cg.A[s] = 4
    np.testing.assert_array_equal(on, off)
    np.testing.assert_array_equal(on, driver_on)
    np.testing.assert_array_equal(on, driver_off)
