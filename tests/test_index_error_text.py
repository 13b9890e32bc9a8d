"""An index out of range says what torch 2.13 says, eagerly and compiled, with the user's line: an integer is named
by its position in the key (``x[..., 7]``: dimension 1), an index tensor by its number among the key's tensors
(``x[:, idx]``: dimension 0); with several bad, the first integer, else the first element of the broadcast index
(its tensors in order).  The expected texts are torch's, copied from torch 2.13 on CPU."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg

X = jg.tensor(np.arange(60, dtype=np.float32).reshape(3, 4, 5))


def _i(v):
    return jg.tensor(np.array(v, dtype=np.int64))


# (key builder, torch 2.13's message)
CASES = [
    (lambda: (slice(None), 7), "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda: 7, "index 7 is out of bounds for dimension 0 with size 3"),
    (lambda: (Ellipsis, 7), "index 7 is out of bounds for dimension 1 with size 5"),
    (lambda: (1, 9), "index 9 is out of bounds for dimension 1 with size 4"),
    (lambda: (9, 1), "index 9 is out of bounds for dimension 0 with size 3"),
    (lambda: (slice(None), -9), "index -9 is out of bounds for dimension 1 with size 4"),
    (lambda: (None, 7), "index 7 is out of bounds for dimension 1 with size 3"),
    (lambda: (slice(None), None, 7), "index 7 is out of bounds for dimension 2 with size 4"),
    (lambda: (Ellipsis, 1, 7), "index 7 is out of bounds for dimension 2 with size 5"),
    (lambda: (1, 2, 9), "index 9 is out of bounds for dimension 2 with size 5"),
    (lambda: (slice(None), _i(7)), "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda: (Ellipsis, _i(7)), "index 7 is out of bounds for dimension 1 with size 5"),
    (lambda: (slice(None), _i([1, 7])), "index 7 is out of bounds for dimension 0 with size 4"),
    (lambda: (Ellipsis, _i([1, 7])), "index 7 is out of bounds for dimension 0 with size 5"),
    (lambda: (_i([0, 1]), _i([1, 7])), "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda: (_i([0, 1]), slice(None), _i([1, 7])), "index 7 is out of bounds for dimension 1 with size 5"),
    (lambda: (None, slice(None), _i([1, 7])), "index 7 is out of bounds for dimension 0 with size 4"),
    (lambda: (_i([0, 7]), _i([9, 1])), "index 9 is out of bounds for dimension 1 with size 4"),
    (lambda: (_i([[0, 7]]), _i([[9], [1]])), "index 9 is out of bounds for dimension 1 with size 4"),
    (lambda: (slice(None), _i([1, -7])), "index -7 is out of bounds for dimension 0 with size 4"),
    (lambda: (1, _i([1, 7])), "index 7 is out of bounds for dimension 0 with size 4"),
    (lambda: (_i([0, 7]), 9), "index 9 is out of bounds for dimension 1 with size 4"),
    (lambda: (slice(None), slice(None), slice(None), 1), "too many indices for tensor of dimension 3"),
]


def _first_line(fn, *args):
    with pytest.raises(IndexError) as e:
        fn(*args)
    return str(e.value)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_eager_getitem_says_torchs_words(case):
    key, want = CASES[case]
    msg = _first_line(lambda: X[key()])
    assert msg.startswith(f"getitem: {want} ("), msg
    assert "test_index_error_text.py" in msg        # the user's line


@pytest.mark.parametrize("case", [0, 2, 6, 12, 13, 14, 15, 17, 18, 19])
def test_compiled_getitem_says_what_eager_says(case):
    key, want = CASES[case]
    k = key()
    ks = k if type(k) is tuple else (k,)
    tensors = [v for v in ks if isinstance(v, jg.Tensor)]

    def f(x, *ts):
        it = iter(ts)
        return x[tuple(next(it) if isinstance(v, jg.Tensor) else v for v in ks)] * 2.0
    g = jg.compile(f, backend="numba", background=False)
    msg = _first_line(g, X, *tensors)
    assert msg.startswith(f"getitem: {want} ("), msg
    assert "test_index_error_text.py" in msg


def test_index_put_says_torchs_words_eager_and_compiled():
    """``x.index_put_((i, j), v)`` with both indices bad: torch's first element's second index, dimension 1."""
    def f(x, i, j):
        return x.index_put((i, j), jg.ones(2, 5), accumulate=True)
    args = (X, _i([0, 7]), _i([9, 1]))
    want = "index_put: index 9 is out of bounds for dimension 1 with size 4 ("
    assert _first_line(f, *args).startswith(want)
    assert _first_line(jg.compile(f, backend="numba", background=False), *args).startswith(want)


def test_index_put_rows_says_torchs_words():
    """The eager row path of ``x.index_put_((i,), v, accumulate=True)`` (NumPy's take) names torch's dimension."""
    msg = _first_line(lambda: X.index_put((_i([0, 7]),), jg.ones(2, 4, 5), accumulate=True))
    assert msg.startswith("index_put: index 7 is out of bounds for dimension 0 with size 3 ("), msg


def _m(v):
    return jg.tensor(np.array(v, dtype=bool))


M2 = np.ones((3, 4), bool)
M2[0, 1] = False
# keys whose integers torch applies before a mask or a bool (mutation.ints_before_tensors splits them): an integer is
# still named by its position in the key, a mask of n dims and a bool being one position each; torch 2.13's texts
SPLIT_CASES = [
    (lambda: (_m(M2), 7), "index 7 is out of bounds for dimension 1 with size 5"),
    (lambda: (_m(M2), -6), "index -6 is out of bounds for dimension 1 with size 5"),
    (lambda: (_m([True, False, True]), 7), "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda: (7, _m([True, True, False, True])), "index 7 is out of bounds for dimension 0 with size 3"),
    (lambda: (Ellipsis, _m(M2), 7), "index 7 is out of bounds for dimension 2 with size 5"),
    (lambda: (_m(M2), None, 7), "index 7 is out of bounds for dimension 2 with size 5"),
    (lambda: (None, _m(M2), 9), "index 9 is out of bounds for dimension 2 with size 5"),
    (lambda: (True, _m(M2), 7), "index 7 is out of bounds for dimension 2 with size 5"),
    (lambda: (_m(M2), True, 7), "index 7 is out of bounds for dimension 2 with size 5"),
    (lambda: (_i([0, 2]), True, 7), "index 7 is out of bounds for dimension 2 with size 4"),
    (lambda: (True, True, 9), "index 9 is out of bounds for dimension 2 with size 3"),
    (lambda: (True, 3, 9), "index 3 is out of bounds for dimension 1 with size 3"),
    (lambda: (Ellipsis, True, 9), "index 9 is out of bounds for dimension 2 with size 5"),
    (lambda: (1, slice(None), True, 9), "index 9 is out of bounds for dimension 3 with size 5"),
]


@pytest.mark.parametrize("case", range(len(SPLIT_CASES)))
def test_integers_beside_masks_and_bools_are_named_by_their_place_in_the_key(case):
    key, want = SPLIT_CASES[case]
    k = key()
    tensors = [v for v in k if isinstance(v, jg.Tensor)]

    def f(x, *ts):
        it = iter(ts)
        return x[tuple(next(it) if isinstance(v, jg.Tensor) else v for v in k)] * 2.0

    def write(x, *ts):
        it = iter(ts)
        x.clone()[tuple(next(it) if isinstance(v, jg.Tensor) else v for v in k)] = 1.0
    for g in (f, jg.compile(f, backend="numba", background=False), write):
        msg = _first_line(g, X, *tensors)
        assert msg.startswith(f"getitem: {want} ("), msg
        assert "test_index_error_text.py" in msg


# a bad 0-d index tensor (z) with a bad n-d one (n: bad at its first element); torch 2.13's texts.  A key selects by
# its 0-d tensors first, as by integers (mutation.ints_before_tensors); index_put_ takes every index element by
# element (the first element's tensors in order), as the compiled loops do
Z, N, NG = 9, [7, 0], [0, 1]
ZERO_D_CASES = [
    ("get", (N, Z, NG), "index 9 is out of bounds for dimension 1 with size 4"),
    ("get", (N, NG, Z), "index 9 is out of bounds for dimension 2 with size 5"),
    ("get", (Z, None, N), "index 9 is out of bounds for dimension 0 with size 3"),
    ("get", (N, slice(None), Z), "index 9 is out of bounds for dimension 2 with size 5"),
    ("get", (slice(None), N, Z), "index 9 is out of bounds for dimension 2 with size 5"),
    ("set", (N, Z, NG), "index 9 is out of bounds for dimension 1 with size 4"),
    ("set", (Z, slice(None), N), "index 9 is out of bounds for dimension 0 with size 3"),
    ("set", (NG, 1, [0, 9]), "index 9 is out of bounds for dimension 1 with size 5"),
    ("put", (N, Z, NG), "index 7 is out of bounds for dimension 0 with size 3"),
    ("put", (NG, Z, [0, 9]), "index 9 is out of bounds for dimension 1 with size 4"),
    ("put", (NG, [0, 1], [0, 9]), "index 9 is out of bounds for dimension 2 with size 5"),
    ("put+", (N, NG, Z), "index 7 is out of bounds for dimension 0 with size 3"),
]


@pytest.mark.parametrize("case", range(len(ZERO_D_CASES)))
def test_a_bad_0d_index_beside_a_bad_nd_one_is_reported_as_torch_does(case):
    form, key, want = ZERO_D_CASES[case]
    tensors = [_i(v) for v in key if isinstance(v, list) or v is Z]

    def f(x, *ts):
        it = iter(ts)
        k = tuple(next(it) if isinstance(v, list) or v is Z else v for v in key)
        if form == "get":
            return x[k] * 2.0
        if form == "set":
            y = x.clone()
            y[k] = 1.0
            return y
        return x.index_put(k, jg.tensor(1.0), accumulate=form == "put+")
    ops = ("getitem",) if form == "get" else ("getitem", "index_put") if form == "set" else ("index_put",)
    for g in (f, jg.compile(f, backend="numba", background=False)):     # (a write selects by getitem first)
        msg = _first_line(g, X, *tensors)
        assert msg.split(": ", 1)[0] in ops and msg.split(": ", 1)[1].startswith(f"{want} ("), msg
        assert "test_index_error_text.py" in msg


def test_a_key_selects_by_its_0d_index_tensors_first():
    # x[z, :, n]: torch selects by z (a view of shape (4, 5)), then indexes by n: (4, 2), where NumPy's rule puts the
    # broadcast index first, (2, 4); writes take the value in torch's layout
    z, n = _i(1), _i([0, 2])
    want = X.numpy()[1][:, [0, 2]]
    for g in (lambda x, z, n: x[z, :, n] * 1.0, jg.compile(lambda x, z, n: x[z, :, n] * 1.0, background=False)):
        assert np.array_equal(g(X, z, n).numpy(), want)

    def write(x, z, n, v):
        y = x.clone()
        y[z, :, n] = v
        return y
    v = jg.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    expect = X.numpy().copy()
    expect[1][:, [0, 2]] = v.numpy()
    for g in (write, jg.compile(write, background=False)):
        assert np.array_equal(g(X, z, n, v).numpy(), expect)


@pytest.mark.parametrize("where", ["getitem", "setitem", "index_put_", "compiled"])
def test_index_tensors_that_do_not_broadcast_say_torchs_words(where):
    """Index tensors whose shapes do not broadcast: torch 2.13's IndexError text (copied from it), not NumPy's
    ("indexing arrays ... (3,) (2,)", or a ValueError from a write), with the op's name and the user's line."""
    x = jg.zeros(4, 5)
    i, j = _i([0, 1, 2]), _i([0, 1])
    run = {"getitem": lambda: x[i, j],
           "setitem": lambda: x.__setitem__((i, j), 1.0),
           "index_put_": lambda: x.index_put_((i, j), jg.tensor(1.0)),
           "compiled": lambda: jg.compile(lambda a, p, q: a[p, q] * 2)(x, i, j)}[where]
    with pytest.raises(IndexError) as info:
        run()
    text = str(info.value)
    assert "shape mismatch: indexing tensors could not be broadcast together with shapes [3], [2]" in text, text
    assert "test_index_error_text.py" in text and "indexing arrays" not in text, text
