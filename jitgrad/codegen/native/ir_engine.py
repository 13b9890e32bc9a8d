"""An MCJIT engine of its own for one hand-written LLVM IR module: the worker pool (``spin_pool.py``), the eager
GEMM blocks' hand-off (``gemm_blocks.py``) and Adam's eager pass (``optim/adam_native.py``), each compiled once per
process in a few milliseconds, with no C compiler and nothing from Numba.  (Generated kernels go through
``llvm_build.py`` and the object store instead: they are keyed, cached on disk and linked into one engine.)
"""
from __future__ import annotations


def compile_module(source: str, host: bool = False):
    """An MCJIT engine holding LLVM IR ``source``, verified and finalized (its functions' addresses ready:
    ``engine.get_function_address``; keep the engine alive while they are called).  ``host``: code for this CPU's
    features (its vector width), else the triple's baseline.  The target machine's floating-point fusion is LLVM's
    default: no plain ``fmul``/``fadd`` pair becomes an FMA.  Raises ImportError without llvmlite."""
    import llvmlite.binding as ll
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    mod = ll.parse_assembly(source)
    mod.verify()
    target = ll.Target.from_default_triple()
    if host:
        tm = target.create_target_machine(opt=2, cpu=ll.get_host_cpu_name(),
                                          features=ll.get_host_cpu_features().flatten())
    else:
        tm = target.create_target_machine(opt=2)
    engine = ll.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return engine


__all__ = ["compile_module"]
