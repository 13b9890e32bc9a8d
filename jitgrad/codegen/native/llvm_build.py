"""Compiling kernels with LLVM, without Numba: the text that compiles a kernel, and its object code.

A build knows a kernel by its key and its rendered text (``numba_render.py``: the kernel's identity).  The kernel's
IR is registered under that text when the kernel is made (``loops.Kernel``: ``register``), so the build asks
``compile_text`` what compiles it: its LLVM IR (``ir_loops.render``) when the renderer lowers the IR, else the
text itself, which Numba compiles (``numba_build.py``).  ``compile_kernel`` / ``object_code`` run LLVM's O3
pipeline on the IR as Numba configures its JIT (the host CPU and its features, loop vectorisation), on a
per-thread LLVM context and target machine, and emit the object code (``objstore.Blob``) that ``objload`` links
and the disk cache keeps; ``forked_llvm.py`` may run the same in another process.
"""
from __future__ import annotations

import contextlib
import os
import threading
import weakref

from ..kernels import ir_loops, kernel_ir as ki, vector_loops

# counted, so tests can check which path built what (``kernels_quick_minor`` / ``_vector``: of ``kernels_quick``;
# ``modules_first_tier``: the LLVM modules those were built in, ``quick_objects``; ``modules_quick``: jitgrad's own
# modules through the quick pipeline, ``quick_object``)
STATS = {"kernels_ir": 0, "kernels_quick": 0, "kernels_quick_minor": 0, "kernels_quick_vector": 0, "kernels_refused": 0,
         "modules_first_tier": 0, "modules_quick": 0}
_lock = threading.Lock()


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()        # a build thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# kernel source (its Numba text, which keys it) -> its IR, for the kernels this process made: the build asks by
# key and source, and renders the IR (nothing parses the text)
_IRS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_TEXTS: dict = {}       # key -> LLVM IR text rendered by ``compile_text`` (compiled next, then dropped)
_QUICK_TEXTS: dict = {}     # key -> the first tier's text (``quick_text``: vector loops), until its quick build


def register(source: str, kir: ki.KernelIR) -> None:
    """``kir`` is the IR of the kernel whose rendered text is ``source`` (the first one registered is kept while
    it lives: equal texts have equal IR)."""
    if _IRS.get(source) is None:
        _IRS[source] = kir


def is_llvm(text: str) -> bool:
    return text.startswith(ir_loops.HEADER)


def _rendered(texts: dict, key: str, source: str, kir, render, fallback):
    """``render(kir)`` of kernel ``source`` (its IR ``kir``, else the one registered), cached in ``texts`` by
    ``key``; ``source`` itself when no IR is known, ``fallback()`` when the renderer refuses the IR."""
    with _lock:
        text = texts.get(key)
    if text is not None:
        return text
    if kir is None:
        kir = _IRS.get(source)
    if kir is None:
        return source
    try:
        text = render(kir)
    except ir_loops.Unsupported:
        return fallback(kir)
    with _lock:
        if len(texts) > 512:
            texts.clear()
        texts[key] = text
    return text


def compile_text(key: str, source: str, kir: ki.KernelIR | None = None) -> str:
    """What compiles kernel ``source`` (keyed ``key``; its IR ``kir``, else the one registered for ``source``):
    its LLVM IR text when this renderer lowers its IR, else ``source`` itself (Numba compiles it)."""
    if is_llvm(source):
        return source
    return _rendered(_TEXTS, key, source, kir, lambda k: ir_loops.render(k, key), lambda k: source)


def quick_text(key: str, source: str, kir: ki.KernelIR | None = None) -> str:
    """What the first tier compiles for kernel ``source`` (its IR ``kir``, else the one registered): its LLVM IR with
    the innermost contiguous loops in vector blocks of the host's width (``vector_loops.py``, ``VECTOR_BITS``), else
    as ``compile_text``."""
    bits = vector_bits()
    if is_llvm(source) or not bits:
        return compile_text(key, source, kir)
    return _rendered(_QUICK_TEXTS, key, source, kir, lambda k: vector_loops.render(k, key, bits),
                     lambda k: compile_text(key, source, k))


def first_tier_text(key: str, source: str) -> str:
    """``quick_text`` for a build that compiles it now: not kept (the optimised build renders its own text)."""
    text = quick_text(key, source)
    with _lock:
        _QUICK_TEXTS.pop(key, None)
    return text


def translatable(key: str, source: str) -> bool:
    """Whether the kernel compiles without Numba."""
    return is_llvm(compile_text(key, source))


# The first tier's loops in vector blocks of this many bits (``vector_loops.py``; ``JITGRAD_QUICK_VECTOR_BITS=0``:
# scalar loops, as the O3 build's text); None: the width of the vector registers of the CPU kernels are built for
_env_bits = os.environ.get("JITGRAD_QUICK_VECTOR_BITS", "").strip()
VECTOR_BITS = int(_env_bits) if _env_bits else None


def vector_bits() -> int:
    """``VECTOR_BITS``, by default from the features of the CPU kernels are built for (``cache._cpu``)."""
    global VECTOR_BITS
    if VECTOR_BITS is None:
        from . import cache
        feats = cache._cpu()[2].split(",")
        VECTOR_BITS = 512 if "+avx512f" in feats else 256 if "+avx" in feats else 128
    return VECTOR_BITS


_TLS = threading.local()
_INTERLEAVED = f'!"llvm.loop.interleave.count", i32 {ir_loops.INTERLEAVE}'     # (a "vector" build's loops: 1)
_NOT_INTERLEAVED = '!"llvm.loop.interleave.count", i32 1'
# The quick build (a background build's first tier, ``build.py``): promote the kernel's variables to registers
# (its allocas), fold and simplify, then emit with the code generator's cheap level.  No loop passes, no
# vectoriser: its text has its innermost contiguous loops in vector blocks already (``quick_text``,
# ``vector_loops.py``), so the code is vector anyway.  Counted under callgrind (AVX2) on ``variable_length.py``'s LM
# step (``benchmarks/first_tier_counts.py``): a warm step on the first tier's code 4.43M -> 3.35M instructions
# (O3's 2.99M: 1.48x -> 1.12x), the first tier's LLVM 976M -> 812M, its rendering 63M -> 98M.  The optimised build
# replaces it kernel by kernel.
QUICK_PASSES = ("sroa", "instruction_combine", "simplify_cfg")
QUICK_SUFFIX = "_quick"     # the quick object's symbol: both builds of a kernel live in one process's engine
# The first tier by kernel (``graph_build.first_tiers``), counted on ``variable_length.py``'s LM step:
# - "minor" (a kernel doing a sliver of its graph's work): the quick passes, then the code generator's level 0 (fast
#   instruction selection and register allocation): ~2.5x fewer instructions to build than level 1, for code that
#   runs ~3x longer, which on a kernel doing under 1% of a call's work is noise;
# - "vector" (a kernel doing most of it; with vector text, ``vector_bits()``, it is the quick build): with scalar
#   text, what makes the quick code slow is scalar loops (its log-softmax kernel ran
#   1.95M instructions a call quick, 0.33M at O3; scalar passes gave nothing: O1 without the vectoriser 1.86M), so
#   LLVM's O1 pipeline with the loop vectoriser, without unrolling and with its loops not interleaved (the text's
#   interleave count set to 1: the vector body 4x smaller to emit): 0.36M a call, for ~2.7x the quick build's
#   instructions (O3: ~4.8x).
# (``JITGRAD_QUICK_CODEGEN_LEVEL``: the quick and vector tiers' level, 1 by default; 0 halves the LM's first-tier LLVM
# work with vector text, but level 0's instruction selection fuses no FMAs: other bits than O3's)
_QUICK_LEVEL = int(os.environ.get("JITGRAD_QUICK_CODEGEN_LEVEL", "1"))
CODEGEN_LEVEL = {False: 3, True: _QUICK_LEVEL, "vector": _QUICK_LEVEL, "minor": 0}


def _tools(quick=False):
    """This thread's LLVM context and target machine (``quick``: True, "vector" or "minor", the code generator's
    cheap levels, ``CODEGEN_LEVEL``): threads compile kernels at once, and neither is safe to share while it works
    (LLVM itself runs without the GIL: llvmlite's calls release it)."""
    name = {False: "tools", True: "quick", "vector": "quick", "minor": "minor"}[quick]
    t = getattr(_TLS, name, None)
    if t is None:
        from . import cache, objload
        ll = objload._ll()
        target = ll.Target.from_triple(ll.get_process_triple())
        # the host's target machine as Numba configures its JIT: O3, host CPU and features (or the ones
        # NUMBA_CPU_NAME / NUMBA_CPU_FEATURES name: the CPU the cache key names, so an entry built for another CPU
        # never runs here), static relocations
        _, cpu, features = cache._cpu()
        tm = target.create_target_machine(cpu=cpu, features=features, opt=CODEGEN_LEVEL[quick], reloc="static",
                                          codemodel="jitdefault")
        t = (ll, ll.create_context(), tm)
        setattr(_TLS, name, t)
    return t


_LAYOUTS: dict = {}


def _data_layout(tm, cpu) -> str:
    """The data layout of the target machines for ``cpu`` (``cache._cpu()``: the same at every level), asked of LLVM
    once a process: four calls into LLVM a module fewer, each a GIL hand-off of the build thread's against the
    calls running meanwhile."""
    layout = _LAYOUTS.get(cpu)
    if layout is None:
        layout = _LAYOUTS[cpu] = str(tm.target_data)
    return layout


def pipeline(quick):
    """The passes and code generator level a build of tier ``quick`` (False: O3; True, "minor", "vector": the first
    tier's, ``CODEGEN_LEVEL``) goes through, as the tier that names them: a "vector" kernel with vector text
    (``vector_bits()``) is a quick one.  Kernels of one pipeline build as one module (``quick_objects``)."""
    return True if quick == "vector" and vector_bits() else quick


def _optimised(texts, quick=False):
    """``texts`` (LLVM IR; one str, or several, each linked into the first) as one module of this thread's context
    for ``quick``, verified and optimised: (module, target machine)."""
    ll, ctx, tm = _tools(quick)
    quick = pipeline(quick)     # (a "vector" kernel's loops are vector blocks already: the quick passes)
    m = None
    for text in (texts,) if isinstance(texts, str) else texts:
        if quick == "vector":
            text = text.replace(_INTERLEAVED, _NOT_INTERLEAVED)
        part = ll.parse_assembly(text, context=ctx)
        if m is None:
            m = part
        else:
            m.link_in(part)
    from . import cache
    cpu = cache._cpu()
    m.triple = cpu[0]
    m.data_layout = _data_layout(tm, cpu)
    m.verify()
    if quick and quick != "vector":
        pm = ll.create_new_module_pass_manager()
        for name in QUICK_PASSES:
            getattr(pm, f"add_{name}_pass")()
        pm.run(m, _pass_builder(ll, tm, quick))
        return m, tm
    pb = _pass_builder(ll, tm, quick)
    pb.getModulePassManager().run(m, pb)
    return m, tm


def _pass_builder(ll, tm, quick):
    """This thread's pass builder for the pipeline ``quick`` (``pipeline``'s answer) on its target machine ``tm``,
    made once: a run builds its analyses afresh (the same code whichever module came before), and each pass
    builder made per module cost six calls into LLVM, each a GIL hand-off of the build thread's against the calls
    running meanwhile."""
    name = f"pb_{quick}"
    pb = getattr(_TLS, name, None)
    if pb is None or pb._tm is not tm:
        if quick == "vector":
            pto = ll.create_pipeline_tuning_options(speed_level=1)
            pto.loop_vectorization, pto.slp_vectorization = True, False
            pto.loop_unrolling = pto.loop_interleaving = False
        elif quick:
            pto = ll.create_pipeline_tuning_options(speed_level=0)
        else:
            pto = ll.create_pipeline_tuning_options(speed_level=3)
            pto.loop_vectorization = True       # Numba's defaults (NUMBA_LOOP_VECTORIZE=1, NUMBA_SLP_VECTORIZE=0)
            pto.slp_vectorization = False
        pb = ll.create_pass_builder(tm, pto)
        setattr(_TLS, name, pb)
    return pb


def compile_kernel(key: str, source: str, elsewhere=None):
    """The kernel's optimised object code (``objstore.Blob``), or None when Numba must compile it.  ``elsewhere``:
    an object with ``object_code(key, text)`` that may compile the text in another process
    (``native/forked_llvm.py``; None: it did not, and this process does).  (A first tier's kernels build together:
    ``quick_objects``.)"""
    with _lock:
        text = _TEXTS.pop(key, None)
    if text is None:
        text = compile_text(key, source)
        with _lock:
            _TEXTS.pop(key, None)
    if not is_llvm(text):
        STATS["kernels_refused"] += 1
        return None
    if not text.startswith(f"{ir_loops.HEADER}{key}\n"):
        raise ValueError(f"kernel {key}: its LLVM IR names another key")
    blob = elsewhere.object_code(key, text) if elsewhere is not None else None
    if blob is None:
        blob = object_code(key, text)
    with _lock:
        STATS["kernels_ir"] += 1
    return blob


def object_code(key: str, text: str, quick=False):
    """LLVM IR ``text`` of kernel ``key`` optimised and compiled to object code (``objstore.Blob``); ``quick``: the
    quick build (True, "minor" or "vector": ``CODEGEN_LEVEL``), its symbol ``symbol(key) + QUICK_SUFFIX``."""
    from . import objload, objstore
    m, tm = _optimised(text, quick)
    name = ir_loops.symbol(key)
    if quick:
        name += QUICK_SUFFIX
        m.get_function(ir_loops.symbol(key)).name = name
    obj = tm.emit_object(m)
    # the C library's functions it calls (atan2, nextafter; LLVM may add memset) and, for a parallel kernel, the
    # pool's (``workpool.SYMBOLS``): resolved from the process when the object is linked (``objload.load``)
    needs = objload.declared_symbols(text)
    return objstore.Blob(key, name, obj, needs)


def quick_objects(jobs):
    """A first tier's kernels ``jobs`` ((key, LLVM IR text, tier) of one ``pipeline``) compiled as one module:
    (object code, each job's symbol, the symbols the object needs).  Each kernel's function is the one its own
    module would give (the passes work function by function, the code generator too), under its quick symbol
    (``QUICK_SUFFIX``).  One module, not one per kernel: a module costs the code generator's set-up (~3 ms at level
    1) and some forty calls into LLVM, and on the build thread each call gives the GIL up and waits to take it back
    from the calls that run meanwhile (``graph_build.py``: a background build's first tier)."""
    texts, symbols = [], []
    for key, text, _ in jobs:
        if not text.startswith(f"{ir_loops.HEADER}{key}\n"):
            raise ValueError(f"kernel {key}: its LLVM IR names another key")
        sym = ir_loops.symbol(key)
        texts.append(text.replace(f'@"{sym}"', f'@"{sym}{QUICK_SUFFIX}"'))
        symbols.append(sym + QUICK_SUFFIX)
    from . import objload
    m, tm = _optimised(texts, jobs[0][2])
    with _without_lsr(pipeline(jobs[0][2]) is True):
        obj = tm.emit_object(m)
    needs = sorted({s for t in texts for s in objload.declared_symbols(t)})
    count_first_tier([tier for _, _, tier in jobs])
    return obj, symbols, needs


def count_first_tier(tiers) -> None:
    """Count one first-tier module of kernels of ``tiers`` (``quick_objects``; ``build.link_quick`` for one a forked
    child built)."""
    with _lock:
        STATS["kernels_quick"] += len(tiers)
        STATS["modules_first_tier"] += 1
        for tier in tiers:
            if tier in ("minor", "vector"):
                STATS["kernels_quick_" + tier] += 1


@contextlib.contextmanager
def _without_lsr(on=True):
    """The code generator's loop strength reduction off for one emission (``on``): the first tier's quick pipeline
    at level 1, where it was ~12% of the LM step's first-tier LLVM (it rewrites induction variables and addresses,
    never a value: the same bits).  LLVM has it as a process-wide option only, so it is set and put back under
    llvmlite's lock, which no other thread's LLVM call passes meanwhile."""
    if not on:
        yield
        return
    from llvmlite.binding import ffi
    ll = _tools(True)[0]
    with ffi.lib._lock:
        ll.set_option("jitgrad", "-disable-lsr=true")
        try:
            yield
        finally:
            ll.set_option("jitgrad", "-disable-lsr=false")


def quick_object(text: str) -> bytes:
    """Object code of a module of jitgrad's own (``text``: LLVM IR, not a kernel) through the quick pipeline
    (``QUICK_PASSES``, the code generator's cheap level): code every process compiles once, on the way to a graph's
    first compiled call (the size fill, ``program/size_fill.py``: at O2 it cost ~3.5x the instructions, as much as
    a fifth of a small graph's quick build, for a function that runs once per new tuple of sizes)."""
    m, tm = _optimised(text, quick=True)
    with _lock:
        STATS["modules_quick"] += 1
    return tm.emit_object(m)


def assembly(kir: ki.KernelIR, key: str = "0" * 64) -> str:
    """The kernel's machine code as assembly text (for tests and introspection)."""
    m, tm = _optimised(ir_loops.render(kir, key))
    return tm.emit_assembly(m)


__all__ = ["register", "is_llvm", "compile_text", "quick_text", "translatable", "compile_kernel", "object_code",
           "quick_objects", "quick_object", "pipeline", "count_first_tier", "first_tier_text",
           "assembly", "STATS",
           "QUICK_PASSES", "CODEGEN_LEVEL"]
