"""Adam's native multi-tensor pass (optim/adam_native.py): the NumPy rule's bits (so the per-parameter path's) for
every option it serves, at every cut into pieces, and the NumPy rule for everything it does not serve."""
import copy

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.optim import adam_native
from jitgrad.optim.multi_tensor import _Scratch
from jitgrad.optim.multi_tensor_rules import _adam_arrays

# the rule's constants: (L2 weight decay, decoupled decay's 1 - lr * wd as a 0-d float64 or None, 1 - beta1,
# 1 - beta2, beta2, eps, maximize, amsgrad), as multi_tensor_rules._adam_consts makes them
CONSTS = {
    "adamw": (0, np.asarray(1 - 3e-4 * 0.1), 0.1, 0.05, 0.95, 1e-8, False, False),
    "adam_l2": (0.05, None, 0.1, 0.001, 0.999, 1e-6, False, False),
    "adam_l2_maximize": (0.05, None, 0.1, 0.001, 0.999, 1e-6, True, False),
    "adam_maximize": (0, None, 0.5, 0.1, 0.9, 1e-8, True, False),
    "adamw_maximize": (0, np.asarray(1 - 1e-2 * 0.3), 0.2, 0.01, 0.99, 1e-3, True, False),
}
@pytest.fixture(autouse=True)
def _every_group(monkeypatch):
    """The pass built, and serving groups of any size (these tests' groups are small)."""
    assert adam_native.build() is not None
    monkeypatch.setattr(adam_native, "MIN_ELEMENTS", 0)


# sizes with a vector loop's tail (not a multiple of its lanes), one element, and two big enough to span pieces
SIZES = [(5, 7), (7,), (3, 1, 2), (1,), (300, 129), (1000,), (17, 33)]


def _entries(rng, scale, sizes=SIZES, step=3):
    """``_adam_arrays``' entries: parameter, gradient (``scale`` times normal, a NaN and an infinity in one), the two
    moments, and the step's 0-d float64 scalars (as ``Adam._step_scalars`` gives them)."""
    out = []
    for i, s in enumerate(sizes):
        g = (rng.standard_normal(s) * scale).astype(np.float32)
        if i == 4:
            g.flat[7], g.flat[11] = np.nan, np.inf
        out.append([rng.standard_normal(s).astype(np.float32), g,
                    (rng.standard_normal(s) * 0.1).astype(np.float32),
                    np.abs(rng.standard_normal(s) * 0.01).astype(np.float32),
                    (np.asarray(3e-4 / (1 - 0.9 ** step)), np.asarray(np.sqrt(1 - 0.999 ** step)))])
    return out


@pytest.mark.parametrize("pieces", [1, 2, 3, 7])
@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e20], ids=["subnormal", "small", "unit", "overflow"])
@pytest.mark.parametrize("which", sorted(CONSTS))
def test_native_pass_gives_the_numpy_rules_bits(monkeypatch, which, scale, pieces):
    """Parameter and both moments equal to the NumPy rule's bit for bit (NaN where it has NaN), however the
    elements are cut between threads: gradients whose squares underflow to subnormals or overflow to infinity,
    a NaN and an infinite gradient, sizes off the vector width."""
    monkeypatch.setattr(adam_native, "_threads", lambda total: pieces)
    rng = np.random.default_rng(pieces)
    native = _entries(rng, scale)
    numpy_rule = copy.deepcopy(native)
    before = dict(adam_native.STATS)
    left = adam_native.update([tuple(e) for e in native], CONSTS[which])
    assert left == []
    assert adam_native.STATS["elements"] - before["elements"] == sum(int(np.prod(s)) for s in SIZES)
    _adam_arrays([tuple(e) for e in numpy_rule], CONSTS[which], _Scratch())
    for a, b in zip(native, numpy_rule):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)


def test_pieces_split_parameters_at_equal_elements():
    """Three pieces of 10 + 6 elements: the first parameter spans pieces 0 and 1, every element in one piece."""
    rows, starts = adam_native._segments([(1000, 2000, 3000, 4000, 10, 1, 2), (5000, 6000, 7000, 8000, 6, 3, 4)],
                                         16, 3)
    assert starts.tolist() == [0, 1, 3, 4]
    assert rows[:, 4].tolist() == [6, 4, 2, 4]
    assert rows[:, 0].tolist() == [1000, 1024, 5000, 5008]      # (float32: 4 bytes an element)
    assert rows[:, 5].tolist() == [1, 1, 3, 3]


@pytest.mark.parametrize("case", ["float64", "zero_dim", "fortran_grad", "empty", "float32_scalars", "grad_is_moment"])
def test_what_the_pass_does_not_serve_goes_back_unchanged(case):
    """Entries it cannot compute with the rule's bits come back for the NumPy rule, untouched."""
    rng = np.random.default_rng(0)
    sizes = {"zero_dim": [()], "empty": [(0, 3)]}.get(case, [(6, 6)])
    entries = _entries(rng, 1.0, sizes)
    if case == "float64":
        entries = [[a.astype(np.float64) for a in e[:4]] + [e[4]] for e in entries]
    if case == "fortran_grad":
        entries[0][1] = np.asfortranarray(entries[0][1])
    if case == "float32_scalars":
        entries[0][4] = tuple(s.astype(np.float32) for s in entries[0][4])
    if case == "grad_is_moment":        # (the rule reads g after updating m: one read each would differ)
        entries[0][1] = entries[0][2]
    kept = copy.deepcopy(entries)
    work = [tuple(e) for e in entries]
    assert adam_native.update(work, CONSTS["adamw"]) == work
    for a, b in zip(entries, kept):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)


def test_served_and_unserved_entries_of_one_group_split(monkeypatch):
    """A group mixing both: the pass updates the float32 matrices, and returns the 0-d parameter alone."""
    monkeypatch.setattr(adam_native, "_threads", lambda total: 2)
    rng = np.random.default_rng(1)
    entries = _entries(rng, 1.0, [(4, 8), (), (9,)])
    work = [tuple(e) for e in entries]
    assert adam_native.update(work, CONSTS["adam_l2"]) == [work[1]]


@pytest.mark.parametrize("why", ["amsgrad", "errstate", "off"])
def test_options_it_does_not_do_decline_the_whole_group(monkeypatch, why):
    """amsgrad, NumPy error settings other than the defaults (the NumPy rule raises or warns as they say), and
    ``JITGRAD_NATIVE_ADAM=0`` leave every entry to the NumPy rule."""
    rng = np.random.default_rng(2)
    entries = _entries(rng, 1.0, [(8, 8)])
    kept = copy.deepcopy(entries)
    work = [tuple(e) for e in entries]
    consts = CONSTS["adamw"]
    if why == "amsgrad":
        consts = consts[:-1] + (True,)
    if why == "off":
        monkeypatch.setattr(adam_native, "ENABLED", False)
    with np.errstate(over="raise" if why == "errstate" else "warn"):
        assert adam_native.update(work, consts) == work
    np.testing.assert_array_equal(entries[0][0], kept[0][0])


def test_adamw_steps_through_the_pass_match_the_per_parameter_path(monkeypatch):
    """Five AdamW steps of a model's float32 parameters: every matrix through the native pass (counted), the same
    parameters and moments as the per-parameter path's tensor ops, bit for bit."""
    from jitgrad.optim import multi_tensor

    def run(fast):
        monkeypatch.setattr(multi_tensor, "eager_ready", lambda: fast)
        jg.manual_seed(0)
        ps = [jg.nn.Parameter(jg.randn(33, 17)), jg.nn.Parameter(jg.randn(17)), jg.nn.Parameter(jg.randn(64, 64))]
        opt = jg.optim.AdamW([{"params": ps[::2], "weight_decay": 0.1}, {"params": ps[1:2], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95))
        before = adam_native.STATS["updates"]
        for i in range(5):
            for p in ps:
                p.grad = jg.randn(*p.shape) * (10.0 ** (i - 2))
            opt.step()
        state = [opt.state[p][k].numpy().copy() for p in ps for k in ("exp_avg", "exp_avg_sq")]
        return [p.detach().numpy().copy() for p in ps] + state, adam_native.STATS["updates"] - before
    fast, passes = run(True)
    slow, none = run(False)
    assert passes == 10 and none == 0        # (two groups a step)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def test_small_groups_keep_the_numpy_rule_and_the_build_waits_for_a_big_one(monkeypatch):
    """Under ``MIN_ELEMENTS`` a group never asks for the pass; the first big one queues its build on the build
    thread and runs the NumPy rule meanwhile (a first step does not wait for LLVM); once built, the pass serves."""
    from jitgrad.codegen.native import build_thread
    from jitgrad.jit import eager_kernels
    monkeypatch.setattr(adam_native, "MIN_ELEMENTS", 1000)
    monkeypatch.setattr(adam_native, "_BUILT", [])
    monkeypatch.setattr(adam_native, "_QUEUED", [])
    monkeypatch.setattr(eager_kernels, "SYNC", False)
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "1")
    rng = np.random.default_rng(3)
    small = [tuple(e) for e in _entries(rng, 1.0, [(10, 10)])]
    assert adam_native.update(small, CONSTS["adamw"]) == small and not adam_native._QUEUED
    big = [tuple(e) for e in _entries(rng, 1.0, [(40, 40)])]
    assert adam_native.update(big, CONSTS["adamw"]) == big and adam_native._QUEUED
    assert build_thread.wait_background(60)
    assert adam_native._BUILT and adam_native.update(big, CONSTS["adamw"]) == []
