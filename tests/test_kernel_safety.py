"""Compiled code that cannot corrupt memory or compute what eager mode and torch do not (issue 19, items 1 and
3, numeric parts): bounds-checked gathers and scatters, and torch's integer and float specials in the loops.

An out-of-range index raises IndexError after the step, naming the op, the shapes and the user's line, and no
parameter or gradient is updated.  Cases that used to crash run in a child process."""
import os
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.nn.functional as F

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def test_gather_out_of_range_raises_naming_op_shapes_and_line():
    W = jg.tensor(np.arange(10.0))
    f = jg.compile(lambda i: W[i] * 2, backend="numba")
    np.testing.assert_array_equal(f(jg.tensor([1, -1])).numpy(), [2.0, 18.0])
    for bad in (12, -11):
        with pytest.raises(IndexError, match=rf"getitem: index {bad} is out of bounds for dimension 0 with size 10 "
                                             r"\(indexing of a tensor of shape \[10\].*\n  at .*test_kernel_safety"):
            f(jg.tensor([0, bad]))


def test_huge_index_raises_instead_of_crashing():
    code = ("import jitgrad as jg\n"
            "W = jg.randn(10)\n"
            "f = jg.compile(lambda i: W[i] * 2, backend='numba')\n"
            "try:\n    f(jg.tensor([10 ** 11]))\nexcept IndexError as e:\n    print('IndexError', e)\n")
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "IndexError getitem: index 100000000000 is out of bounds" in r.stdout


def test_scatter_out_of_range_raises():
    def put(y, i):
        y = y.clone()
        y[i] = 7.0
        return y
    f = jg.compile(put, backend="numba")
    np.testing.assert_array_equal(f(jg.zeros(5), jg.tensor([1, -1])).numpy(), [0, 7, 0, 0, 7])
    with pytest.raises(IndexError, match=r"index_put: index 5 is out of bounds for dimension 0 with size 5.*\n"
                                         r"  at .*: y\[i\] = 7.0"):
        f(jg.zeros(5), jg.tensor([5]))


def _sgd_step(model, loss_fn):
    opt = jg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @jg.compile(backend="numba")
    def step(*args):
        opt.zero_grad()
        loss = loss_fn(*args)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, opt


def _state(model, opt):
    return [p.detach().numpy().copy() for p in model.parameters()] + [
        s["momentum_buffer"].numpy().copy() for s in opt.state.values() if s.get("momentum_buffer") is not None]


def test_embedding_step_with_an_out_of_range_id_raises_and_updates_nothing():
    emb = nn.Embedding(4, 3)
    step, opt = _sgd_step(emb, lambda ids: emb(ids).sum())
    step(jg.tensor([0, 1]))
    step(jg.tensor([2, 3]))
    before = _state(emb, opt)
    with pytest.raises(IndexError, match="index out of range in self"):       # torch's embedding error
        step(jg.tensor([0, 7]))
    for a, b in zip(before, _state(emb, opt)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(IndexError):          # eager raises too
        emb(jg.tensor([0, 7]))


def test_cross_entropy_with_an_out_of_range_target_raises_and_updates_nothing():
    lin = nn.Linear(4, 3)
    x = jg.randn(2, 4)
    step, opt = _sgd_step(lin, lambda x, t: F.cross_entropy(lin(x), t))
    step(x, jg.tensor([0, 2]))
    step(x, jg.tensor([1, 2]))
    before = _state(lin, opt)
    with pytest.raises(IndexError, match="out of bounds"):
        step(x, jg.tensor([0, 10]))
    for a, b in zip(before, _state(lin, opt)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(IndexError):
        F.cross_entropy(lin(x), jg.tensor([0, 10]))


def test_integer_pow_wraps_as_torch():
    a, b = [3, 2, -1, 1, 0, 5, 7], [39, -1, -3, -2, -1, 0, 30]
    f = jg.compile(lambda a, b: a ** b, backend="numba")
    for d, td in ((np.int64, torch.int64), (np.int32, torch.int32)):
        got = f(jg.tensor(np.array(a, d)), jg.tensor(np.array(b, d))).numpy()
        want = (torch.tensor(a, dtype=td) ** torch.tensor(b, dtype=td)).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["//", "%"])
def test_integer_division_by_zero_raises_as_torch(op):
    fn = eval(f"lambda a, b: a {op} b")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(torch.tensor([3, 4]), torch.tensor([1, 0]))
    f = jg.compile(fn, backend="numba")
    np.testing.assert_array_equal(f(jg.tensor([7, -7]), jg.tensor([2, 2])).numpy(), fn(np.array([7, -7]), 2))
    with pytest.raises(RuntimeError, match=r"(floordiv|mod): ZeroDivisionError: integer division or modulo by zero"):
        f(jg.tensor([3, 4]), jg.tensor([1, 0]))


def test_integer_division_by_zero_leaves_state_unchanged():
    acc = jg.tensor([10, 20])

    @jg.compile(backend="numba")
    def step(d):
        q = acc // d
        acc.add_(q)
        return q
    step(jg.tensor([1, 2]))
    before = acc.numpy().copy()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        step(jg.tensor([1, 0]))
    np.testing.assert_array_equal(acc.numpy(), before)


def test_float_specials_as_torch():
    x = np.array([0.0, np.inf, -0.0, 4.0, -np.inf, -1.0, np.nan], np.float32)
    r = jg.compile(lambda a: a.rsqrt(), backend="numba")(jg.tensor(x)).numpy()
    np.testing.assert_array_equal(r, torch.rsqrt(torch.tensor(x)).numpy())
    p = jg.compile(lambda a: a ** 0.5, backend="numba")(jg.tensor(x)).numpy()
    np.testing.assert_array_equal(p, (torch.tensor(x) ** 0.5).numpy())
    t = jg.compile(lambda a, b: a ** b, backend="numba")(jg.tensor(x), jg.tensor(np.full_like(x, 0.5))).numpy()
    np.testing.assert_array_equal(t, (torch.tensor(x) ** torch.tensor(np.full_like(x, 0.5))).numpy())


def test_uint8_arithmetic_as_torch():
    a, b = np.array([3, 200, 255], np.uint8), np.array([100, 2, 1], np.uint8)
    f = jg.compile(lambda a, b: a * b + a, backend="numba")
    got = f(jg.tensor(a), jg.tensor(b))
    assert got.dtype == jg.uint8
    np.testing.assert_array_equal(got.numpy(), (torch.tensor(a) * torch.tensor(b) + torch.tensor(a)).numpy())
