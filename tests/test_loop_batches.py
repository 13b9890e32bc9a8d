"""An optimiser's update as one multi-tensor launch (issue 32), counted and compared, never timed.

Independent fusion groups of one body (each parameter's update, each gradient's sum of squares) are batched
into one step (``ir/passes/loop_batches.py``, ``ir/plan.LoopBatch``) that the CPU target runs as one launch
parallel over (member, chunk) (``codegen/program/batch_steps.py``, ``codegen/kernels/batch_loops.py``):
- a compiled AdamW, SGD with momentum and Adam with weight decay step over many parameters of different shapes
  launches its update as a bounded few batches where it launched one loop per parameter;
- the batch takes the pool when the members' work together reaches the threshold (gated per call), else runs as
  one serial launch;
- its results are bit-identical to the ungrouped program's (``JITGRAD_GROUP_LOOPS=0``) and at 1 and 2 threads,
  and equal eager mode's to rounding.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir import settings

# parameters of many shapes (vectors, matrices, a 3-d one, a single element), as a model's are
SHAPES = [(64, 32), (32,), (48, 16), (7,), (128,), (16, 16, 3), (200,), (33, 5), (1,), (90, 40), (40,), (3, 3)]
OPTIMIZERS = {
    "adamw": lambda ps: jg.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "sgd_momentum": lambda ps: jg.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam_weight_decay": lambda ps: jg.optim.Adam(ps, lr=1e-2, weight_decay=0.01),
}
STEPS = 3


@pytest.fixture
def min_work():
    """Set the pool's threshold for a test (restored after it)."""
    prev = workpool.set_min_work(workpool.min_work())
    yield workpool.set_min_work
    workpool.set_min_work(*prev)


def _train(kind, compiled=True, steps=STEPS):
    """``steps`` steps of optimiser ``kind`` over parameters of SHAPES; the step function (compiled or not), the
    parameters after them and the losses."""
    rng = np.random.default_rng(0)
    params = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s).astype(np.float32))) for s in SHAPES]
    opt = OPTIMIZERS[kind](params)

    def step(x):
        loss = sum(((p * x).sin() * p).sum() for p in params)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    f = jg.compile(step, backend="numba", background=False) if compiled else step
    x = jg.tensor(np.float32(0.7))
    losses = [float(f(x)) for _ in range(steps)]
    return f, x, [p.detach().numpy().copy() for p in params], losses


def _loops(launches):
    return [la for la in launches if la.kind in ("fused", "batch")]


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_an_update_over_many_parameters_is_a_few_launches_and_the_same_bits(kind, monkeypatch, high_thresholds):
    """Grouped: a bounded few batch launches where the ungrouped program launched one loop (or more) per
    parameter; every parameter and loss bit-identical to the ungrouped program's, and equal to eager mode's."""
    n = len(SHAPES)
    f, x, params, losses = _train(kind)
    monkeypatch.setenv("JITGRAD_GROUP_LOOPS", "0")
    fu, xu, params_u, losses_u = _train(kind)
    monkeypatch.delenv("JITGRAD_GROUP_LOOPS")
    grouped, ungrouped = _loops(f.launches(x)), _loops(fu.launches(xu))
    batches = [la for la in grouped if la.kind == "batch"]
    assert not any(la.kind == "batch" for la in ungrouped)
    # the update and the loss's per-parameter sums: each one loop per parameter ungrouped, a few batches grouped
    assert len(ungrouped) >= 2 * n
    # one batch for the loss's per-parameter sums and one for the update; Adam's kinds a third, for the
    # per-parameter step scalars (their bias corrections: one chain per parameter, split out and batched)
    assert len(batches) == (2 if kind == "sgd_momentum" else 3), [la.label for la in batches]
    assert len(grouped) <= len(ungrouped) - 2 * n + 6
    for p, q in zip(params, params_u):
        np.testing.assert_array_equal(p, q)
    np.testing.assert_array_equal(losses, losses_u)
    _, _, params_e, losses_e = _train(kind, compiled=False)
    for p, q in zip(params, params_e):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, losses_e, rtol=1e-5)


def test_a_batch_takes_the_pool_when_its_members_work_together_reaches_the_threshold(min_work, monkeypatch):
    """Each member is below the threshold, together they reach it: the batch is one parallel launch where the
    ungrouped program ran every loop serially (and per call, off the pool once the threshold moves past its
    work, with the same bits).  With a threshold above the sum the batch is one serial launch."""
    if settings.default_threads() < 2:
        pytest.skip("the pool needs two workers")
    f0, x0, _, _ = _train("adamw", steps=1)
    work = max(la.work for la in f0.launches(x0) if la.kind == "batch")
    min_work(int(work // 2), 1024)     # the biggest member, 3600 of 9814 elements, does less than half the work
    monkeypatch.setenv("JITGRAD_GROUP_LOOPS", "0")
    fu, xu, _, _ = _train("adamw")
    monkeypatch.delenv("JITGRAD_GROUP_LOOPS")
    assert not any(la.parallel for la in _loops(fu.launches(xu)))
    f, x, params, _ = _train("adamw")
    top = max((la for la in f.launches(x) if la.kind == "batch"), key=lambda la: la.work)
    assert top.parallel and top.gated and top.threads >= 2 and top.work == work
    before = workpool.rounds()
    f(x)
    assert workpool.rounds() > before
    min_work(int(work) + 1, 1024)     # the same program, its work now below the threshold: off the pool per call
    assert not max((la for la in f.launches(x) if la.kind == "batch"), key=lambda la: la.work).parallel
    f1, x1, params_1, _ = _train("adamw")   # built serial
    assert not any(la.parallel for la in f1.launches(x1))
    assert sum(la.kind == "batch" for la in f1.launches(x1)) == sum(la.kind == "batch" for la in f.launches(x))
    for p, q in zip(params, params_1):
        np.testing.assert_array_equal(p, q)


def test_parameters_are_bit_identical_at_one_and_two_threads(min_work):
    """The batch on the pool at 2 threads (its threshold low enough), serial at 1: the same bits."""
    if settings.default_threads() < 2:
        pytest.skip("the pool needs two workers")
    min_work(1, 1)
    prev = jg.get_num_threads()
    try:
        jg.set_num_threads(1)
        f1, x1, p1, l1 = _train("adamw")
        assert not any(la.parallel for la in f1.launches(x1))
        jg.set_num_threads(2)
        f2, x2, p2, l2 = _train("adamw")
        assert any(la.parallel for la in f2.launches(x2) if la.kind == "batch")
    finally:
        jg.set_num_threads(prev)
    for p, q in zip(p1, p2):
        np.testing.assert_array_equal(p, q)
    np.testing.assert_array_equal(l1, l2)


def test_only_independent_loops_are_batched():
    """A loop that reads another's result (here through a scan) never joins its batch; one that reads neither
    does, and the program computes what eager mode does."""
    def three(x, y, z):
        u = (x * 2.0 + 1.0).sum()
        v = (y * 2.0 + 1.0).sum()
        c = jg.cumsum(z * u, 0)
        w = (c * 2.0 + 1.0).sum()        # the same body as u's and v's loops, but it reads u
        return u + v + w
    xs = [jg.tensor(np.linspace(0, 1, n, dtype=np.float32)) for n in (10, 20, 30)]
    f = jg.compile(three, backend="numba", background=False)
    out = f(*xs)
    lines = str(f.fusion_plan(*xs)).splitlines()
    assert sum("batch of" in line for line in lines) == 1
    at = next(k for k, line in enumerate(lines) if "batch of 2 loops" in line)
    assert "over [10]" in lines[at + 1] and "over [20]" in lines[at + 2]
    assert sum(la.kind == "batch" for la in f.launches(*xs)) == 1
    np.testing.assert_allclose(out.numpy(), three(*xs).numpy(), rtol=1e-6)


def test_a_member_never_updates_in_place_a_state_another_member_reads():
    """Two updates of one body in one batch (a scan between them keeps them apart in the plan), the first
    reading the state the second updates: the second is not computed into that state's buffer, where the first,
    on another worker, would read new values; it is written back after the step.  The results are eager's."""
    n = 1 << 16
    rng = np.random.default_rng(1)
    a0, b0, c0 = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    a, b, c = (jg.tensor(v.copy()) for v in (a0, b0, c0))

    @jg.compile(backend="numba", background=False, parallel=True)
    def update(d):
        b.mul_(2.0).add_(a)         # reads a's old value
        s = jg.cumsum(d, 0)
        a.mul_(2.0).add_(c)         # the same body
        return s
    d = jg.tensor(c0)
    update(d)
    assert str(update.fusion_plan(d)).splitlines()[1] == "  batch of 2 loops:"
    assert [la.label for la in update.launches(d) if la.kind == "copy"] == ["write-back"]
    np.testing.assert_array_equal(b.numpy(), b0 * np.float32(2.0) + a0)
    np.testing.assert_array_equal(a.numpy(), a0 * np.float32(2.0) + c0)


def _gpt(grouped, monkeypatch):
    """Two compiled B9-style steps (a 2-block GPT of width 64, AdamW with clipping): the step, its launches and
    the parameters after them."""
    from benchmark_model import gpt_model
    monkeypatch.setenv("JITGRAD_GROUP_LOOPS", "1" if grouped else "0")
    jg.manual_seed(0)
    m = gpt_model.make_gpt(jg, 65, 64, 64, 4, 2, 0.0, False)
    step = jg.compile(gpt_model.make_step(jg, m, m, gpt_model.make_optimizer(jg, m, 1e-3)), backend="numba",
                      background=False)
    g = jg.Generator().manual_seed(1)
    x, y = jg.randint(0, 65, (4, 64), generator=g), jg.randint(0, 65, (4, 64), generator=g)
    for _ in range(2):
        step(x, y)
    launches = step.launches(x, y)
    monkeypatch.delenv("JITGRAD_GROUP_LOOPS")
    return launches, [p.detach().numpy().copy() for p in m.parameters()]


def _members(la) -> int:
    return int(la.label.split()[2].rstrip(":")) if la.label.startswith("batch of") else 1


def _ops(launches) -> Counter:
    """Every eqn the loops run, by op name (a batch's body once per member)."""
    out = Counter()
    for la in launches:
        for op in la.label[la.label.index("[") + 1:la.label.index("]")].split(","):
            out[op] += _members(la)
    return out


def test_a_gpt_step_batches_its_update_clipping_and_write_backs(monkeypatch):
    """A B9-style step: AdamW's per-parameter updates and step-count scalars and clipping's per-parameter sums of
    squares run as a few batches, clipping's running total of those sums as one loop, and the step counts'
    write-backs (after the embedding's steps that may raise, so not in place) as one; every eqn is still run once;
    the parameters are the ungrouped program's bit for bit."""
    grouped, params = _gpt(True, monkeypatch)
    ungrouped, params_u = _gpt(False, monkeypatch)
    n = len(params)
    wb = [la for la in ungrouped if la.label == "write-back"]
    assert len(wb) >= n
    assert [la.label for la in grouped if la.label.startswith("write-back")] == [f"write-back (batch of {len(wb)})"]
    loops = [la for la in _loops(grouped) if not la.label.startswith("write-back")]
    batches = [la for la in loops if la.kind == "batch"]
    members = sum(map(_members, batches))
    assert members >= 2.5 * n       # clipping's sum per parameter, the updates and the step counts' scalars
    # each batch launches once for its members; clipping's running total, one 0-d add per gradient between the
    # sums of squares, joins the clip coefficient's loop once the sums moved into their batch
    # (loop_batches._join_neighbours); the per-parameter chains that fusion had put side by side in one loop
    # (0-d step-count scalars, same-shape updates) are members too (loop_batches._split_chains)
    adds = [la for la in ungrouped if la.kind == "fused" and la.label.endswith("[add] gpt_model.py:98")]
    assert len(adds) >= n // 2          # (one per gradient after the first)
    assert not any(la.label.endswith("[add] gpt_model.py:98") for la in grouped)
    clip = [la for la in grouped if la.kind == "fused" and "clamp" in la.label]
    assert len(clip) == 1 and clip[0].label.count("add") == len(adds) + 2
    assert _ops(loops) == _ops(_loops(ungrouped))

    def optimiser(la):          # gpt_model.make_step's lines: clipping (98) and the update (99)
        return la.label.rsplit(" ", 1)[-1] in ("gpt_model.py:98", "gpt_model.py:99", "gpt_model.py:98-99")
    assert sum(map(optimiser, _loops(ungrouped))) >= 2 * n
    assert sum(map(optimiser, loops)) <= sum(map(optimiser, batches)) + 3      # the clip and decay factors
    # the rest of the step is launched as before
    rest = [la for la in loops if not optimiser(la)]
    assert len(rest) == sum(not optimiser(la) for la in _loops(ungrouped)) \
        - sum(_members(la) - 1 for la in rest if la.kind == "batch")
    assert len(grouped) - len(loops) == len(ungrouped) - len(_loops(ungrouped)) - (len(wb) - 1)
    for p, q in zip(params, params_u):
        np.testing.assert_array_equal(p, q)


def test_a_loop_reading_a_scatters_result_stays_after_it():
    """A loop of the batch's body that reads what a scatter-add (the store closing another loop) wrote cannot move
    up to the batch before that loop: it starts a batch of its own."""
    def f(x, y, idx, v):
        a = (x * 2.0 + 1.0).sum()
        s = y.index_add(0, idx, v)          # a loop over v whose store adds into s by idx
        b = (s * 2.0 + 1.0).sum()           # a's body, over s
        return a + b
    x, y = jg.tensor(np.linspace(0, 1, 10, dtype=np.float32)), jg.tensor(np.ones(12, np.float32))
    idx, v = jg.tensor(np.array([1, 3, 3, 11])), jg.tensor(np.arange(4, dtype=np.float32))
    g = jg.compile(f, backend="numba", background=False)
    np.testing.assert_allclose(g(x, y, idx, v).numpy(), f(x, y, idx, v).numpy(), rtol=1e-6)
    assert "batch of" not in str(g.fusion_plan(x, y, idx, v))


def _ir_lines(text) -> int:
    """LLVM IR instructions of a rendered kernel: the lines of its function bodies, less labels."""
    n, inside = 0, False
    for line in text.splitlines():
        if line.startswith("define "):
            inside = True
        elif line.startswith("}"):
            inside = False
        elif inside and line.strip() and not line.strip().endswith(":"):
            n += 1
    return n


def _update_kernels(kind, n):
    """The kernels of a compiled ``opt.step()`` over ``n`` parameters (SHAPES' first four, cycled) and their
    LLVM IR instructions, with the step's results checked against eager mode's."""
    from jitgrad.codegen.kernels import ir_loops
    from jitgrad.codegen.program.cpu import lay_out
    from jitgrad.ir.passes import fusion_plan
    runs = []
    for compiled in (True, False):
        rng = np.random.default_rng(0)
        params = [jg.nn.Parameter(jg.tensor(rng.standard_normal(SHAPES[k % 4]).astype(np.float32)))
                  for k in range(n)]
        for p in params:
            p.grad = jg.tensor(rng.standard_normal(p.shape).astype(np.float32))
        opt = OPTIMIZERS[kind](params)
        f = jg.compile(opt.step, backend="numba", background=False) if compiled else opt.step
        fc = f if compiled else fc
        for _ in range(2):
            f()
        runs.append([p.detach().numpy() for p in params])
    for p, q in zip(*runs):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
    (entries,) = fc._cache.values()
    kernels = lay_out(fusion_plan(entries[0].graph)).kernels.values()
    return [(k.kind, _ir_lines(ir_loops.render(k.ir, k.key))) for k in kernels]


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_an_updates_kernels_do_not_grow_with_the_number_of_parameters(kind, high_thresholds):
    """4 or 40 parameters: the same kernels, of the same LLVM IR size (each batch kernel's loop runs over a table
    of its members' argument blocks; Adam's per-parameter step-count scalars, which fusion had put side by side
    in straight-line loops, one ``pow`` per parameter, are members of a batch too)."""
    few, many = _update_kernels(kind, 4), _update_kernels(kind, 40)
    assert sorted(many) == sorted(few)
    assert any(kind == "batch" for kind, _ in many)
