"""The index-error record of a parallel loop (issue 32): chunks of a fused gather or scatter loop meet bad indices at
once, so each record is a claim (``kernel_ir.Claim``: an atomic min of the record's outer index into the key slot,
then the fields written under a compare-and-swap lock by the least key, ``index_checks.record_index_error``).  The
error raised is the serial loop's (the first bad position in iteration order) at every thread count, with whole
fields; an earlier step's record still wins over a later loop's.  Counted and compared, never timed."""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.kernels import ir_loops, kernel_interp, kernel_ir as ki, kernel_listing, loops
from jitgrad.codegen.kernels.index_checks import KEY_AT, NO_KEY
from jitgrad.codegen.native import cache, llvm_build, objload, workpool
from jitgrad.ir import settings

from test_ir_loops import _CALL

RNG = np.random.default_rng(5)
V = RNG.standard_normal((64, 4096)).astype(np.float32)
X = RNG.standard_normal(4096).astype(np.float32)
K = RNG.integers(0, 4096, (64, 4096))
MSG = re.compile(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)")


def _pool():
    return settings.default_threads() > 1 and workpool.available()


def _gather(v, k):
    return jg.tensor(X)[k] * 2.0 + v        # a fused gather loop over (64, 4096), split by rows on the pool


def _errors(fn, args, threads, calls=3):
    """The messages of ``calls`` compiled calls at ``threads`` threads (a forced-parallel compile), with whether its
    gather loop ran parallel."""
    prev = jg.get_num_threads()
    try:
        jg.set_num_threads(threads)
        f = jg.compile(fn, backend="numba", parallel=True, background=False)
        out = []
        for _ in range(calls):
            with pytest.raises(IndexError) as e:
                f(*args)
            out.append(str(e.value).splitlines()[0])
        return out, [ln.parallel for ln in f.launches(*args) if "getitem" in ln.label]
    finally:
        jg.set_num_threads(prev)


def _eager_error(fn, args):
    """Eager mode's error for ``fn(*args)``: (index, size), its words as compiled code's."""
    with pytest.raises(IndexError) as e:
        fn(*args)
    assert "for dimension" in str(e.value)
    return MSG.search(str(e.value)).group(1, 3)


def test_two_bad_indices_in_two_chunks_report_the_serial_loops_first():
    """Row 31's last element (chunk 0 at two threads, met last) and row 32's first (chunk 1, met first): the first in
    iteration order is row 31's, at one thread and at two, call after call, as eager mode finds it."""
    bad = K.copy()
    bad[31, 4095], bad[32, 0] = 7000, 5000
    args = (jg.tensor(V), jg.tensor(bad))
    one, _ = _errors(_gather, args, 1)
    two, par = _errors(_gather, args, 2, calls=8)
    assert par == [_pool()]
    assert len(set(one + two)) == 1, (one, two)
    assert MSG.search(one[0]).group(1, 2, 3) == ("7000", "0", "4096")
    with pytest.raises(IndexError) as eager:
        _gather(*args)
    assert MSG.search(str(eager.value)).group(0) == MSG.search(one[0]).group(0)     # the same words


def test_every_index_bad_reports_the_first_and_the_lock_is_released():
    """Every element out of range (each a different value): the record is the first position's, whole; the lock
    slot is free after the launch, and a good call then computes eager's values."""
    bad = 4096 + np.arange(64 * 4096).reshape(64, 4096)
    args = (jg.tensor(V), jg.tensor(bad))
    for threads in (1, 2):
        msgs, _ = _errors(_gather, args, threads, calls=2)
        assert {MSG.search(m).group(1) for m in msgs} == {"4096"}
    assert _eager_error(_gather, args) == ("4096", "4096")
    f = jg.compile(_gather, backend="numba", parallel=True, background=False)
    good = (jg.tensor(V), jg.tensor(K))
    np.testing.assert_array_equal(f(*good).numpy(), _gather(*good).numpy())


def test_an_earlier_steps_record_stands_against_a_later_parallel_loop():
    """Two gather loops, the second gathering from what the first computes: both bad, the first step's index is
    reported; only the second bad, the second's."""
    def two(v, k1, k2):
        s = (jg.tensor(X)[k1] * 2.0 + v).sum()
        return (jg.tensor(X) * s)[k2] + v           # (it gathers from what the first loop's sum makes)
    b1, b2 = K.copy(), K.copy()
    b1[40, 7] = 6000
    b2[0, 0] = 9000
    prev = jg.get_num_threads()
    try:
        for threads in (1, 2):
            jg.set_num_threads(threads)
            f = jg.compile(two, backend="numba", parallel=True, background=False)
            for k1, k2, want in ((b1, b2, "6000"), (K, b2, "9000")):
                args = (jg.tensor(V), jg.tensor(k1), jg.tensor(k2))
                with pytest.raises(IndexError) as e:
                    f(*args)
                assert MSG.search(str(e.value)).group(1) == want, (threads, str(e.value))
                assert _eager_error(two, args)[0] == want
            assert sum("getitem" in ln.label and ln.parallel for ln in f.launches(*args)) == (2 if _pool() else 0) \
                * (threads == 2)
    finally:
        jg.set_num_threads(prev)


def test_a_parallel_loop_claims_its_record_and_a_serial_one_does_not():
    """The program's kernels: a parallel gather loop opens the claims before its chunks and claims by its outer
    index; a serial compile's loop keeps the plain first-record check (its text, hence its key, as before)."""
    args = (jg.tensor(V), jg.tensor(K))
    par, ser = (jg.compile(_gather, backend="numba", parallel=p, background=False) for p in (True, False))
    np.testing.assert_array_equal(par(*args).numpy(), ser(*args).numpy())
    par, ser = str(par.source(*args)), str(ser.source(*args))
    assert "claim(" in par and "unlock(" in par and "in prange(" in par
    assert "claim(" not in ser and "in prange(" not in ser


def _claim_kernel(parallel):
    """``for i0 in range(n) (parallel): if p0[i0] < 0: claim ie[4] by i0: ie[0] = 1; ie[2] = p0[i0]``."""
    b = ki.Builder()
    n = b.let("n0", b.A[0])
    p0 = b.let("p0", b.A[1].ptr(ki.I64))
    ie = b.A[2].ptr(ki.I64)
    with b.loop("i0", n, parallel=parallel) as i0:
        x = b.let("x", p0[i0])
        with b.if_(x < 0):
            b.emit([ki.Claim(ie, ki.const(KEY_AT), i0, [ki.Store(ie, ki.const(0), ki.const(1)),
                                                      ki.Store(ie, ki.const(2), x)])])
    return loops.Kernel("kernel", b.finish(), rank=1, operands=(), classes=(), parallel=parallel)


@pytest.mark.parametrize("parallel", [False, True])
def test_claim_renders_alike_in_llvm_numba_and_the_interpreter(parallel):
    """One kernel with a claim, run by its LLVM IR, by Numba's build of its text and by the interpreter: the least
    key's fields, the key in its slot, the lock free; its listing and LLVM IR name the atomics."""
    k = _claim_kernel(parallel)
    x = np.arange(100_000, dtype=np.int64)
    x[[3, 60_000, 99_999]] = [-5, -7, -9]
    key = cache.cache_key(k.source, extra=("test-claims",))
    llvm = ir_loops.render(k.ir, key)
    assert "atomicrmw min" in llvm and "cmpxchg" in llvm and "store atomic i64 0" in llvm
    assert "claim(" in k.source and "lock(" in k.source and "unlock(" in k.source
    assert "claim p" in kernel_listing.format_kernel(k.ir) or "claim ptr" in kernel_listing.format_kernel(k.ir)
    addr = objload.load([llvm_build.compile_kernel(key, llvm)])[key]
    numba_fn = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, k.source).kernel
    runs = [lambda blk: _CALL(addr)(blk.ctypes.data), lambda blk: _CALL(numba_fn.address)(blk.ctypes.data),
            lambda blk: kernel_interp.run(k.ir, blk)]
    for run in runs:
        for _ in range(3):
            ie = np.array([0, 0, 0, 0, NO_KEY, 0], np.int64)
            run(np.array([x.size, x.ctypes.data, ie.ctypes.data], np.int64))
            assert ie.tolist() == [1, 0, -5, 0, 3, 0]


def _two_gathers(v, k1, k2):
    return jg.tensor(X)[k1] * 2.0 + jg.tensor(X)[k2] + v        # two gathers fused into one loop over (64, 4096)


@pytest.mark.parametrize("parallel", [False, True])
def test_two_gathers_in_one_loop_report_eagers_first_op_not_the_loops_first_element(parallel):
    """The second gather bad at row 3, the first at row 40 (and row 50): eager mode meets the first op's first, so
    compiled code reports it too (each record's key: its op's place in the program, then its outer index), serial
    and parallel, at one thread and at two; only the second bad, the second's."""
    b1, b2 = K.copy(), K.copy()
    b1[40, 7], b1[50, 0] = 6000, 6500
    b2[3, 9] = 9000
    prev = jg.get_num_threads()
    try:
        for threads in (1, 2):
            jg.set_num_threads(threads)
            f = jg.compile(_two_gathers, backend="numba", parallel=parallel, background=False)
            for k1, k2, want in ((b1, b2, "6000"), (K, b2, "9000"), (b1, K, "6000")):
                args = (jg.tensor(V), jg.tensor(k1), jg.tensor(k2))
                assert _eager_error(_two_gathers, args)[0] == want
                for _ in range(2):
                    with pytest.raises(IndexError) as e:
                        f(*args)
                    assert MSG.search(str(e.value)).group(1) == want, (threads, str(e.value))
            launches = [ln for ln in f.launches(*args) if "getitem" in ln.label]
            assert len(launches) == 1 and "getitem" in launches[0].label.split("getitem", 1)[1]    # one loop, both
            assert launches[0].parallel == (parallel and threads == 2 and _pool())
    finally:
        jg.set_num_threads(prev)
