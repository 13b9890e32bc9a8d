"""Every primitive's jvp rule (``OpDef.jvp``, ir/ops/*), on the calls the per-op cases of ``test_ops.SMOKE`` make.

For each differentiable primitive, the first calls its SMOKE case binds (float64 inputs) are replayed with random
tangents: the rule's tangent against central finite differences of the op, against its vjp by the dot-product
identity <jvp(t), u> = <t, vjp(u)>, and (second order) the rule itself through gradcheck, since it is written with
jitgrad ops.  The registry test fails for an OpDef that has a vjp but no jvp.
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck
from jitgrad.ir.ops import OPS
from jitgrad.ir.ops.opdef import RuleCtx
from jitgrad.runtime import dispatch
from jitgrad.runtime.dual import apply_jvp

from test_ops import NONDIFF, SMOKE

DIFF = sorted(n for n in OPS if n not in NONDIFF)
# no derivative to compare: nextafter's rules refuse, as torch's, and so does igamma's jvp (torch has no forward
# rule for it; its vjp in x is checked by test_ops' gradcheck and test_singular); delayed_error's vjp raises on
# purpose
REFUSES = {"nextafter", "igamma"}
# read one triangle of a symmetric input, whose tangent is symmetric too (torch's rules assume the same)
SYMMETRIC_INPUT = {"eigh", "cholesky"}
# an identity whose gradient raises on purpose (a derivative that must not be differentiated): no vjp to compare
VJP_REFUSES = {"delayed_error"}


def _tangent(rng, name, a):
    t = rng.standard_normal(a.shape)
    if name in SYMMETRIC_INPUT:
        t = t + np.swapaxes(t, -1, -2)
    return jg.tensor(t, dtype=a.dtype)


@pytest.mark.parametrize("name", sorted(OPS))
def test_opdef_has_a_jvp_rule(name):
    op = OPS[name]
    if op.vjp is None:
        assert op.jvp is None, f"{name} has no vjp but a jvp"
    else:
        assert callable(op.jvp), f"{name}: a vjp but no jvp rule (OpDef(..., jvp=...), ir/ops/opdef.py)"


def _recorded_calls(name, monkeypatch, limit=2):
    calls = []
    orig = dispatch._bind

    def rec(op, args, params):
        if op.name == name and len(calls) < limit and any(
                isinstance(a, jg.Tensor) and a.dtype is jg.float64 for a in args):
            calls.append((op, tuple(a.detach() if isinstance(a, jg.Tensor) else a for a in args), dict(params)))
        return orig(op, args, params)
    monkeypatch.setattr(dispatch, "_bind", rec)
    SMOKE[name]()
    monkeypatch.setattr(dispatch, "_bind", orig)
    return calls


def _diff_slots(op, args):
    return [i for i, a in enumerate(args) if isinstance(a, jg.Tensor) and a.dtype.is_floating_point
            and i not in op.nondiff_inputs]


def _outs(op, args, params):
    with jg.no_grad():
        r = dispatch.bind(op, *args, **params)
    return r if isinstance(r, tuple) else (r,)


def _vjp(op, args, params, outs, us, slots):
    c = RuleCtx()
    c.op, c.inputs, c.outputs, c.params = op, args, outs, params
    c.shapes = tuple(tuple(a.shape) if isinstance(a, jg.Tensor) else () for a in args)
    c.dtypes = tuple(a.dtype if isinstance(a, jg.Tensor) else None for a in args)
    c.needs_grad = tuple(i in slots for i in range(len(args)))
    c.bind = lambda opname_, *a, **p: dispatch.bind(OPS[opname_], *a, **p)
    return op.vjp(c, *us)


@pytest.mark.parametrize("name", [n for n in DIFF if n not in REFUSES])
def test_jvp_rule_against_differences_and_vjp(name, monkeypatch):
    calls = _recorded_calls(name, monkeypatch)
    assert calls, f"the SMOKE case of {name} made no float64 call"
    rng = np.random.default_rng(0)
    for op, args, params in calls:
        slots = _diff_slots(op, args)
        if not slots:
            continue
        outs = _outs(op, args, params)
        ts = [_tangent(rng, name, a) if i in slots else None
              for i, a in enumerate(args)]
        jv = apply_jvp(op, args, params, outs, ts)
        eps = 1e-6

        def shifted(s):
            return _outs(op, tuple(a + s * t if t is not None else a for a, t in zip(args, ts)), params)
        hi, lo = shifted(eps), shifted(-eps)
        for k, o in enumerate(outs):
            if not o.dtype.is_floating_point:
                continue
            fd = (hi[k].numpy() - lo[k].numpy()) / (2 * eps)
            got = np.zeros(o.shape) if jv[k] is None else jv[k].detach().numpy()
            assert got.shape == tuple(o.shape), f"{name}: tangent shape {got.shape} for output {tuple(o.shape)}"
            np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5, err_msg=f"{name}: jvp vs finite differences")
        if name in VJP_REFUSES:
            continue
        # <jvp(t), u> = <t, vjp(u)>
        us = [jg.tensor(rng.standard_normal(o.shape), dtype=o.dtype) for o in outs]
        cts = _vjp(op, args, params, outs, us, slots)
        lhs = sum(float((j.detach() * u).sum()) for j, u in zip(jv, us) if j is not None)
        rhs = sum(float((c.detach() * ts[i]).sum()) for i, c in enumerate(cts) if c is not None and i in slots)
        assert abs(lhs - rhs) <= 1e-8 * (1 + abs(lhs)), f"{name}: <jvp(t), u> = {lhs} but <t, vjp(u)> = {rhs}"


@pytest.mark.parametrize("name", [n for n in DIFF if n not in REFUSES | VJP_REFUSES])
def test_jvp_rule_differentiates(name, monkeypatch):
    """The rule is written with jitgrad ops: its tangent differentiates in the primals and the tangents."""
    calls = _recorded_calls(name, monkeypatch, limit=1)
    rng = np.random.default_rng(1)
    op, args, params = calls[0]
    slots = _diff_slots(op, args)
    if not slots:
        return
    prim = [args[i] for i in slots]
    tans = [_tangent(rng, name, a) for a in prim]

    def f(*xs):
        n = len(slots)
        a = list(args)
        ts = [None] * len(args)
        for j, i in enumerate(slots):
            a[i], ts[i] = xs[j], xs[n + j]
            if name in SYMMETRIC_INPUT:
                a[i], ts[i] = (a[i] + a[i].mT) * 0.5, (ts[i] + ts[i].mT) * 0.5
        outs = dispatch.bind(op, *a, **params)
        outs = outs if isinstance(outs, tuple) else (outs,)
        res = [r for r in apply_jvp(op, a, params, outs, ts) if r is not None]
        return tuple(res) if res else outs[0] * 0.0
    assert gradcheck(f, tuple(x.clone().requires_grad_() for x in prim + tans), atol=1e-5, rtol=1e-3)


def test_nextafter_has_no_derivative_either_way():
    import jitgrad.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        d = fwAD.make_dual(jg.tensor([1.0, 2.0]), jg.tensor([1.0, 1.0]))
        with pytest.raises(NotImplementedError, match="the derivative for 'nextafter' is not implemented"):
            jg.nextafter(d, jg.tensor([0.0, 0.0]))
