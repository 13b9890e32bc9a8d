"""Whether a kernel's parallel loop can be cut into chunks (``ir_loops._Renderer.parallel_kernel``): what the
statements before it assign and store, and its reductions (sums only, each chunk's partial sum added in chunk
order after the launch; nothing else it assigns read after it)."""
from __future__ import annotations

from . import kernel_ir as ki


def _walk_stmts(stmts):
    for s in stmts:
        yield s
        if isinstance(s, ki.For):
            yield from _walk_stmts(s.body)
        elif isinstance(s, ki.If):
            yield from _walk_stmts(s.then)
            yield from _walk_stmts(s.orelse)
        elif isinstance(s, ki.Claim):
            yield from _walk_stmts(s.body)


def stores(s) -> bool:
    """Whether statement ``s`` (or one inside it) stores to memory."""
    return any(isinstance(x, (ki.Store, ki.Claim)) for x in _walk_stmts([s]))


def assigned(s) -> set:
    """The variables statement ``s`` (or one inside it) assigns, loop counters included."""
    out = set()
    for x in _walk_stmts([s]):
        if isinstance(x, ki.Assign):
            out.add(x.var)
        elif isinstance(x, ki.For):
            out.add(x.var)
    return out


def claims(stmts) -> bool:
    """Whether ``stmts`` record an error by a claim (``kernel_ir.Claim``: a parallel loop's index-error record)."""
    return any(isinstance(s, ki.Claim) for s in _walk_stmts(stmts))


def vars_read(stmts) -> set:
    """The variables the values of ``stmts`` read."""
    seen, out = set(), set()
    for top in ki.statement_values(stmts):
        for v in ki.walk_values(top, seen):
            if v.op == "var":
                out.add(v.attr)
    return out


def reduction_problem(loop, after) -> str | None:
    """None when the parallel ``loop``'s reductions are sums (each update ``r = r + e``, ``e`` not reading ``r``,
    and ``r`` read nowhere else in the loop) and no other variable it assigns is read after it (its value would be
    some chunk's); else what is wrong."""
    red = set(loop.reductions)
    read_after = vars_read(after)
    for s in _walk_stmts(loop.body):
        if isinstance(s, ki.Assign) and s.var in red:
            v = s.value
            ok = v.op == "bin" and v.attr == "+" and v.args[0].op == "var" and v.args[0].attr is s.var \
                and s.var not in _vars_read_value(v.args[1])
            if not ok:
                return f"{s.var.name}: not a sum reduction of a parallel loop"
        elif isinstance(s, (ki.Assign, ki.For)) and s.var in read_after:
            return f"{s.var.name} made in a parallel loop and read after it"
    updates = sum(isinstance(s, ki.Assign) and s.var in red for s in _walk_stmts(loop.body))
    reads = 0
    for top in ki.statement_values(loop.body):
        reads += sum(v.op == "var" and v.attr in red for v in _all_values(top))
    if reads != updates:
        return "a parallel loop reads its partial sum"
    return None


def _all_values(x):
    """Every value in ``x``'s tree, a shared one as often as it is used."""
    stack = [x]
    while stack:
        v = stack.pop()
        yield v
        stack.extend(v.args)


def _vars_read_value(x) -> set:
    return {v.attr for v in ki.walk_values(x) if v.op == "var"}


__all__ = ["stores", "assigned", "claims", "vars_read", "reduction_problem"]


def round_share(body, n):
    """How the launch of parallel loop ``body[n]`` may share a pool round pending from launches before it
    (``pool_abi.joining``): "joins" when nothing of it runs on the calling thread after its chunks (what it stores
    before them, a sum's output zeroed, the entry's grouping checks no earlier chunk of the round touches:
    ``round_groups``); "closes" when statements after its chunks read what they wrote (a column sum's partial
    rows added in chunk order, ``loops.chunked_rows``) and it has no partial sums of its own: it queues its chunks
    as the round's last launch and runs the round (``pool_abi.flush``) before those statements; else None."""
    if body[n].reductions:
        return None
    return "closes" if body[n + 1:] else "joins"
