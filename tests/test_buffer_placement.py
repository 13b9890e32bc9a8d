"""A compiled step's bits do not depend on where its buffers are (issue 32, deliverable 4: run to run, NumPy puts a
step's arrays at other offsets from 64-byte alignment).

B9's model (small) is compiled and called once through the jit; then the same call (its very argument arrays, copied
before it ran) goes straight to the graph's C entry again and again, with every buffer moved: the inputs (token ids,
parameters, optimiser state), the fresh outputs and the workspace each at offsets of 4 (8) to 48 bytes past a 64-byte
boundary, all of them packed side by side in one arena in a shuffled order with small gaps, and the fresh outputs
filled with NaNs (the output pool hands out recycled buffers that hold a previous call's values).  Every output and
every input written in place (the parameters' update) keeps its bits, float32 and float64, at one thread and at the
default.  What could move them: a loop peeled to an alignment, a sum chunked by address, a vector loop whose check
of its addresses sends it to a scalar loop that contracts otherwise (``codegen/kernels/contraction.py``), BLAS
kernels that sum in an order of their operands' alignment, a kernel reading an output before writing it.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.program import cpu
from jitgrad.ir import settings

from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests

VOCAB, T, C, H, L, B = 11, 8, 16, 2, 2, 4


def _placed(a, shift):
    """A copy of ``a`` whose data starts ``shift`` bytes past a 64-byte boundary (in its own buffer)."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == shift
    return out


def _packed(arrays, rng):
    """Copies of ``arrays`` side by side in one buffer, in a shuffled order, each 0-60 bytes after the one before."""
    raw = np.zeros(sum(a.nbytes for a in arrays) + 64 * len(arrays) + 64, np.uint8)
    at, out = (-raw.ctypes.data) % 64, [None] * len(arrays)
    for i in rng.permutation(len(arrays)):
        a = arrays[i]
        at += int(rng.integers(0, 64 // a.itemsize)) * a.itemsize
        out[i] = raw[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
        out[i][...] = a
        at += a.nbytes
    return out, raw


def _step_and_arrays(dtype):
    """B9's small step compiled and called twice, and the argument arrays of a third call (copied before it ran)."""
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, VOCAB, T, C, H, L, 0.0, False).to(dtype)
    opt = gpt_model.make_optimizer(jg, model, lr=1e-2)
    step = jg.compile(gpt_model.make_step(jg, model, model, opt), backend="numba", background=False)
    rng = np.random.default_rng(0)

    def batch():
        return jg.tensor(rng.integers(0, VOCAB, (B, T))), jg.tensor(rng.integers(0, VOCAB, (B, T)))
    for _ in range(2):
        step(*batch())
    # the graph the step runs: every live one watched for a call (type(), not isinstance: gc's objects include
    # weak proxies whose referent may be gone)
    graphs = [o for o in gc.get_objects() if type(o) is cpu.CompiledGraph and o.run is not None]
    seen, runs = [], [g.run for g in graphs]

    def spy(g, run):
        def watched(*arrays):
            seen.append((g, [a.copy() for a in arrays]))
            return run(*arrays)
        watched.ncheck = run.ncheck
        return watched
    for g, run in zip(graphs, runs):
        g.run = spy(g, run)
    try:
        step(*batch())
    finally:
        for g, run in zip(graphs, runs):
            g.run = run
    assert len(seen) == 1
    cg, arrays = seen[0]
    return cg, arrays


def _call(cg, arrays, shift_in=0, shift_out=0, shift_ws=0, pack=None, fill=0):
    """The graph's C entry on copies of ``arrays`` (at ``shift_in``), fresh outputs at ``shift_out`` (every byte
    ``fill``), the workspace at ``shift_ws`` (or inputs and outputs packed by ``pack``, a generator): the bytes of
    every output and every input after the call."""
    p, run = cg.program, cg.run
    _, ctx, entry = run._keep              # (entry.callers: the context words, the entry itself)
    ins = [_placed(a, shift_in) for a in arrays]
    fresh = [_placed(np.empty(tuple(r.shape), np.dtype(r.dtype.np)), shift_out) for r in p.fresh]
    for f in fresh:
        f.reshape(-1).view(np.uint8)[...] = fill
    arena = None
    if pack is not None:
        both, arena = _packed(ins + fresh, pack)
        ins, fresh = both[:len(ins)], both[len(ins):]
    ws = np.zeros(max(p.ws_size, 64) + 128, np.uint8)
    base = ws.ctypes.data + (-ws.ctypes.data) % 64 + shift_ws
    saved = cg.A.copy()                    # (the table the entry reads: its workspace slots repointed)
    for slot, root, off in p.ws_slots:
        cg.A[slot] = base + root.offset + off
    args = tuple(ins) + tuple(fresh)
    if run.ncheck:
        args += (np.array([run.ncheck, 0], np.int64),)
    try:
        entry(args, ctx.ctypes.data)
    finally:
        cg.A[:] = saved
    del arena
    return [a.tobytes() for a in fresh] + [a.tobytes() for a in ins]


@pytest.mark.parametrize("threads", [1, None])
@pytest.mark.parametrize("dtype", [jg.float32, jg.float64])
def test_a_step_gives_the_same_bits_wherever_its_buffers_are(dtype, threads):
    n0, old = jg.get_num_threads(), settings.STATE.num_threads
    if threads:
        jg.set_num_threads(threads)
    try:
        cg, arrays = _step_and_arrays(dtype)
        ref = _call(cg, arrays)
        assert _call(cg, arrays) == ref                 # (the same call twice: the same bits)
        item = 4 if dtype is jg.float32 else 8
        moved = 0
        for shift in sorted({item, 8, 16, 32, 48}):
            for where in ("in", "out", "ws"):
                got = _call(cg, arrays, **{"shift_" + where: shift})
                assert got == ref, (where, shift, [i for i, (a, b) in enumerate(zip(got, ref)) if a != b])
                moved += 1
        for seed in range(3):
            got = _call(cg, arrays, pack=np.random.default_rng(seed))
            assert got == ref, ("packed", seed, [i for i, (a, b) in enumerate(zip(got, ref)) if a != b])
        assert _call(cg, arrays, fill=0xFF) == ref     # fresh outputs holding NaNs (a recycled buffer's old values)
        assert moved >= 12 and len(cg.program.fresh) >= 10 and len(arrays) >= 20
    finally:
        jg.set_num_threads(n0)
        settings.STATE.num_threads = old      # (None: not set)
