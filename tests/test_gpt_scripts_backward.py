"""The GPT scripts' and makemore notebooks' training iterations of ``benchmarks/gpt_scripts.py`` (nanoGPT, minGPT,
the lecture's gpt.py, makemore's bigram and MLPs, written in their scripts' idioms): their first losses agree with
torch's given the same weights and batches, and their eager backward replays the ops' vjp rules on arrays (issue 28,
``runtime/backward/pullback_plans.py``), counted: no op is bound in the backward, split's ``cat`` included, and only the first
step's backward traces plans."""
import collections
import os
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

import jitgrad as jg  # noqa: E402
from jitgrad.runtime import dispatch
from jitgrad.runtime.backward import engine, pullback_plans  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import gpt_scripts as G  # noqa: E402

sys.path.pop(0)

# workload -> the ops its backward may still bind, at most how many times
ALLOWED = {"nanogpt": {}, "mingpt": {}, "gpt.py": {}, "makemore-bigram": {}, "makemore-mlp": {},
           "makemore-mlp-bn": {}}


@pytest.mark.parametrize("name", list(G.WORKLOADS))
def test_first_losses_agree_with_torch(name):
    losses = G.check(name, jg, torch, steps=2, small=True)
    assert len(losses) == 2


@pytest.mark.parametrize("name", list(G.WORKLOADS))
def test_the_backward_binds_almost_nothing(name, monkeypatch):
    jstep, _, jdata, _ = G._pair(name, jg, torch, dropout=True, small=True)
    pullback_plans._PLANS.clear()
    traces = pullback_plans.COUNTS["traces"]
    jstep(*jdata[0])
    first = pullback_plans.COUNTS["traces"] - traces
    assert first > 0        # (the rules' plans, traced by the first backward)
    binds = collections.Counter()
    in_backward = [False]
    real_bind, real_run = dispatch._bind, engine.run

    me = threading.get_ident()

    def spy(op, args, params):
        # (this thread's binds: an eager kernel's build thread may trace its op's decomposition meanwhile)
        if in_backward[0] and threading.get_ident() == me:
            binds[op.name] += 1
        return real_bind(op, args, params)

    def run(*a, **k):
        in_backward[0] = True
        try:
            return real_run(*a, **k)
        finally:
            in_backward[0] = False
    monkeypatch.setattr(dispatch, "_bind", spy)
    monkeypatch.setattr(engine, "run", run)
    jstep(*jdata[1])
    monkeypatch.setattr(dispatch, "_bind", real_bind)
    monkeypatch.setattr(engine, "run", real_run)
    assert pullback_plans.COUNTS["traces"] == traces + first     # the second step traces none
    allowed = ALLOWED[name]
    assert all(n <= allowed.get(op, 0) for op, n in binds.items()), dict(binds)
