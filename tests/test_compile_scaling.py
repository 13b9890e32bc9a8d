"""Compile work linear in the graph, counted (never timed): a long elementwise chain is cut into loops of at
most ``MAX_GROUP_EQNS`` eqns whose texts repeat, so the number of distinct kernels (Numba compilations) does
not grow with the chain's length, and the steps grow linearly with it."""
import importlib.util
import os

import numpy as np

import jitgrad as jg
from jitgrad.codegen.cpu import lay_out
from jitgrad.ir.passes import fusion_plan
from jitgrad.ir.passes.fuse import MAX_GROUP_EQNS

# the chain is the one benchmarks/codegen_fresh.py times: one definition, in benchmarks/elementwise_chains.py
# (loaded by path: putting benchmarks/ on sys.path would shadow test modules with its harness.py, report.py...)
_spec = importlib.util.spec_from_file_location("elementwise_chains", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "elementwise_chains.py"))
chains = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chains)


def _chain_graph(n):
    x = jg.tensor(np.linspace(-1, 1, 64, dtype=np.float32), requires_grad=True)
    f = jg.compile(chains.tanh_scale_step(n), backend="interpret")
    r = f(x)
    np.testing.assert_allclose(r.numpy(), chains.tanh_scale_reference(x.detach().numpy(), n), rtol=1e-4, atol=1e-5)
    (entries,) = f._cache.values()
    return entries[0].graph


def test_chain_kernels_do_not_grow_with_length():
    counts = {}
    for n in (200, 800):
        g = _chain_graph(n)
        p = fusion_plan(g)
        assert all(len(grp.eqns) <= MAX_GROUP_EQNS for grp in p.groups)
        prog = lay_out(p)
        counts[n] = (len(prog.kernels), len(prog.steps), len(g.eqns))
    (k1, s1, e1), (k2, s2, e2) = counts[200], counts[800]
    assert k2 == k1 <= 8, counts                  # the same few loop texts, compiled once each
    assert s2 <= 4.5 * s1 and e2 <= 4.5 * e1, counts   # steps and eqns grow with the chain, linearly

