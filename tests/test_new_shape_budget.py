"""An eager step at a sequence length not seen before, counted against the same step at a length seen before
(issues 28 and 30: variable-length data and notebooks meet a new shape at most calls).

Issue 30's LM (``benchmarks/variable_length.py``: embedding 64x32, linear 32->64, cross-entropy, Adam; batch 8) is
warmed at ten lengths, then each of five new lengths is stepped once (new) and again (repeated).  What a new shape
still costs: the forward ops' signature entries (``dispatch._RULES``: the shape rule, the impl's choice) and the
pullback plans of the new signatures, each finished from its form's trace at the new sizes
(``runtime/backward/pullback_plans.py``); no rule is traced.  Counted with ``sys.setprofile`` (Python-level calls
and calls into C), never timed.

Figures (2026-11-30, eager kernels built synchronously, ``sys.setprofile`` calls of a new-length step / the same
step repeated): the LM 3,016 / 672 (4.5x: a matmul rule traced per length, the form's check having taken two GEMM
functions made per signature for two calls) -> 1,745 / 672 (2.6x); nanoGPT-small (2 blocks of width 64, batch 8)
15,869 / 7,527 -> 13,293 / 7,407.
"""

import numpy as np

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.runtime import dispatch
from jitgrad.runtime.backward import pullback_plans
from test_eager_overhead import _count
from test_symbolic_shapes import _lm_step

V, C, B = 64, 32, 8


def _batch(t, seed):
    rng = np.random.default_rng(seed)
    return jg.tensor(rng.integers(0, V, (B, t))), jg.tensor(rng.integers(0, V, (B, t)))


def test_a_new_length_costs_at_most_three_repeated_steps_and_traces_no_rule(sync):
    pullback_plans._PLANS.clear()
    step = _lm_step(V, C)
    for t in range(11, 21):         # (no length equal to the batch or a width: one form)
        step(*_batch(t, t))
    for t in range(21, 26):
        batch = _batch(t, t)
        traces, rules = pullback_plans.COUNTS["traces"], len(dispatch._RULES)
        new = sum(_count(lambda: step(*batch)))
        assert pullback_plans.COUNTS["traces"] == traces            # the rules' traces of the first length serve
        assert len(dispatch._RULES) - rules <= 8, len(dispatch._RULES) - rules     # the forward's new signatures
        repeated = sum(_count(lambda: step(*batch)))
        assert new <= 3 * repeated, (t, new, repeated)


def test_gradients_over_many_lengths_are_a_fresh_process_bits(sync):
    """The LM's gradients at twenty lengths, each length's plans finished from its form's trace, against the same
    length stepped first in a fresh cache (the rules traced on that shape itself) and against NumPy's own
    float64 gradient to float32 accuracy."""
    jg.manual_seed(0)
    emb, lin = jg.nn.Embedding(V, C), jg.nn.Linear(C, V)
    params = [emb.weight, lin.weight, lin.bias]

    def grads(t):
        idx, tgt = _batch(t, 100 + t)
        b, n = idx.shape
        loss = F.cross_entropy(lin(emb(idx)).view(b * n, V), tgt.view(b * n))
        return [g.numpy().copy() for g in jg.autograd.grad(loss, params)], idx.numpy(), tgt.numpy()
    pullback_plans._PLANS.clear()
    lengths = list(range(9, 29))
    swept = {t: grads(t)[0] for t in lengths}
    for t in lengths[::3]:
        pullback_plans._PLANS.clear()
        dispatch._RULES.clear()
        fresh, idx, tgt = grads(t)
        for a, b in zip(swept[t], fresh):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), t
        # NumPy in float64: the same loss's gradients
        w, lw, lb = (p.detach().numpy().astype(np.float64) for p in params)
        h = w[idx.reshape(-1)]
        z = h @ lw.T + lb
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(p)), tgt.reshape(-1)] -= 1
        p /= len(p)
        gw = np.zeros_like(w)
        np.add.at(gw, idx.reshape(-1), p @ lw)
        for got, want in zip(fresh, (gw, p.T @ h, p.sum(0))):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)
