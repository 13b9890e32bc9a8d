"""Adam's and AdamW's eager multi-tensor update as one native pass over every parameter, on the worker pool.

The NumPy rule (``multi_tensor_rules._adam_arrays``) makes 14 ufunc passes over each parameter, one after the other
on one thread (or parameters split between Python threads): B9's AdamW step (52 parameters, 0.8M float32) took
4.7 ms at one thread and 3.6-3.8 ms at two on the Intel host of 2026-12-02, through this pass 2.8 and 1.8-2.1 ms
(the rest is the driver's per-parameter checks, state and version bumps).  Here each element is read once and its
parameter and two moments written once, by a loop written in LLVM IR (compiled once per process by llvmlite's
MCJIT, like ``codegen/native/gemm_blocks.py``), and the elements are cut into one piece per thread of the pool.

**The same bits as the NumPy rule**, so as the per-parameter path (``tests/test_optim_multi_tensor.py`` compares
them): the loop does the rule's operations in its order, each rounded as NumPy rounds it, with no fast-math flag
(no FMA contraction, no reassociation):

- a Python number meets float32 in float32 (NumPy's weak scalars): ``1 - beta1``, ``beta2``, ``1 - beta2``,
  ``eps`` and L2's ``weight_decay`` are float32 constants;
- a 0-d float64 (decoupled decay ``1 - lr * wd``, the step size, ``sqrt(bias_correction2)``) meets float32 in
  float64: the element is widened, the product or quotient rounded to float32 once, as ``out=`` rounds it;
- ``sqrt`` and division are IEEE's, correctly rounded, lane by lane in vectors as in scalars.

Every element is computed by the same instructions whichever piece and thread it falls in, so the results do not
depend on the thread count.  The pass serves float32 parameters of at least one dimension with C-contiguous
gradients and moments, without ``amsgrad`` and under NumPy's default error settings (the loop raises no floating-
point warning); anything else, and a 0-d parameter (whose NumPy denominator stays float64), runs the NumPy rule.
It serves a group from ``MIN_ELEMENTS`` elements, once its build (on the build thread) is done.
``JITGRAD_NATIVE_ADAM=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ..codegen.native import build_thread, gemm_blocks, ir_engine, workpool
from ..codegen.native.threads import LAUNCH_LOCK
from ..ir import settings
from ..ir.eager_threads import _DEFAULT_ERR
from ..jit import eager_kernels, pooled_gemm

ENABLED = os.environ.get("JITGRAD_NATIVE_ADAM", "1").strip().lower() not in ("0", "off", "false", "no")
# from this many elements in a group the pass serves it (JITGRAD_NATIVE_ADAM_MIN): below, the NumPy rule takes
# under ~0.3 ms a step, and a script that never reaches it never builds the pass
MIN_ELEMENTS = int(os.environ.get("JITGRAD_NATIVE_ADAM_MIN", 1 << 16))
# the plan's cost of an element (bytes moved, 28, plus its operations': a division and a square root), as the
# compiled step's Adam loop is costed (B11's: 56.75): the pool takes an update of elements x PER_ELEMENT >= the
# eager kernels' threshold (``workpool.takes(..., eager=True)``)
PER_ELEMENT = 56.0
ROW = 8             # a segment's row of int64: p, g, m, v addresses, elements, step size, sqrt(bc2) (as bits), 0
WIDTH = 8           # lanes of the vector loop (the rest of a segment in the scalar loop: the same operations)
# flags of the context block
DECAY, L2, MAXIMIZE = 1, 2, 4
STATS = {"updates": 0, "pooled": 0, "elements": 0}      # counted, for tests


def _body(t: str, d: str, s: str, x: str) -> str:
    """The update of one element (``t`` float, ``d`` double) or of WIDTH lanes (vector types): ``s``, the suffix of
    the constants splatted to ``t``/``d`` (``.s`` scalars, ``.v`` vectors); ``x``, that of this body's values and of
    its element pointers (``%pa<x>``...)."""
    sq = "@llvm.sqrt.f32" if t == "float" else f"@llvm.sqrt.v{WIDTH}f32"
    return f"""
  %p0{x} = load {t}, ptr %pa{x}, align 4
  %g0{x} = load {t}, ptr %ga{x}, align 4
  %m0{x} = load {t}, ptr %ma{x}, align 4
  %v0{x} = load {t}, ptr %va{x}, align 4
  %gneg{x} = fneg {t} %g0{x}
  %g1{x} = select i1 %maximize, {t} %gneg{x}, {t} %g0{x}
  %wp{x} = fmul {t} %p0{x}, %l2{s}
  %gl2{x} = fadd {t} %g1{x}, %wp{x}
  %g{x} = select i1 %l2on, {t} %gl2{x}, {t} %g1{x}
  %pw{x} = fpext {t} %p0{x} to {d}
  %pwd{x} = fmul {d} %pw{x}, %decay{s}
  %pdec{x} = fptrunc {d} %pwd{x} to {t}
  %p1{x} = select i1 %decayon, {t} %pdec{x}, {t} %p0{x}
  %dm{x} = fsub {t} %g{x}, %m0{x}
  %dmw{x} = fmul {t} %dm{x}, %omb1{s}
  %m1{x} = fadd {t} %m0{x}, %dmw{x}
  %vbeta{x} = fmul {t} %v0{x}, %beta2{s}
  %gg{x} = fmul {t} %g{x}, %g{x}
  %ggw{x} = fmul {t} %gg{x}, %omb2{s}
  %v1{x} = fadd {t} %vbeta{x}, %ggw{x}
  %root{x} = call {t} {sq}({t} %v1{x})
  %rootw{x} = fpext {t} %root{x} to {d}
  %rootc{x} = fdiv {d} %rootw{x}, %bc2{s}
  %rootn{x} = fptrunc {d} %rootc{x} to {t}
  %den{x} = fadd {t} %rootn{x}, %eps{s}
  %q{x} = fdiv {t} %m1{x}, %den{x}
  %qw{x} = fpext {t} %q{x} to {d}
  %stepw{x} = fmul {d} %step{s}, %qw{x}
  %stepn{x} = fptrunc {d} %stepw{x} to {t}
  %p2{x} = fsub {t} %p1{x}, %stepn{x}
  store {t} %m1{x}, ptr %ma{x}, align 4
  store {t} %v1{x}, ptr %va{x}, align 4
  store {t} %p2{x}, ptr %pa{x}, align 4"""


def _splat(name: str, ty: str, src: str) -> str:
    """``%<name>.v``: scalar ``%src`` of type ``ty`` in every lane."""
    return (f"  %{name}.i = insertelement <{WIDTH} x {ty}> poison, {ty} %{src}, i64 0\n"
            f"  %{name}.v = shufflevector <{WIDTH} x {ty}> %{name}.i, <{WIDTH} x {ty}> poison, "
            f"<{WIDTH} x i32> zeroinitializer\n")


def _source() -> str:
    vf, vd = f"<{WIDTH} x float>", f"<{WIDTH} x double>"
    consts = "".join(f"  %{n}.p = getelementptr i64, ptr %ctx, i64 {i}\n  %{n}.s = load float, ptr %{n}.p\n"
                     for i, n in ((2, "omb1"), (3, "omb2"), (4, "beta2"), (5, "eps"), (6, "l2")))
    splats = "".join(_splat(n, "float", n + ".s") for n in ("omb1", "omb2", "beta2", "eps", "l2"))
    splats += _splat("decay", "double", "decay.s")
    seg_splats = _splat("step", "double", "step.s") + _splat("bc2", "double", "bc2.s")

    def lanes(i, x):
        return "\n".join(f"  %{n}a{x} = getelementptr float, ptr %{n}b, i64 {i}" for n in "pgmv")
    return f"""
declare float @llvm.sqrt.f32(float)
declare {vf} @llvm.sqrt.v{WIDTH}f32({vf})

; %count segments from %rows (ROW int64 each); %ctx: flags, decay (double), then 1 - beta1, 1 - beta2, beta2, eps
; and L2's weight decay (float, each in an int64 slot)
define void @jitgrad_adam_segments(ptr %rows, ptr %count, ptr %ctx, ptr %unused) {{
entry:
  %cnt = ptrtoint ptr %count to i64
  %none = icmp slt i64 %cnt, 1
  br i1 %none, label %done, label %setup
setup:
  %flags = load i64, ptr %ctx
  %fd = and i64 %flags, {DECAY}
  %decayon = icmp ne i64 %fd, 0
  %fl = and i64 %flags, {L2}
  %l2on = icmp ne i64 %fl, 0
  %fm = and i64 %flags, {MAXIMIZE}
  %maximize = icmp ne i64 %fm, 0
  %decay.p = getelementptr i64, ptr %ctx, i64 1
  %decay.s = load double, ptr %decay.p
{consts}{splats}  br label %segment
segment:
  %j = phi i64 [0, %setup], [%jn, %tail_done]
  %jat = mul i64 %j, {8 * ROW}
  %r = getelementptr i8, ptr %rows, i64 %jat
  %pb = load ptr, ptr %r
  %gq = getelementptr i64, ptr %r, i64 1
  %gb = load ptr, ptr %gq
  %mq = getelementptr i64, ptr %r, i64 2
  %mb = load ptr, ptr %mq
  %vq = getelementptr i64, ptr %r, i64 3
  %vb = load ptr, ptr %vq
  %nq = getelementptr i64, ptr %r, i64 4
  %n = load i64, ptr %nq
  %stq = getelementptr i64, ptr %r, i64 5
  %step.s = load double, ptr %stq
  %bcq = getelementptr i64, ptr %r, i64 6
  %bc2.s = load double, ptr %bcq
{seg_splats}  %nv = and i64 %n, {-WIDTH}
  br label %vector_head
vector_head:
  %iv = phi i64 [0, %segment], [%ivn, %vector]
  %vmore = icmp slt i64 %iv, %nv
  br i1 %vmore, label %vector, label %tail_head
vector:
{lanes("%iv", "")}{_body(vf, vd, ".v", "")}
  %ivn = add i64 %iv, {WIDTH}
  br label %vector_head
tail_head:
  %it = phi i64 [%iv, %vector_head], [%itn, %tail]
  %tmore = icmp slt i64 %it, %n
  br i1 %tmore, label %tail, label %tail_done
tail:
{lanes("%it", ".t")}{_body("float", "double", ".s", ".t")}
  %itn = add i64 %it, 1
  br label %tail_head
tail_done:
  %jn = add i64 %j, 1
  %jmore = icmp slt i64 %jn, %cnt
  br i1 %jmore, label %segment, label %done
done:
  ret void
}}

; pieces 1.. of the segments (piece k: segments starts[k] .. starts[k + 1] - 1) queued on the pool's workers,
; piece 0 on the calling thread, then the wait for the round
define void @jitgrad_adam_round(ptr %rows, ptr %starts, i64 %pieces, ptr %add, ptr %ready, ptr %sync, ptr %ctx) {{
entry:
  br label %head
head:
  %k = phi i64 [1, %entry], [%kn, %queue]
  %more = icmp slt i64 %k, %pieces
  br i1 %more, label %queue, label %run
queue:
  %sp = getelementptr i64, ptr %starts, i64 %k
  %s = load i64, ptr %sp
  %kn = add i64 %k, 1
  %ep = getelementptr i64, ptr %starts, i64 %kn
  %e = load i64, ptr %ep
  %at = mul i64 %s, {8 * ROW}
  %row = getelementptr i8, ptr %rows, i64 %at
  %c = sub i64 %e, %s
  %cp = inttoptr i64 %c to ptr
  call void %add(ptr @jitgrad_adam_segments, ptr %row, ptr %cp, ptr %ctx, ptr null)
  br label %head
run:
  call void %ready()
  %e0p = getelementptr i64, ptr %starts, i64 1
  %e0 = load i64, ptr %e0p
  %e0c = inttoptr i64 %e0 to ptr
  call void @jitgrad_adam_segments(ptr %rows, ptr %e0c, ptr %ctx, ptr null)
  call void %sync()
  ret void
}}
"""


class _Native:
    """The compiled pass: ``segments`` (on the calling thread) and ``round`` (pieces on the pool), bound once."""

    def __init__(self, engine):
        self._engine = engine       # keeps the code mapped
        i64 = ctypes.c_int64
        self.segments = ctypes.CFUNCTYPE(None, i64, i64, i64, i64)(
            engine.get_function_address("jitgrad_adam_segments"))
        self.round = ctypes.CFUNCTYPE(None, *([i64] * 7))(engine.get_function_address("jitgrad_adam_round"))


_BUILT: list = []
_QUEUED: list = []
_LOCK = threading.Lock()


def _native():
    """The compiled pass, or None while it is not built: the first ask queues its build on the build thread
    (``codegen/native/build_thread.py``, ~40-80 ms of LLVM, which a first step should not wait for; the NumPy rule
    updates meanwhile, with the same bits), or builds it here under ``JITGRAD_EAGER_KERNELS=sync`` and
    ``JITGRAD_BACKGROUND_COMPILE=0``."""
    if _BUILT:
        return _BUILT[0]
    if eager_kernels.SYNC or os.environ.get("JITGRAD_BACKGROUND_COMPILE", "1") == "0":
        return build()
    with _LOCK:
        if _QUEUED:
            return None
        _QUEUED.append(True)
    build_thread.queue_call(build, build_thread.EAGER, "Adam's native pass")
    return None


def build():
    """Compile the pass now, once per process (tests, benchmarks); returns it, or None without llvmlite."""
    if not _BUILT:
        with _LOCK:
            if not _BUILT:
                _BUILT.append(_compile())
    return _BUILT[0]


def _compile():
    try:
        # the host's vectors; no FMA (the NumPy rule's bits, which the tests check on an FMA host)
        return _Native(ir_engine.compile_module(_source(), host=True))
    except ImportError:     # pragma: no cover - llvmlite is a dependency
        return None


def _f32_bits(x) -> int:
    return int(np.asarray(x, np.float32).view(np.int32))


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def _bits(sc):
    """The step size's and sqrt(bias_correction2)'s float64 bits, or None when either is not a 0-d float64 array
    (then the NumPy rule rounds differently)."""
    step, bc2 = sc
    if type(step) is not np.ndarray or type(bc2) is not np.ndarray or step.dtype != _F64 or bc2.dtype != _F64 \
            or step.ndim or bc2.ndim:
        return None
    return int(step.view(np.int64)), int(bc2.view(np.int64))


def update(work, consts) -> list:
    """Update ``work``'s entries ``(param, grad, exp_avg, exp_avg_sq, (step size, sqrt(bias_correction2)))`` (NumPy
    arrays of the parameter's dtype and shape, as ``multi_tensor.run_rule`` checks them and
    ``multi_tensor_rules._adam_arrays`` takes them; ``consts`` its constants) in one native pass, on the pool when
    they are big enough; returns the entries the pass does not serve, for the NumPy rule.  (No call per parameter
    but the list's: ``test_eager_budget.py`` counts them.)"""
    l2, decay, one_m_b1, one_m_b2, beta2, eps, maximize, amsgrad = consts
    if not ENABLED or amsgrad or np.geterr() != _DEFAULT_ERR or (decay is not None and (
            type(decay) is not np.ndarray or decay.dtype != _F64)):
        return work
    mine, rest = [], []
    last, bits = None, None
    total = 0
    for w in work:      # (five entries each: amsgrad's sixth declined above)
        pd, g, m, v, sc = w
        if sc is not last:
            last, bits = sc, _bits(sc)
        if bits is not None and pd.dtype is _F32 and pd.ndim and pd.size and pd.flags.c_contiguous \
                and g.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous \
                and pd.flags.writeable and m.flags.writeable and v.flags.writeable:
            # (run_rule checked each is an ndarray of pd's dtype and shape; one read of each element and one
            # write: the rule's order only where no two of them are the same buffer)
            a = (pd.__array_interface__["data"][0], g.__array_interface__["data"][0],
                 m.__array_interface__["data"][0], v.__array_interface__["data"][0])
            if a[0] != a[1] and a[0] != a[2] and a[0] != a[3] and a[1] != a[2] and a[1] != a[3] \
                    and a[2] != a[3]:
                mine += (a + (pd.size,) + bits,)
                total += pd.size
                continue
        rest += (w,)
    if not mine or total < MIN_ELEMENTS:
        return work
    native = _native()
    if native is None:
        return work
    threads = _threads(total)
    rows, starts = _segments(mine, total, threads)
    ctx = (ctypes.c_int64 * 8)((DECAY if decay is not None else 0) | (L2 if l2 != 0 else 0)
                               | (MAXIMIZE if maximize else 0),
                               int((decay if decay is not None else np.asarray(1.0)).view(np.int64)),
                               _f32_bits(one_m_b1), _f32_bits(one_m_b2), _f32_bits(beta2), _f32_bits(eps),
                               _f32_bits(l2), 0)
    at, cx = rows.ctypes.data, ctypes.addressof(ctx)
    pooled = False
    if len(starts) > 2 and LAUNCH_LOCK.enter_now():
        try:
            pool = workpool.spinning()
            native.round(at, starts.ctypes.data, len(starts) - 1, pool.add_task, pool.ready, pool.synchronize, cx)
            pooled = True
        finally:
            LAUNCH_LOCK.__exit__(None, None, None)
    if not pooled:
        native.segments(at, len(rows), cx, 0)
    STATS["updates"] += 1
    STATS["pooled"] += pooled
    STATS["elements"] += total
    return rest


def _threads(total: int) -> int:
    """The threads an update of ``total`` elements runs on: one below the eager kernels' threshold or on no
    jitgrad pool, else the pooled eager GEMMs' rule (``pooled_gemm.block_threads``: ``set_num_threads``, the busy
    sign, the eager pacer, a core for the build thread)."""
    if not workpool.takes(total, PER_ELEMENT, eager=True) or gemm_blocks.runner() is None:
        return 1
    return pooled_gemm.block_threads(min(settings.STATE.num_threads or workpool.threads(), workpool.threads()))


def _segments(mine, total: int, threads: int):
    """``(rows, starts)``: the parameters' elements (``mine``: p, g, m, v addresses, elements, the two scalars'
    bits) as segments, a row each (``ROW`` int64), cut into ``threads`` pieces of about equal elements (a parameter
    may span two), piece k the rows ``starts[k]`` to ``starts[k + 1] - 1``."""
    per = -(-total // max(threads, 1))
    rows, starts = [], [0]
    room = per
    for p, g, m, v, n, sb, bb in mine:
        done = 0
        while done < n:
            take = min(n - done, room)
            off = 4 * done
            rows.append((p + off, g + off, m + off, v + off, take, sb, bb, 0))
            done += take
            room -= take
            if room == 0 and len(starts) < threads:
                starts.append(len(rows))
                room = per
    if starts[-1] != len(rows):
        starts.append(len(rows))
    return np.array(rows, np.int64).reshape(-1, ROW), np.array(starts, np.int64)


__all__ = ["update", "build", "ENABLED", "MIN_ELEMENTS", "PER_ELEMENT", "STATS"]
