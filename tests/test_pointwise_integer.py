"""The integer ops of library/pointwise/integer.py against torch: bitwise and/or/xor/not, the shifts (negative and
out-of-range counts), gcd/lcm (negative operands, zeros), the operators & | ^ ~ << >> and their in-place forms,
dtypes, eager == compiled (interpreter and Numba), and torch's NotImplementedError for float operands."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from torch_agreement import raises_as_torch

torch = pytest.importorskip("torch")

A = np.array([12, -10, 7, 0, -1, 2 ** 40 + 3, -(2 ** 62), 255])
B = np.array([6, 3, -4, 0, 5, 2 ** 20 * 3, 3, 1])
SHIFT = np.array([0, 1, 3, 63, 64, 70, -1, 8])

CALLS = {
    "bitwise_and": lambda m, a, b, s: m.bitwise_and(a, b), "bitwise_or": lambda m, a, b, s: a.bitwise_or(b),
    "bitwise_xor": lambda m, a, b, s: m.bitwise_xor(a, b), "bitwise_not": lambda m, a, b, s: m.bitwise_not(a),
    "left_shift": lambda m, a, b, s: m.bitwise_left_shift(a, s), "right_shift": lambda m, a, b, s: a.bitwise_right_shift(s),
    "gcd": lambda m, a, b, s: m.gcd(a, b), "lcm": lambda m, a, b, s: m.lcm(a, b),
    "and_op": lambda m, a, b, s: a & b, "or_op": lambda m, a, b, s: a | 5, "xor_op": lambda m, a, b, s: 3 ^ a,
    "invert": lambda m, a, b, s: ~a, "lshift_op": lambda m, a, b, s: a << s, "rshift_op": lambda m, a, b, s: a >> 2,
    "rlshift_op": lambda m, a, b, s: 1 << (s % 8),
}


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_integer_ops_match_torch(name, dtype):
    if dtype == "bool":
        a, b, s = A % 2 == 1, B % 3 == 0, SHIFT % 2 == 0
    elif dtype == "int64":
        a, b, s = A, B, SHIFT
    else:
        lim = 100 if dtype == "uint8" else 2 ** 20
        a, b, s = np.abs(A) % lim, np.abs(B) % lim + 1, SHIFT % (8 if dtype == "uint8" else 40)
    j = [jg.tensor(v).to(getattr(jg, dtype)) for v in (a, b, s)]
    t = [torch.tensor(v).to(getattr(torch, dtype)) for v in (a, b, s)]
    try:
        want = CALLS[name](torch, *t)
    except Exception:
        raises_as_torch(lambda: CALLS[name](jg, *j), lambda: CALLS[name](torch, *t))
        return
    for f in (lambda *x: CALLS[name](jg, *x), jg.compile(lambda *x: CALLS[name](jg, *x), backend="interpret")):
        got = f(*j)
        assert got.dtype.name == str(want.dtype).split(".")[1], name
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_numba_compiled_integer_program_matches_torch():
    def prog(m, a, b, s):
        return ((a & b) + (a | b) * 3 - (a ^ b) + (~a) + (a << s) - (a >> (s % 8)) + m.gcd(a, b) + m.lcm(b, s + 1),
                m.bitwise_xor(a.to(m.int32), b.to(m.int32)))
    f = jg.compile(lambda *x: prog(jg, *x))
    for got, want in zip(f(*map(jg.tensor, (A, B, SHIFT))), prog(torch, *map(torch.tensor, (A, B, SHIFT)))):
        assert got.dtype.name == str(want.dtype).split(".")[1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_float_operands_raise_as_torch():
    f, i = np.array([1.5, 2.0]), np.array([1, 2])
    for call in (lambda m: m.bitwise_and(m.tensor(f), m.tensor(f)), lambda m: m.tensor(f) & m.tensor(f),
                 lambda m: m.tensor(i) | m.tensor(f), lambda m: ~m.tensor(f), lambda m: m.bitwise_not(m.tensor(f)),
                 lambda m: m.tensor(f) << 1, lambda m: m.tensor(f) >> m.tensor(i),
                 lambda m: m.gcd(m.tensor(f), m.tensor(f)), lambda m: m.lcm(m.tensor(i), m.tensor(f)),
                 lambda m: m.gcd(m.tensor(i), 3), lambda m: m.tensor(f) ^ m.tensor(f),
                 lambda m: m.lcm(m.tensor([True]), m.tensor([True])), lambda m: m.tensor(i) & 1.5):
        raises_as_torch(lambda: call(jg), lambda: call(torch))


def test_inplace_forms_match_torch():
    for op in ("__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "bitwise_and_", "bitwise_or_",
               "bitwise_xor_", "bitwise_left_shift_", "bitwise_right_shift_", "gcd_", "lcm_"):
        a, t = jg.tensor(A), torch.tensor(A)
        other = np.abs(B) % 7
        ra = getattr(a, op)(jg.tensor(other))
        getattr(t, op)(torch.tensor(other))
        assert ra is a
        np.testing.assert_array_equal(a.numpy(), t.numpy(), err_msg=op)
    a, t = jg.tensor(A), torch.tensor(A)
    a.bitwise_not_(), t.bitwise_not_()
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    m = jg.tensor([True, False])
    m &= jg.tensor([True, True])
    m |= False
    assert m.tolist() == [True, False]


def test_integer_ops_record_no_graph_and_bool_logic_stays_logical():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    r = (x > 1) & (x < 3)
    assert r.dtype is jg.bool and r.grad_fn is None
    assert jg.gcd(jg.tensor([4]), jg.tensor([6])).grad_fn is None
