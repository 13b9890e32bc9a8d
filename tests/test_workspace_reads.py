"""A compiled step reads no workspace byte it did not write in the same call.

The workspace (``CompiledGraph._ws``: every intermediate of a step, reused call after call) is filled with a
poison byte before each call: 0xFF makes every float in it a NaN and every int -1, so a kernel that read a slot
before writing it (a stale value from the previous call, which gives the same bits run to run and so hides from
the determinism tests) changes the losses or the parameters.  B9's model (small) trained 4 steps, float32 and
float64, against the same steps with the workspace left as the previous call left it.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.program import cpu

from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests

VOCAB, T, C, H, L, B = 11, 8, 16, 2, 2, 4


def _poison(byte):
    """Fill every compiled graph's workspace with ``byte``; returns the workspaces."""
    out = []
    for o in gc.get_objects():
        # (type(), not isinstance: gc's objects include weak proxies whose referent may be gone)
        if type(o) is cpu.CompiledGraph and getattr(o, "_ws", None) is not None:
            o._ws.fill(byte)
            out.append(o._ws)
    return out


def _train(dtype, poison):
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, VOCAB, T, C, H, L, 0.0, False).to(dtype)
    opt = gpt_model.make_optimizer(jg, model, lr=1e-2)
    step = jg.compile(gpt_model.make_step(jg, model, model, opt), backend="numba", background=False)
    rng = np.random.default_rng(0)
    losses, poisoned = [], 0
    for _ in range(4):
        x = jg.tensor(rng.integers(0, VOCAB, (B, T)))
        y = jg.tensor(rng.integers(0, VOCAB, (B, T)))
        spaces = _poison(poison) if poison is not None else []
        losses.append(np.asarray(step(x, y).numpy()).tobytes())
        # the poisoned buffers are the ones the step used: it wrote its intermediates over the poison
        poisoned += sum(bool((ws != poison).any()) for ws in spaces)
    state = {k: v.numpy().tobytes() for k, v in model.state_dict().items()}
    return losses, state, poisoned


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64])
def test_a_poisoned_workspace_changes_no_bit(dtype):
    plain = _train(dtype, None)
    bad = _train(dtype, 0xFF)
    assert bad[2] >= 3          # the workspace was there to poison before calls 2..4 (at least)
    assert bad[0] == plain[0]
    assert bad[1] == plain[1]
