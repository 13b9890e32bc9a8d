"""Compile work linear in the graph, counted (never timed): a long elementwise chain is cut into loops of at
most ``MAX_GROUP_EQNS`` eqns whose texts repeat, so the number of distinct kernels (Numba compilations) does
not grow with the chain's length, and the steps grow linearly with it."""
import numpy as np

import jitgrad as jg
from jitgrad.codegen.layout import Program
from jitgrad.ir.passes.fuse import MAX_GROUP_EQNS, plan as fusion_plan


def _chain_graph(n):
    x = jg.tensor(np.linspace(-1, 1, 64, dtype=np.float32), requires_grad=True)

    def chain(x):
        y = x
        for i in range(n):
            y = y.tanh() if i % 2 else y * 1.0001
        y.sum().backward()
        return y.detach()

    f = jg.compile(chain, backend="interpret")
    f(x)
    (entries,) = f._cache.values()
    return entries[0].graph


def test_chain_kernels_do_not_grow_with_length():
    counts = {}
    for n in (200, 800):
        g = _chain_graph(n)
        p = fusion_plan(g)
        assert all(len(grp.eqns) <= MAX_GROUP_EQNS for grp in p.groups)
        prog = Program(g, p)
        counts[n] = (len(prog.kernels), len(prog.steps), len(g.eqns))
    (k1, s1, e1), (k2, s2, e2) = counts[200], counts[800]
    assert k2 == k1 <= 8, counts                  # the same few loop texts, compiled once each
    assert s2 <= 4.5 * s1 and e2 <= 4.5 * e1, counts   # steps and eqns grow with the chain, linearly

