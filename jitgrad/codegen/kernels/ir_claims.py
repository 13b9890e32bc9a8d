"""``kernel_ir.Claim`` in LLVM IR (``ir_loops.py``'s renderer calls ``lower``): a parallel loop's first index-error
record, written whole by the least key (``index_checks.record_index_error``).  Numba's text calls the same atomics
through ``abi.claim``/``lock``/``holds``/``unlock``; the interpreter runs it as plain steps."""
from __future__ import annotations

from . import kernel_ir as ki, llvm_text as T


def lower(r, s: ki.Claim) -> None:
    """Emit claim ``s`` with renderer ``r`` (its builder, function, module, ``value`` and ``block``): an atomic read of
    the key slot and, only when it is above this key (the error path's one load and compare, in a loop that meets
    many bad indices), an atomic min; when that lowered the slot, a compare-and-swap spin on the lock slot, the body
    if the key slot still holds this key, and the lock's release.  Its blocks are weighted rare (the spin's retry
    too), so the loop around keeps its registers for its own work (B11's scatter loop: its worker's instructions a
    step as before)."""
    b, I64 = r.b, T.I64
    memo = {}
    slot = b.gep(I64, r.value(s.ptr, memo), r.value(s.at, memo))
    key = r.value(s.key, memo)
    tried, spin, held, body, free, done = (r.fn.block("claim." + x) for x in
                                           ("min", "spin", "held", "body", "free", "done"))
    b.cbranch(b.icmp("sgt", I64, b.load_atomic(I64, slot), key), tried, done)
    b.lines[-1] += ", !prof " + r.module.metadata('!"branch_weights", i32 1, i32 2000')
    b.position_at_end(tried)
    b.cbranch(b.icmp("sgt", I64, b.atomicrmw("min", I64, slot, key), key), spin, done)
    b.position_at_end(spin)
    lock = b.gep(I64, slot, "1")
    b.cbranch(b.cmpxchg(I64, lock, "0", "1"), held, spin)
    b.lines[-1] += ", !prof " + r.module.metadata('!"branch_weights", i32 2000, i32 1')
    b.position_at_end(held)
    b.cbranch(b.icmp("eq", I64, b.load_atomic(I64, slot), key), body, free)
    b.position_at_end(body)
    r.block(s.body)
    if not b.block.terminated:
        b.branch(free)
    b.position_at_end(free)
    b.store_atomic(I64, "0", lock)
    b.branch(done)
    b.position_at_end(done)


__all__ = ["lower"]
