"""Which innermost loops the first tier writes as vector blocks, and how (issue 30; ``vector_loops.py`` renders them).

A loop qualifies when it steps by 1, its body is straight-line (assignments and stores), and every load and store
that varies with it is contiguous in its counter.  Each value of the body then has a class (``Classes.of``):
uniform (``U``: the same in every iteration, emitted as the scalar code computes it), the counter plus a uniform
(``C``: a contiguous index, kept as its first lane), varying (``V``: a vector of ``width`` lanes) or lane-serial
(``L``: it depends on a variable the loop carries from one iteration to the next, which runs lane by lane in the
scalar loop's order).  A carried integer that reduces with an exact associative operation (a sum, ``|``, ``&``,
``^``, the larger or smaller: ``exact_reduction``; max over floats is one, through ordered keys) reduces in the lanes
apart instead, combined at the end to the same bits; so does a float sum (``float_sum``, ``LANE_SUMS``), to the bits
of that order (reassociated, as the optimised build's sums are).

Memory order: a block loads and stores all its lanes at once, which is the scalar order unless a store and another
access touch the same memory at different lanes of a block.  Two accesses of different alias classes never do (the
layout's promise, ``alias_scopes.py``), nor two at the same address expression; any other pair is checked before
the loop (``Plan.checks``: the same element, or ``width`` elements or more apart; a uniform access outside the range
the stores cover), and the scalar loop runs all of it when a check fails.
"""
from __future__ import annotations

import os

from . import kernel_ir as ki

U, C, V, L = 0, 1, 2, 3     # a value's class in a loop (see the module docstring)
MAX_CHECKS = 8              # more pairs of accesses to check than this: the loop stays scalar
MAX_WIDTH = 16              # lanes at most (bytes and bools: a serial sum over 64 lanes would be long)
# A float sum ``acc = acc + e`` sums in the lanes apart, combined at the end (``float_sum``), as the optimised
# build's vectorised sums do (its additions carry ``reassoc``): in the scalar order (``JITGRAD_QUICK_LANE_SUMS=0``)
# each lane waits for the one before, and nanoGPT's first tier (``benchmarks/variable_length.py``, 2026-12-01) ran its
# row sums (LayerNorm, softmax's backward, the optimiser's norms) 2-3x slower than O3: a step 3.3 ms against O3's
# 2.8 ms, 2.8 ms in lanes.  The first tier's sums then have other bits than the scalar text's, as O3's always had.
LANE_SUMS = os.environ.get("JITGRAD_QUICK_LANE_SUMS", "1") != "0"


class Refuse(Exception):
    """The loop stays scalar (the reason)."""


def _widest(t) -> int:
    return 8 if t == ki.BOOL else ki.BITS.get(t, 0) if not ki.is_ptr(t) else 0


class Plan:
    """What the analysis found: lanes, carried variables, accesses to check, variables read after the loop."""
    __slots__ = ("width", "carried", "checks", "live_out", "lanes")

    def __init__(self, width, carried, checks, live_out, lanes):
        self.width, self.carried, self.checks, self.live_out = width, carried, checks, live_out
        self.lanes = lanes      # var -> the exact operation it reduces with, lane by lane (``exact_reduction``)


class Classes:
    """The classes of a loop's values (``of``), as its body is walked: ``state`` holds each of the body's variables
    as last assigned (its class, and while planning its value); ``accesses``, while planning, the loads seen."""

    def __init__(self, ivar, carried, lanes, accesses=None):
        self.ivar, self.carried, self.lanes, self.state, self.accesses = ivar, carried, lanes, {}, accesses

    def of(self, x, memo):
        """``x``'s class (U, C, V, L), refusing what a vector loop cannot do; ``memo``: this statement's classes."""
        got = memo.get(id(x))
        if got is not None:
            return got
        op = x.op
        if op == "const":
            k = U
        elif op == "var":
            v = x.attr
            k = C if v is self.ivar else V if v in self.lanes else L if v in self.carried else \
                self.state.get(v, (U,))[0]
        elif op == "load":
            kp, kx = self.of(x.args[0], memo), self.of(x.args[1], memo)
            if kp != U or kx > C:
                raise Refuse("load not contiguous" if kp == U and kx == V else "load's address")
            k = V if kx == C else U
            if self.accesses is not None:
                self.accesses.append((False, x.args[0], x.args[1], kx, x.t, x.attr))
        elif op == "ptr":
            k = self.of(x.args[0], memo)
            if k != U:
                raise Refuse("varying pointer")
        elif op == "param":
            raise Refuse("param")
        else:
            k = U
            for a in x.args:
                ka = self.of(a, memo)
                if ka > k:
                    k = ka
            if k == C:
                ks = [self.of(a, memo) for a in x.args]
                if not (op == "bin" and x.t == ki.I64 and (x.attr == "+" and U in ks or x.attr == "-" and ks[1] == U)):
                    k = V
        memo[id(x)] = k
        return k


def plan_loop(s: ki.For, kernel_body, bits: int, once: dict, reads: dict | None = None) -> Plan:
    """The plan of innermost loop ``s`` of a kernel (``kernel_body``; ``once``: its ``assigned_once``; ``reads``: a
    memo of what its statements read, kept for the kernel's loops) for vector blocks of ``bits``, or ``Refuse``.
    The lanes: the bits over the widest of the loop's contiguous loads and stores and carried variables, as LLVM's
    loop vectoriser picks them."""
    if s.step != 1:
        raise Refuse("step")
    body = [st for st in s.body if not isinstance(st, ki.Comment)]
    in_body, assigned, carried = _assigned_vars(body), set(), set()
    for st in body:
        if not isinstance(st, (ki.Assign, ki.Store)):
            raise Refuse(type(st).__name__)
        carried.update(v for v in _reads(st) if v in in_body and v not in assigned)
        if isinstance(st, ki.Assign):
            assigned.add(st.var)
    lanes = {}
    for v in carried:
        op = exact_reduction(v, body)
        if op is None and LANE_SUMS:
            op = float_sum(v, body)
        if op is not None:
            lanes[v] = op
    carried -= set(lanes)
    cls = Classes(s.var, carried, lanes, [])
    widths = set()
    accesses = []       # (store?, key, class of the index, type, alias, (pointer, index))
    for st in body:
        memo = {}
        before = len(cls.accesses)
        if isinstance(st, ki.Assign):
            k = cls.of(st.value, memo)
            if st.var in carried or st.var in lanes:
                widths.add(_widest(st.var.t))
        else:
            kp, kx, kv = (cls.of(v, memo) for v in (st.ptr, st.idx, st.value))
            if kp != U or kx != C:
                raise Refuse("store not contiguous")
            if kv == L:
                raise Refuse("store of a carried value")
            cls.accesses.append((True, st.ptr, st.idx, kx, st.ptr.t.elem, st.alias))
        key = Keys(once, cls.state, carried)        # addresses as this statement reads them
        for store, ptr, idx, kx, t, alias in cls.accesses[before:]:
            accesses.append((store, (key(ptr), key(idx), t), kx, t, alias, (ptr, idx)))
            if kx == C:
                widths.add(_widest(t))
        if isinstance(st, ki.Assign):
            cls.state[st.var] = (L if st.var in carried else V if st.var in lanes else k, st.value)
    if not any(k[0] != U for k in cls.state.values()) and not any(a[0] for a in accesses):
        raise Refuse("nothing varies")
    checks = _pairs(accesses, in_body)
    width = max(2, min(MAX_WIDTH, bits // max(widths | {8})))
    live = _live_after(kernel_body, s, {} if reads is None else reads) & (in_body | {s.var})
    return Plan(width, carried, checks, live, lanes)


# ---------------------------------------------------------------------------------------------------- accesses
def _pairs(accesses, in_body):
    """The pairs (store, access) of a loop that need a check before it (see the module docstring)."""
    out, seen = [], set()
    for s in accesses:
        if not s[0]:
            continue
        for x in accesses:
            if x is s:
                continue
            if s[4] is not None and x[4] is not None and s[4][1] == x[4][1] and s[4][0] != x[4][0]:
                continue        # alias classes apart
            if s[1] == x[1]:
                continue        # the same element in every lane
            pair = (s[1], x[1])
            if pair in seen:
                continue
            seen.add(pair)
            if any(n.op == "var" and n.attr in in_body for node in s[5] + x[5] for n in ki.walk_values(node)):
                raise Refuse("checked address from the loop's own variables")
            out.append((s, x))
    if len(out) > MAX_CHECKS:
        raise Refuse("too many accesses to check")
    return out


class Keys:
    """A structural key per value (for addresses): variables assigned once in the kernel stand for their values,
    the loop's temporaries for their values at this point of its body (``state``)."""

    def __init__(self, once, state, carried):
        self.once, self.state, self.carried, self.memo = once, state, carried, {}

    def __call__(self, x):
        got = self.memo.get(id(x))
        if got is not None:
            return got[1]
        if x.op == "var":
            v = x.attr
            if v in self.state:
                k = ("var", id(v)) if v in self.carried else self(self.state[v][1])
            elif v in self.once:
                k = self(self.once[v])
            else:
                k = ("var", id(v))
        elif x.op == "const":
            k = ("const", x.t, x.attr)
        else:
            k = (x.op, x.t, x.attr if x.op in ("bin", "cmp", "intr", "libm") else None,
                 tuple(self(a) for a in x.args))
        self.memo[id(x)] = (x, k)
        return k


# ---------------------------------------------------------------------------------------------------- reductions
def _ints_of(x):
    """``x`` below value-preserving integer widenings (sext / zext casts)."""
    while x.op == "cast" and x.t in ki.INTS and x.args[0].t in ki.INTS and ki.BITS[x.t] >= ki.BITS[x.args[0].t]:
        x = x.args[0]
    return x


def _is(x, var) -> bool:
    return x.op == "var" and x.attr is var


def _same(a, c) -> bool:
    return a is c or (a.op == "var" and c.op == "var" and a.attr is c.attr)


def _only_update(var, body):
    """The value of ``var``'s one assignment in ``body`` when nothing else in ``body`` reads it, else None."""
    updates = [st for st in body if isinstance(st, ki.Assign) and st.var is var]
    if len(updates) != 1 or any(var in _reads(st) for st in body if st is not updates[0]):
        return None
    return updates[0].value


def exact_reduction(var, body):
    """The exact associative operation (add, or, and, xor, smax, smin, umax, umin) ``var`` accumulates with, when its
    one update in ``body`` is ``var = var OP e`` (integer widenings and a truncation back allowed) or a select of the
    larger / smaller of ``var`` and ``e``, and nothing else in ``body`` reads it: its lanes may then reduce apart and
    combine at the end, in any order, to the same bits.  None otherwise (float sums: their order is their bits)."""
    t = var.t
    if t not in ki.INTS and t != ki.BOOL:
        return None
    x = _only_update(var, body)
    if x is None:
        return None
    if x.op == "cast" and x.t == t and x.args[0].t in ki.INTS and t != ki.BOOL:
        x = x.args[0]           # a truncation back to the variable's type: low bits of +, |, &, ^ are exact
    if x.op == "bin" and x.attr in ("+", "|", "&", "^") and not (x.attr == "+" and x.t == ki.BOOL):
        a, c = (_ints_of(y) for y in x.args)
        if _is(a, var) != _is(c, var) and var not in _reads_values([c if _is(a, var) else a]):
            return {"+": "add", "|": "or", "&": "and", "^": "xor"}[x.attr]
        return None
    if x.op != "select" or x.t != t or x.args[0].op != "cmp" or x.args[0].attr not in ("<", "<=", ">", ">="):
        return None
    cond, pick, other = x.args
    a, c = (_ints_of(y) for y in cond.args)
    if _is(a, var) == _is(c, var):
        return None
    e = c if _is(a, var) else a
    if not ((_is(pick, var) and _same(_ints_of(other), e)) or (_is(other, var) and _same(_ints_of(pick), e))):
        return None
    if var in _reads_values([e]):
        return None
    greater = (cond.attr in (">", ">=")) == _is(c, var)    # the condition says e is the larger
    larger = greater == _same(_ints_of(pick), e)           # the select keeps the larger
    if t == ki.BOOL:
        return "or" if larger else "and"
    return ("u" if t in ki.UNSIGNED else "s") + ("max" if larger else "min")


def float_sum(var, body):
    """"fadd" when float ``var``'s one update in ``body`` is ``var = var + e`` (``e`` not reading it) and nothing
    else in ``body`` reads it: its lanes then sum apart, combined at the end (reassociated, as the optimised build's
    vectorised sums are), else None."""
    x = _only_update(var, body) if var.t in ki.FLOATS else None
    if x is None or x.op != "bin" or x.attr != "+" or x.t != var.t:
        return None
    a, c = x.args
    if _is(a, var) == _is(c, var) or var in _reads_values([c if _is(a, var) else a]):
        return None
    return "fadd"


def _all_ones(t):
    return "true" if t == ki.BOOL else "-1"


IDENTITY = {"fadd": lambda t: "0.0",      # (``nsz``: a sum of no element's sign of zero is not kept)
            "add": lambda t: "0" if t != ki.BOOL else "false", "or": lambda t: "0" if t != ki.BOOL else "false",
            "xor": lambda t: "0" if t != ki.BOOL else "false", "and": _all_ones, "umax": lambda t: "0",
            "umin": _all_ones, "smax": lambda t: str(-(1 << (ki.BITS[t] - 1))),
            "smin": lambda t: str((1 << (ki.BITS[t] - 1)) - 1)}


# ---------------------------------------------------------------------------------------------------- variables
def _reads(st):
    """The variables statement ``st`` reads."""
    out = []
    for top in ki.statement_values([st]):
        for x in ki.walk_values(top):
            if x.op == "var":
                out.append(x.attr)
    return out


def read_counts(body) -> dict:
    """How many times each variable is read in ``body`` (each statement's values once)."""
    counts = {}
    for st in body:
        seen = set()
        for top in ki.statement_values([st]):
            for x in ki.walk_values(top, seen):
                if x.op == "var":
                    counts[x.attr] = counts.get(x.attr, 0) + 1
    return counts


def _assigned_vars(body):
    return {st.var for st in body if isinstance(st, ki.Assign)}


def assigned_once(stmts) -> dict:
    """Variables assigned exactly once in ``stmts`` (a kernel), and never by a loop: var -> its value."""
    count, value, loops = {}, {}, set()

    def walk(ss):
        for st in ss:
            if isinstance(st, ki.Assign):
                count[st.var] = count.get(st.var, 0) + 1
                value[st.var] = st.value
            elif isinstance(st, ki.For):
                loops.add(st.var)
                walk(st.body)
            elif isinstance(st, ki.If):
                walk(st.then)
                walk(st.orelse)
    walk(stmts)
    return {v: value[v] for v, n in count.items() if n == 1 and v not in loops}


def _live_after(stmts, loop, memo) -> set:
    """Variables read anywhere in the kernel outside ``loop``'s body (may be read after it).  ``memo``: id of a
    statement -> what it reads (itself, not its blocks), for the kernel's statements (alive while it renders): each
    of its innermost loops asks, and walking every value of the kernel for each was a quarter of its rendering."""
    out = set()

    def reads(st):
        got = memo.get(id(st))
        if got is None:
            if isinstance(st, ki.For):
                got = _reads_values((st.start, st.stop))
            elif isinstance(st, ki.If):
                got = _reads_values((st.cond,))
            else:
                got = set(_reads(st))
            memo[id(st)] = got
        return got

    def walk(ss):
        for st in ss:
            out.update(reads(st))
            if st is loop:
                continue
            if isinstance(st, ki.For):
                walk(st.body)
            elif isinstance(st, ki.If):
                walk(st.then)
                walk(st.orelse)
    walk(stmts)
    return out


def _reads_values(values):
    return {x.attr for top in values for x in ki.walk_values(top) if x.op == "var"}


__all__ = ["plan_loop", "read_counts", "Plan", "Classes", "Refuse", "assigned_once", "IDENTITY", "U", "C", "V", "L", "MAX_WIDTH",
           "float_sum", "LANE_SUMS"]
