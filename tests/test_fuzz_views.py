"""Random programs of views and in-place writes (hypothesis): eager jitgrad == @jg.compile (interpreter, numba)
== torch, over two calls (call 2 reads the state call 1 wrote back).

A program works on an argument ``x``, a captured state ``s`` (a parameter when it requires grad) and ``y = x * 1
+ s``; it takes views of them (slices with steps, ints, view/reshape/flatten/unsqueeze/squeeze, transpose/t/
permute, expand, narrow, select, diagonal, unbind/split/chunk, detach/.data, as_strided), chained, writes into a
view or a base in place (add_, mul_, copy_, fill_, zero_, clamp_, masked_fill_, ``+=``, index
assignment by slice / int / bool mask / index tensor; maybe under no_grad, the operand maybe another view of the
same memory), then reads the bases and views made before and after the writes, and maybe calls ``.backward()``.
Where torch raises, eager jitgrad raises the same type and compiled code raises too; where torch does not,
compiled code may only refuse by name (``REFUSAL``, collected in ``REFUSED``), never differ; ``KNOWN`` lists
torch refusals jitgrad lacks.  ``FOUND`` (the shrunk programs of bugs found here) run first.  CI runs 150
derandomized examples on the interpreter and 25 on numba; explore with ``HYPOTHESIS_PROFILE=dev
FUZZ_EXAMPLES=3000`` (``FUZZ_NUMBA=1``: numba on every example of the first test too).
"""
import contextlib
import os
import re

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import jitgrad as jg

SHAPES = [(5,), (3, 4), (4, 4), (2, 3, 4), (4, 1, 3)]
# the message of an error by which compiled code declines what eager mode does (never a silent difference)
REFUSAL = re.compile(r"jitgrad|not supported|@jg\.compile|traced", re.I)


def _at(d, k):
    return (slice(None),) * d + (k,)


VIEWS = {   # name -> (apply to a tensor of either library, params)
    "slice": lambda t, d, a, b, c: t[_at(d, slice(a, b, c))],
    "int": lambda t, d, i: t[_at(d, i)],
    "view": lambda t, shape: t.view(*shape),
    "reshape": lambda t, shape: t.reshape(*shape),
    "flatten": lambda t, a, b: t.flatten(a, b),
    "unsqueeze": lambda t, d: t.unsqueeze(d),
    "squeeze": lambda t, d: t.squeeze() if d is None else t.squeeze(d),
    "transpose": lambda t, a, b: t.transpose(a, b),
    "t": lambda t: t.t(),
    "permute": lambda t, perm: t.permute(*perm),
    "expand": lambda t, n: t.expand(n, *t.shape),
    "narrow": lambda t, d, a, n: t.narrow(d, a, n),
    "select": lambda t, d, i: t.select(d, i),
    "diagonal": lambda t, o, a, b: t.diagonal(o, a, b),
    "unbind": lambda t, d, k: t.unbind(d)[k],
    "split": lambda t, d, n, k: t.split(n, d)[k],
    "chunk": lambda t, d, n, k: t.chunk(n, d)[k],
    "detach": lambda t: t.detach(),
    "data": lambda t: t.data,
    "as_strided": lambda t, size, stride, off: t.as_strided(size, stride, off),
}


def _view_params(draw, s):
    nd = len(s)
    # (as_strided of an empty view: jitgrad's storage offset differs from torch's, known)
    names = ["unsqueeze", "squeeze", "detach", "data", "expand", "view", "reshape"] + ["as_strided"] * (0 not in s)
    if nd:
        names += ["slice", "slice", "split", "chunk", "flatten", "permute"]
    if nd and 0 not in s:
        names += ["int", "narrow", "select", "unbind"]
    if nd >= 2:
        names += ["transpose", "transpose", "diagonal"]
    if nd <= 2:
        names += ["t"]
    name = draw(st.sampled_from(names))
    d = draw(st.integers(0, nd - 1)) if nd else 0
    n = s[d] if nd else 1
    if name == "slice":
        return name, (d, draw(st.sampled_from([None, 0, 1, -2])), draw(st.sampled_from([None, -1, 3])),
                      draw(st.sampled_from([None, 1, 2, 3])))
    if name in ("int", "select"):
        return name, (d, draw(st.integers(-n, n - 1)))
    if name in ("view", "reshape"):
        cands = [(-1,), (1, -1), tuple(s) + (1,)] + ([(s[0], -1), (-1, s[-1])] if nd >= 2 else [])
        return name, (draw(st.sampled_from(cands)),)
    if name == "flatten":
        a = draw(st.integers(0, max(nd - 1, 0)))
        return name, (a, draw(st.integers(a, max(nd - 1, 0))))
    if name == "unsqueeze":
        return name, (draw(st.integers(-nd - 1, nd)),)
    if name == "squeeze":
        return name, (draw(st.sampled_from([None] + list(range(nd)))),)
    if name == "transpose":
        return name, tuple(draw(st.permutations(range(nd)))[:2])
    if name == "permute":
        return name, (tuple(draw(st.permutations(range(nd)))),)
    if name == "expand":
        return name, (draw(st.integers(1, 2)),)
    if name == "narrow":
        a = draw(st.integers(0, n - 1))
        return name, (d, a, draw(st.integers(1, n - a)))
    if name == "diagonal":
        a, b = draw(st.permutations(range(nd)))[:2]
        return name, (draw(st.integers(-1, 1)), a, b)
    if name == "unbind":
        return name, (d, draw(st.integers(0, n - 1)))
    if name in ("split", "chunk"):
        k = draw(st.integers(1, max(n, 1)))
        return name, (d, k, draw(st.sampled_from([0, -1])))
    if name == "as_strided":
        # rows never overlap (a write into overlapping elements is undefined in torch)
        return name, ((draw(st.integers(1, 3)), 2), (draw(st.integers(2, 3)), 1), draw(st.sampled_from([None, 0, 1])))
    return name, ()


INPLACE = ["add_", "mul_", "copy_", "fill_", "zero_", "clamp_", "masked_fill_", "iadd", "imul",
           "set_slice", "set_int", "set_mask", "set_mask_data", "set_index"]


def _operand(draw, names_shapes, shape):
    """How the written values are made: a number, a constant tensor scaled by ``x.mean()`` (recorded or detached),
    or another value of the program (maybe a view of the very memory written: torch refuses partial overlap)."""
    kind = draw(st.sampled_from(["num", "tensor", "tensor", "env"]))
    if kind == "num":
        return ("num", draw(st.sampled_from([-1.5, 0.5, 2.0])))
    if kind == "env":
        ok = [k for k, s in names_shapes if _bshape(s, shape)]
        if ok:
            return ("env", draw(st.sampled_from(ok)))
    sub = shape[draw(st.integers(0, len(shape))):] if shape else ()
    return ("tensor", tuple(sub), draw(st.integers(0, 99)), draw(st.sampled_from(["x", "xd", "one"])))


def _bshape(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b)) == tuple(b)
    except ValueError:
        return False


@st.composite
def programs(draw):
    shape = draw(st.sampled_from(SHAPES))
    x_rg, s_rg = draw(st.booleans()), draw(st.booleans())
    sim = {"x": torch.zeros(shape), "s": torch.zeros(shape), "y": torch.zeros(shape)}
    root = {k: k for k in sim}
    stmts = []
    for i in range(draw(st.integers(2, 7))):
        names = list(sim)
        if draw(st.integers(0, 2)) or i == 0:
            src = draw(st.sampled_from(names))
            name, p = _view_params(draw, tuple(sim[src].shape))
            dst = f"v{i}"
            try:
                sim[dst] = VIEWS[name](sim[src], *p)
            except Exception:       # torch refuses the view: the program ends here, raising
                stmts.append(("view", dst, src, name, p))
                break
            stmts.append(("view", dst, src, name, p))
            root[dst] = root[src]
        else:
            tgt = draw(st.sampled_from(names))
            s = tuple(sim[tgt].shape)
            op = draw(st.sampled_from(INPLACE))
            nd = len(s)
            if op.startswith("set_") and (not nd or 0 in s):
                op = "add_"
            d = draw(st.integers(0, nd - 1)) if nd else 0
            p = ()
            if op in ("set_slice", "set_int", "set_index"):
                n = s[d]
                if op == "set_slice":
                    p = (d, draw(st.sampled_from([None, 1])), draw(st.sampled_from([None, -1])),
                         draw(st.sampled_from([1, 2])))
                elif op == "set_int":
                    p = (d, draw(st.integers(-n, n - 1)))
                else:
                    p = (d, tuple(draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=1, max_size=3,
                                                unique=True))) if n else (0,))
            elif op in ("set_mask", "set_mask_data", "masked_fill_"):
                p = (draw(st.integers(0, 99)),)
            elif op == "clamp_":
                p = (draw(st.sampled_from([-0.5, None])), draw(st.sampled_from([0.7, None, 1.0])))
            # the shape of the written region, for the operand
            w = s
            if op in ("set_slice", "set_int", "set_index"):
                k = p[1] if op != "set_slice" else slice(*p[1:])
                w = tuple(torch.zeros(s)[_at(d, torch.tensor(k) if isinstance(k, tuple) else k)].shape)
            elif op in ("set_mask", "set_mask_data"):
                w = ()
            opd = _operand(draw, [(k, tuple(v.shape)) for k, v in sim.items()], w)
            if opd[0] == "env" and root[opd[1]] == root[tgt]:
                # an operand over the written memory: torch's result depends on its loop order (or it refuses)
                opd = ("env", opd[1], "clone")
            ng = draw(st.booleans())
            if not ng and root[tgt] != "y" and opd[0] != "num":
                # a recorded write gives the state a history that outlives the call: jitgrad's eager views of it
                # miss it (known) and torch's second call backwards through a freed graph
                opd = ("num", 0.5) if opd[0] == "env" else opd[:-1] + ("xd",)
            stmts.append(("write", tgt, op, p, ng, opd))
    reads = ["y"] + draw(st.lists(st.sampled_from(sorted(sim)), min_size=1, max_size=3))
    return dict(shape=shape, x_rg=x_rg, s_rg=s_rg, stmts=stmts, reads=reads, backward=draw(st.booleans()),
                seed=draw(st.integers(0, 2**16)))


def _const(M, shape, seed, dtype=None):
    a = np.random.default_rng(seed).uniform(-2, 2, shape)
    return M.tensor(a > 0 if dtype == "bool" else a)


def _write(M, env, x, tgt, op, p, opd):
    t = env[tgt]
    if opd[0] == "num":
        u = opd[1]
    elif opd[0] == "env":
        u = env[opd[1]].clone() if len(opd) > 2 else env[opd[1]]
    else:
        u = _const(M, opd[1], opd[2]) * {"x": x.mean(), "xd": x.detach().mean(), "one": 1.0}[opd[3]]
    if op in ("add_", "mul_", "copy_"):
        u = u if op != "copy_" or not isinstance(u, float) else M.tensor(u, dtype=M.float64)
        getattr(t, op)(u)
    elif op == "fill_":
        t.fill_(u if isinstance(u, float) else u.sum())
    elif op == "zero_":
        t.zero_()
    elif op == "clamp_":
        t.clamp_(*p)
    elif op == "masked_fill_":
        t.masked_fill_(_const(M, t.shape, p[0], "bool"), u if isinstance(u, float) else u.sum())
    elif op in ("iadd", "imul"):
        if op == "iadd":
            t += u
        else:
            t *= u
        env[tgt] = t
    else:
        idx = {"set_slice": lambda: _at(p[0], slice(*p[1:])), "set_int": lambda: _at(p[0], p[1]),
               "set_index": lambda: _at(p[0], M.tensor(list(p[1]))),
               "set_mask": lambda: _const(M, t.shape, p[0], "bool"),
               "set_mask_data": lambda: t > 0.3}[op]()
        t[idx] = u if isinstance(u, float) or op not in ("set_mask", "set_mask_data") else u.sum()


def body(prog, M, x, s):
    env = {"x": x, "s": s, "y": x * 1.0 + s}
    for st_ in prog["stmts"]:
        if st_[0] == "view":
            _, dst, src, name, p = st_
            env[dst] = VIEWS[name](env[src], *p)
        else:
            _, tgt, op, p, ng, opd = st_
            with M.no_grad() if ng else contextlib.nullcontext():
                _write(M, env, x, tgt, op, p, opd)
    outs = [env[k].clone() for k in prog["reads"]]
    if prog["backward"]:
        diff = [o for o in outs if o.requires_grad]
        if diff:
            sum((o * _const(M, tuple(o.shape), 7 + k)).sum() for k, o in enumerate(diff)).backward()
    return [o.detach() for o in outs]


def _np(t):
    return None if t is None else t.detach().numpy().copy()


def run(prog, how, calls=2):
    """``prog`` run ``how`` ("torch", "eager", "interpret", "numba"): per call, the outputs, then x, x.grad, s and
    s.grad; or ("raise", exception, the results so far)."""
    M = torch if how == "torch" else jg
    rng = np.random.default_rng(prog["seed"])
    xs = [rng.uniform(-2, 2, prog["shape"]) for _ in range(calls)]
    s = M.tensor(rng.uniform(-2, 2, prog["shape"]), requires_grad=prog["s_rg"])

    def f(x):
        return body(prog, M, x, s)
    g = f if how in ("torch", "eager") else jg.compile(f, backend=how, background=False)
    res = []
    for xa in xs:
        x = M.tensor(xa, requires_grad=prog["x_rg"])
        try:
            outs = g(x)
        except Exception as e:      # noqa: BLE001 - compared with torch's
            return ("raise", e, res)
        res.append([_np(o) for o in outs] + [_np(x), _np(x.grad), _np(s), _np(s.grad)])
    return ("ok", None, res)


REFUSED = []        # (program, message) of compiled refusals, for the exploring reader


def _same(got, want, what):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        for j, (a, b) in enumerate(zip(g, w)):
            assert (a is None) == (b is None), f"{what}: call {k} value {j}: {a} vs {b}"
            if a is not None:
                assert a.shape == b.shape, f"{what}: call {k} value {j}: shape {a.shape} vs {b.shape}"
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"{what}: call {k} value {j}")


# torch refusals jitgrad lacks (known differences, not compared): an operand that overlaps the written memory in
# part (jitgrad computes as if it were cloned first); reading an output of unbind/split/chunk after its base was
# written in place with the view requiring grad (jitgrad reads the new values)
KNOWN = ("some elements of the input tensor and the written-to tensor refer to a single memory location",
         "its base or another view of its base has been modified inplace. This view is the output of a function")


def check(prog, backends):
    want = run(prog, "torch")
    if want[0] == "raise" and any(k in str(want[1]) for k in KNOWN):
        return
    eager = run(prog, "eager")
    if want[0] == "ok" and eager[0] == "raise" and "more than one element of the written-to" in str(eager[1]):
        return      # torch's fill_/zero_/index assignment into an expanded view: jitgrad refuses them (known)
    if want[0] == "raise":
        assert eager[0] == "raise", f"torch raised {want[1]!r}, eager jitgrad did not"
        assert isinstance(eager[1], type(want[1])), f"torch raised {want[1]!r}, eager {eager[1]!r}"
    else:
        assert eager[0] == "ok", f"eager raised {eager[1]!r}"
    _same(eager[2], want[2], "eager vs torch")
    for b in backends:
        got = run(prog, b)
        if want[0] == "raise":
            assert got[0] == "raise", f"{b}: torch raised {want[1]!r}, compiled returned {got[2]}"
        elif got[0] == "raise":
            assert REFUSAL.search(str(got[1])), f"{b}: compiled raised {got[1]!r}, torch did not"
            REFUSED.append((prog, str(got[1])[:200]))
        _same(got[2], want[2][:len(got[2])], f"{b} vs torch")


N = int(os.environ.get("FUZZ_EXAMPLES", "0")) or None


def _prog(stmts, reads=("y", "s"), shape=(5,), x_rg=False, s_rg=False, backward=False):
    return dict(shape=shape, x_rg=x_rg, s_rg=s_rg, stmts=stmts, reads=list(reads), backward=backward, seed=0)


ADD = ("num", -1.5)
# the shrunk programs of bugs this generator found, run first whatever the draw
FOUND = [
    _prog([("write", "x", "add_", (), False, ADD), ("view", "v1", "x", "reshape", ((1, -1),)),
           ("write", "x", "add_", (), False, ADD)], reads=("y", "v1")),        # a reshape eager mode views
    _prog([("view", "v0", "x", "diagonal", (0, 0, 1)), ("view", "v1", "v0", "view", ((-1,),))], shape=(2, 3, 4)),
    _prog([("view", "v0", "x", "slice", (0, None, None, 2)), ("write", "v0", "add_", (), False, ("tensor", (2, 4), 0,
           "xd")), ("view", "v2", "x", "reshape", ((-1,),)), ("write", "x", "add_", (), False, ADD)],
          reads=("y", "v2"), shape=(3, 4)),                                     # strides pinned by a write
    _prog([("view", "v0", "x", "expand", (1,)), ("write", "v0", "add_", (), False, ADD)]),
    _prog([("view", "v0", "y", "unsqueeze", (0,)), ("write", "y", "add_", (), False, ("env", "s"))],
          reads=("y", "v0"), s_rg=True, backward=True),                         # a view's history
    _prog([("view", "v0", "x", "unsqueeze", (0,)), ("write", "y", "mul_", (), False, ("env", "x")),
           ("write", "v0", "add_", (), False, ADD)], s_rg=True, backward=True),  # the base's version
    _prog([("view", "v0", "y", "int", (0, 0)), ("view", "v1", "v0", "as_strided", ((1, 2), (2, 1), None)),
           ("write", "v1", "add_", (), False, ADD)], s_rg=True, backward=True),
    _prog([("view", "v0", "x", "diagonal", (1, 1, 0)), ("write", "v0", "mul_", (), False, ("tensor", (2,), 1, "x"))],
          reads=("y", "x"), shape=(3, 4)),
]


def _found(test):
    for prog in reversed(FOUND):
        test = example(prog)(test)
    return test


@settings(max_examples=N or 150)     # about 0.02 s an example
@_found
@given(programs())
def test_random_view_programs_interpreter_eager_torch(prog):
    check(prog, ["interpret", "numba"] if os.environ.get("FUZZ_NUMBA") else ["interpret"])


@settings(max_examples=N or 25)     # a new kernel costs a Numba build: fewer in CI
@_found
@given(programs())
def test_random_view_programs_numba_eager_torch(prog):
    check(prog, ["numba"])
