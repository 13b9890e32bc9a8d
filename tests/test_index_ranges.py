"""Negative and out-of-range indices in every index-taking op, as torch (issue 31 item 6): eager mode, the
compiled step on the interpreter and in generated code raise torch's exception with torch's text (compiled:
through the kernels' bounds checks, ``ir/ops/index.py``'s ``oob`` param), and where torch wraps a negative index
(take, put, index_fill, indexing) so does jitgrad.  torch is the oracle."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as JF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

W = np.arange(10.0).reshape(5, 2)

# name -> fn(lib, F, idx): idx is the index (list of ints) the op takes; each op reads a (5, 2) table or 5 classes
CASES = {
    "embedding": lambda L, F, i: F.embedding(i, L.tensor(W)),
    "Embedding": lambda L, F, i: _module(L)(i),
    "embedding_bag": lambda L, F, i: F.embedding_bag(i, L.tensor(W), L.tensor([0])),
    "one_hot": lambda L, F, i: F.one_hot(i, 5),
    "nll_loss": lambda L, F, i: F.nll_loss(L.tensor(np.tile(W.T, (1, 1))[:, :5] * 0 + 1.0), i[:2]),
    "cross_entropy": lambda L, F, i: F.cross_entropy(L.tensor(np.ones((2, 5))), i[:2]),
    "index_select": lambda L, F, i: L.index_select(L.tensor(W), 0, i),
    "gather": lambda L, F, i: L.gather(L.tensor(W), 0, i.reshape(-1, 1)),
    "scatter": lambda L, F, i: L.zeros(5, 2, dtype=L.float64).scatter(0, i.reshape(-1, 1), L.ones(2, 1,
                                                                                                   dtype=L.float64)),
    "scatter_add": lambda L, F, i: L.zeros(5, 2, dtype=L.float64).scatter_add(0, i.reshape(-1, 1),
                                                                               L.ones(2, 1, dtype=L.float64)),
    "take": lambda L, F, i: L.take(L.tensor(W), i),
    "index_add": lambda L, F, i: L.zeros(5, 2, dtype=L.float64).index_add(0, i, L.ones(2, 2, dtype=L.float64)),
    "index_copy": lambda L, F, i: L.zeros(5, 2, dtype=L.float64).index_copy(0, i[:1], L.ones(1, 2,
                                                                                              dtype=L.float64)),
    "index_fill": lambda L, F, i: L.zeros(5, 2, dtype=L.float64).index_fill(0, i, 1.0),
}
# two indices per case: the bad one first, then a valid one
INDICES = {"negative": [-1, 0], "too large": [5, 0], "very negative": [-6, 0], "valid": [3, 0]}


def _module(L):
    m = L.nn.Embedding(5, 2)
    with L.no_grad():
        m.weight.copy_(L.tensor(W, dtype=L.float32))
    return m


def _outcome(fn):
    try:
        r = fn()
    except (IndexError, RuntimeError) as e:
        return type(e), str(e).split("\n")[0]
    return None, np.asarray(r.detach().numpy(), np.float64)


@pytest.mark.parametrize("which", list(INDICES))
@pytest.mark.parametrize("case", list(CASES))
def test_index_ranges_like_torch_eager_and_compiled(case, which):
    fn = CASES[case]
    idx = INDICES[which]
    want = _outcome(lambda: fn(torch, TF, torch.tensor(idx)))
    if case == "index_copy" and want[0] is None and which != "valid":
        pytest.skip("torch's index_copy of one index")
    runs = {"eager": lambda: fn(jg, JF, jg.tensor(idx))}
    for backend in ("interpret", "numba"):
        step = jg.compile(lambda i: fn(jg, JF, i), backend=backend, background=False)
        runs[backend] = (lambda step=step: step(jg.tensor(idx)))
    for mode, run in runs.items():
        got = _outcome(run)
        if want[0] is None:
            assert got[0] is None, (mode, got, want)
            np.testing.assert_allclose(got[1], want[1], err_msg=mode)
        else:
            # torch's exception type and its message (ours may add the op's name and the user's line)
            assert got[0] is want[0] and want[1].rstrip(".") in got[1], (mode, got, want)
