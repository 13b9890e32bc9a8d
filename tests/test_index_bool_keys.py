"""A Python bool in an index key, as torch 2.13 reads it: a new dim of size 1 (True) or 0 (False) that indexes no dim
of x, an index over that dim beside any index tensors; integers select first (``x[1, :, True]``: (4, 1, 5), where
NumPy's rule gives (1, 4, 5)).  Eager, compiled and compiled with symbolic sizes (``dynamic=True``) agree.  The shapes
and checksums are torch's, copied from torch 2.13 on CPU for ``x = arange(60).reshape(3, 4, 5)``, ``I = [2, 0]``."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg

# (key, torch's result shape, torch's sum of result.flatten() * (1, 2, 3, ...))
CASES = [
    ("True,", (1, 3, 4, 5), 71980),
    ("False,", (0, 3, 4, 5), 0),
    ("..., True", (3, 4, 5, 1), 71980),
    ("..., False", (3, 4, 5, 0), 0),
    ("True, :", (1, 3, 4, 5), 71980),
    ("1:3, True, 2", (2, 1, 5), 2580),
    ("True, 1", (1, 4, 5), 6860),
    ("False, 1", (0, 4, 5), 0),
    ("1, True, 2", (1, 5), 490),
    ("None, True", (1, 1, 3, 4, 5), 71980),
    ("True, None, ...", (1, 1, 3, 4, 5), 71980),
    ("True, True", (1, 3, 4, 5), 71980),
    ("True, I", (2, 4, 5), 17520),
    ("I, True", (2, 4, 5), 17520),
    (":, True, I", (3, 2, 5), 16240),
    ("True, ..., I", (2, 3, 4), 9836),
    ("True, 1, I", (2, 5), 1380),
    ("..., True, None", (3, 4, 5, 1, 1), 71980),
    ("1, 2, 3, True", (1,), 33),
    ("True, I, I", (2, 5), 880),
    ("I, True, I", (2, 5), 880),
    ("1, :, True", (4, 1, 5), 6860),
    ("1, 1:3, False", (2, 0, 5), 0),
    ("1, None, False", (1, 0, 4, 5), 0),
    ("1, ..., True", (4, 5, 1), 6860),
    ("True, :, 1", (1, 3, 5), 4270),
    ("1, :, True, I", (4, 2), 1122),
    ("I, 1, :, True", (2, 5), 1005),
    ("True, 1, None, I", (2, 1, 5), 1380),
    ("..., 2, True, I", (3, 2), 808),
    ("I, :, True", (2, 4, 5), 17520),
    ("I, None, True", (2, 1, 4, 5), 17520),
    ("-1, True, ..., I", (2, 4), 1780),
]
KEYS = [c[0] for c in CASES]


def _index(x, key, I):     # noqa: E741 (I: the cases' index tensor)
    return eval(f"x[{key}]", {"x": x, "I": I})


def _x(n=3):
    return jg.tensor(np.arange(n * 20, dtype=np.float32).reshape(n, 4, 5))


def _checksum(a):
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    return float((a * np.arange(1, a.size + 1)).sum())


@pytest.mark.parametrize("case", range(len(CASES)))
def test_eager_reads_a_bool_as_torch_does(case):
    key, shape, check = CASES[case]
    y = _index(_x(), key, jg.tensor([2, 0]))
    assert tuple(y.shape) == shape and _checksum(y.numpy()) == check


def test_eager_writes_through_a_bool_key_as_torch_does():
    # x[1, :, True] = v takes v of torch's shape (4, 1, 5)
    x = _x()
    x[1, :, True] = jg.ones(4, 1, 5) * -1.0
    assert (x.numpy()[1] == -1).all() and (x.numpy()[0] == np.arange(20).reshape(4, 5)).all()


def _all_keys(x, i):
    return tuple(_index(x, k, i) * 2.0 for k in KEYS)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_reads_a_bool_as_eager_does(dynamic):
    # one compiled function holding every case (one trace, one build); with symbolic sizes, a second size as well
    f = jg.compile(_all_keys, backend="numba", background=False, dynamic=dynamic)
    i = jg.tensor([2, 0])
    for n in ((3, 4) if dynamic else (3,)):
        x = _x(n)
        for key, got, want in zip(KEYS, f(x, i), _all_keys(x, i)):
            assert tuple(got.shape) == tuple(want.shape), key
            assert np.array_equal(got.numpy(), want.numpy()), key
    assert f.stats["traces"] == 1 and f.stats["eager_fallbacks"] == 0, f.stats["trace_reasons"]
