"""Issue 19: compiled code must not run stale Python values, give silent wrong results, break under threads and
forks, or leave state behind after a failed trace.  One test per finding; crash cases run in a child process;
nothing is timed (tests count traces and cache entries)."""
import os
import subprocess
import sys
import textwrap
import threading
import types
import warnings

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
from jitgrad.tracer import TracedValueError


def close(a, b, rtol=1e-6, atol=1e-7):
    a = a.detach().numpy() if isinstance(a, jg.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, jg.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def entries(f):
    return sum(len(v) for v in f._cache.values())


# ---- item 2: stale Python values -------------------------------------------------------------------------

def test_closure_float_is_guarded():
    scale = 2.0
    f = jg.compile(lambda x: x * scale)
    x = jg.ones(3)
    close(f(x), [2.0] * 3)
    scale = 5.0
    close(f(x), [5.0] * 3)


FLAG = True
GSCALE = 2.0


def _global_reader(x):
    return x * GSCALE if FLAG else x - 1


def test_global_float_and_bool_are_guarded():
    global FLAG, GSCALE
    f = jg.compile(_global_reader)
    x = jg.ones(2)
    try:
        close(f(x), [2.0, 2.0])
        GSCALE = 3.0
        close(f(x), [3.0, 3.0])
        FLAG = False
        close(f(x), [0.0, 0.0])
        FLAG = True
        close(f(x), [3.0, 3.0])
    finally:
        FLAG, GSCALE = True, 2.0


def test_object_attribute_is_guarded():
    class Config:
        pass
    cfg = Config()
    cfg.k, cfg.relu = 1.5, False

    @jg.compile
    def f(x):
        y = x * cfg.k
        return y.relu() if cfg.relu else y

    x = jg.tensor([-1.0, 2.0])
    close(f(x), [-1.5, 3.0])
    cfg.relu = True
    close(f(x), [0.0, 3.0])
    cfg.k = 2
    close(f(x), [0.0, 4.0])


def test_closure_int_used_in_reshape_is_guarded():
    n = 3
    f = jg.compile(lambda x: x.reshape(n, -1))
    assert f(jg.ones(6)).shape == (3, 2)
    n = 2
    assert f(jg.ones(6)).shape == (2, 3)


def test_module_attribute_is_guarded():
    mod = types.ModuleType("user_settings")
    mod.alpha = 0.5
    sys.modules["user_settings"] = mod
    try:
        ns = {}
        exec("import user_settings\ndef f(x):\n    return x * user_settings.alpha\n", ns)
        f = jg.compile(ns["f"])
        x = jg.ones(2)
        close(f(x), [0.5, 0.5])
        mod.alpha = 4.0
        close(f(x), [4.0, 4.0])
    finally:
        del sys.modules["user_settings"]


def test_nn_module_attribute_read_in_forward_is_guarded():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.factor = 1.0

        def forward(self, x):
            return self.lin(x) * self.factor

    m = Scale()
    drop = nn.Dropout(0.0)
    f = jg.compile(lambda x: drop(m(x)))
    x = jg.randn(4, 2)
    close(f(x), m(x))
    m.factor = 3.0
    close(f(x), m(x))
    drop.p = 1.0                     # Dropout's own attribute, read in its forward
    close(f(x), np.zeros((4, 2)))


def test_recompile_limit_names_the_function_and_the_changing_value():
    k = 0
    f = jg.compile(lambda x: x.reshape(-1)[:k + 1].sum(), recompile_limit=3)
    x = jg.arange(10.0)
    with pytest.warns(UserWarning) as rec:
        for k in range(6):
            close(f(x), sum(range(k + 1)))
    msgs = [str(r.message) for r in rec if "recompile limit" in str(r.message)]
    assert len(msgs) == 1
    assert "recompile limit (3)" in msgs[0] and "'<lambda>'" in msgs[0]
    assert "closure variable 'k'" in msgs[0] and "changed from 2 to 3" in msgs[0]
    assert f.stats["traces"] == 3 and f.stats["eager_fallbacks"] == 3


def test_float_argument_changing_every_call_is_a_graph_input():
    f = jg.compile(lambda x, lr: x * lr + (1 - lr))
    x = jg.ones(4)
    for i in range(1800):
        lr = 0.001 * i
        r = f(x, lr)
        if i % 450 == 0:
            close(r, (x * lr + (1 - lr)))
    close(r, np.full(4, 1.0))
    assert f.stats["traces"] <= 2
    assert entries(f) <= 2               # no entry per value: memory does not grow with the calls
    assert f.stats["hits"] >= 1798


def test_guarded_float_that_keeps_changing_becomes_a_graph_input():
    lr = 0.1
    w = jg.ones(3)

    @jg.compile
    def step(g):
        w.sub_(lr * g)

    g = jg.ones(3)
    want = 1.0
    for i in range(40):
        lr = 0.01 * (i + 1)
        step(g)
        want -= lr
    close(w, [want] * 3, rtol=1e-5)
    assert step.stats["traces"] <= 2 and entries(step) <= 2


def test_float_used_as_a_python_number_stays_static_and_correct():
    def f(x, s):
        if s > 1.0:            # needs the Python value: this argument cannot be a graph input
            return x * 2
        return x + s
    cf = jg.compile(f)
    x = jg.ones(2)
    for s in [0.5, 3.0, 0.25, 0.5, 3.0]:
        close(cf(x, s), f(x, s))
    assert cf.stats["traces"] == 3     # one per distinct value, each guarded by value


def test_dynamic_float_in_generated_code_matches_eager():
    f = jg.compile(lambda x, s: (x * s).sum(), backend="numba")
    x = jg.randn(5)
    for s in [0.1, 0.7, 0.3]:
        close(f(x, s), (x * s).sum())
        assert f(x, s).dtype is jg.float32
    assert f.stats["traces"] == 2 and f.stats["compiled_calls"] >= 4


# ---- item 6: state after a failed trace ------------------------------------------------------------------

@pytest.mark.parametrize("dampening", [0.0, 0.5])
def test_failed_trace_leaves_optimizer_buffers_params_and_grads_as_before(dampening):
    jg.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    opt = jg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=dampening)
    x, y = jg.randn(8, 3), jg.randn(8, 1)

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()          # reading a traced value: the trace fails

    params = [p.detach().numpy().copy() for p in model.parameters()]
    buffers = [b.numpy().copy() for b in model.buffers()]
    for p in model.parameters():
        p.grad = jg.ones(p.shape)       # .grad objects that exist before
    grads = [p.grad for p in model.parameters()]
    f = jg.compile(step)
    with pytest.raises(TracedValueError):
        f()
    assert len(opt.state) == 0 or all(len(s) == 0 for s in opt.state.values())
    for p, v, g in zip(model.parameters(), params, grads):
        assert p.grad is g and not isinstance(p.grad._data, jg.ir.graph.Var)
        close(p.grad, np.ones(p.shape))
        close(p, v)
    for b, v in zip(model.buffers(), buffers):
        close(b, v)
    # the next eager step works and matches a fresh optimiser's first step
    ref = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    ref.load_state_dict(model.state_dict())
    ref_opt = jg.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, dampening=dampening)
    for m, o in ((model, opt), (ref, ref_opt)):
        for _ in range(2):
            o.zero_grad()
            ((m(x) - y) ** 2).mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p, q)


# ---- item 5: threads and processes -----------------------------------------------------------------------

def _first_calls_from_four_threads():
    w = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    bias = jg.tensor([0.5, 0.5, 0.5])

    @jg.compile
    def f(x):
        h = x * w + bias
        for _ in range(20):
            h = h * 1.0
        loss = (h ** 2).sum()
        g, = jg.autograd.grad(loss, [w])
        return loss.detach(), g

    xs = [jg.tensor([float(i), 1.0, -1.0]) for i in range(4)]
    barrier = threading.Barrier(4)
    results, errors = [None] * 4, []

    def run(i):
        try:
            barrier.wait()
            for _ in range(5):
                results[i] = f(xs[i])
                # the captured parameter is never a traced value as seen from another thread's compiled call
                assert isinstance(w._data, np.ndarray) and isinstance(bias._data, np.ndarray)
        except BaseException as exc:      # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for x, (loss, g) in zip(xs, results):
        xv, wv = x.numpy(), w.detach().numpy()
        close(loss, (((xv * wv + 0.5) ** 2).sum()))
        close(g, 2 * (xv * wv + 0.5) * xv)
    assert f.stats["traces"] == 1


def test_four_threads_calling_a_compiled_step_for_the_first_time():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)       # switch threads often, so the first calls interleave with each other
    try:
        for _ in range(6):
            _first_calls_from_four_threads()
    finally:
        sys.setswitchinterval(interval)


def test_eager_code_in_another_thread_never_sees_a_parameter_being_traced():
    w = jg.tensor([1.0, 2.0, 3.0])
    stop, errors, seen = threading.Event(), [], []

    def eager_reader():
        try:
            while not stop.is_set():
                seen.append((w * 2).sum().item())     # an eager op and a read of the captured tensor
        except BaseException as exc:      # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    reader = threading.Thread(target=eager_reader)
    reader.start()
    try:
        for _ in range(10):
            f = jg.compile(lambda x: sum(((x * w) * 1.0 for _ in range(30)), jg.zeros(3)))   # a long trace
            close(f(jg.ones(3)), [30.0, 60.0, 90.0])
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert seen and set(seen) == {12.0}


_FORK_CHILD = textwrap.dedent("""
    import os, sys, time
    import jitgrad as jg
    f = jg.compile(lambda x: (x * 3.0 + 1.0).exp().sum(), backend="numba", background=True)
    x = jg.ones(4)
    r = f(x)                       # starts a background build
    pid = os.fork()
    if pid == 0:
        ok = f.wait()             # must not wait for the parent's build threads/processes
        r2 = f(x)
        os._exit(0 if abs(float(r2.item()) - float(r.item())) < 1e-3 else 3)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            f.wait()
            sys.exit(os.waitstatus_to_exitcode(status))
        time.sleep(0.05)
    os.kill(pid, 9)
    sys.exit(7)                    # the child blocked
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_wait_in_a_forked_child_does_not_block(tmp_path):
    env = dict(os.environ, JITGRAD_CACHE_DIR=str(tmp_path / "cache"), JITGRAD_BACKGROUND_COMPILE="1")
    p = subprocess.run([sys.executable, "-c", _FORK_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])


# ---- item 3: silent wrong results outside the kernels ----------------------------------------------------

@pytest.mark.parametrize("backend,view", [("interpret", False), ("interpret", True), ("numba", True)])
def test_inplace_change_of_a_saved_compiled_output_raises_the_version_error(backend, view):
    w = jg.tensor([0.1, 0.2, 0.3], requires_grad=True)
    # exp's backward reads its output; a view of it shares its version counter (whatever buffer a backend uses)
    f = jg.compile(lambda x: (x * w).exp().reshape(3, 1) if view else (x * w).exp(), backend=backend)
    x = jg.tensor([1.0, 2.0, 3.0])
    y = f(x)
    with jg.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been "
                                           "modified by an inplace operation"):
        y.sum().backward()
    ye = (x * w).exp()                          # eager raises the same
    with jg.no_grad():
        ye.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ye.sum().backward()


def test_inplace_change_of_an_unsaved_compiled_output_keeps_eager_gradients():
    w = jg.tensor([0.1, 0.2, 0.3], requires_grad=True)
    f = jg.compile(lambda x: x * w)             # mul's backward reads its inputs, not its output
    x = jg.tensor([1.0, 2.0, 3.0])
    y = f(x)
    with jg.no_grad():
        y.mul_(2)
    y.sum().backward()
    close(w.grad, x)


def test_from_numpy_tensors_over_one_array_alias_inside_compiled_code():
    def f(a, b):
        a.add_(1.0)
        return b * 2            # eager: b sees a's update (one buffer)

    cf = jg.compile(f)
    for _ in range(2):
        arr_e, arr_c = np.arange(3.0), np.arange(3.0)
        want = f(jg.from_numpy(arr_e), jg.from_numpy(arr_e))
        got = cf(jg.from_numpy(arr_c), jg.from_numpy(arr_c))
        close(got, want)
        close(arr_c, arr_e)
    # a view of the same array: overlapping buffers
    arr_e, arr_c = np.arange(4.0), np.arange(4.0)
    want = f(jg.from_numpy(arr_e[1:]), jg.from_numpy(arr_e[:3]))
    got = cf(jg.from_numpy(arr_c[1:]), jg.from_numpy(arr_c[:3]))
    close(got, want)
    close(arr_c, arr_e)
    # separate arrays still compile (aliasing is part of the key, not a reason to stop compiling)
    a, b = jg.from_numpy(np.arange(3.0)), jg.from_numpy(np.ones(3))
    close(cf(a, b), [2.0, 2.0, 2.0])
    close(a, [1.0, 2.0, 3.0])
    assert cf.stats["traces"] == 2       # aliased (eager, one entry for both cases) and separate (compiled)
    assert cf.stats["eager_fallbacks"] == 1


# ---- item 7: errors from compiled code name the op and the user's line -----------------------------------

def test_error_raised_inside_a_compiled_graph_names_the_op_and_the_user_line():
    W = jg.randn(10)
    f = jg.compile(lambda i: W[i] * 2, backend="interpret")
    close(f(jg.tensor(3)), W[3] * 2)
    with pytest.raises(IndexError) as exc:
        f(jg.tensor(12))
    msg = str(exc.value)
    assert msg.startswith("getitem: index 12 is out of bounds for dimension 0 with size 10")
    assert "float32[10], int64[]" in msg
    assert "test_compiled_safety.py" in msg and "lambda i: W[i] * 2" in msg
    with pytest.raises(IndexError) as eager:
        W[jg.tensor(12)]
    assert str(eager.value).split("\n")[0] == msg.split("\n")[0]


def test_guards_do_not_walk_library_objects_whose_state_changes_every_call():
    # ``opt.step`` puts the name "step" in the code; the global ``step`` is the compiled function itself, whose
    # stats change at every call: guarding them would retrace every call
    ns = {"jg": jg, "nn": nn}
    exec(textwrap.dedent("""
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
        opt = jg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        @jg.compile
        def step(x):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
    """), ns)
    x = jg.randn(5, 3)
    for _ in range(6):
        ns["step"](x)
    assert ns["step"].stats["traces"] <= 2      # the first step creates the momentum buffers
    labels = [g.label for e in ns["step"]._cache.values() for g in e[0].values]
    assert not any(lbl.startswith("global 'step'.") or lbl.startswith("global 'opt'") for lbl in labels), labels
    assert "global 'model'.1.training" in labels


LAYER_GAIN = 1.0


class _GainLayer(nn.Module):
    def forward(self, x):
        return x * LAYER_GAIN         # a global read by a method of a user Module


def test_global_read_in_a_user_module_method_is_guarded():
    global LAYER_GAIN
    m = nn.Sequential(_GainLayer())
    f = jg.compile(lambda x: m(x))
    x = jg.ones(2)
    try:
        close(f(x), [1.0, 1.0])
        LAYER_GAIN = 2.0
        close(f(x), [2.0, 2.0])
        for k in range(10):        # keeps changing: a graph input after the first change, no retrace each call
            LAYER_GAIN = 3.0 + k
            close(f(x), [3.0 + k] * 2)
        assert f.stats["traces"] == 2
    finally:
        LAYER_GAIN = 1.0


def test_dict_entries_the_code_reads_are_guarded_and_others_are_not():
    cfg = {"scale": 2.0, "epoch": 0}
    f = jg.compile(lambda x: x * cfg["scale"])
    x = jg.ones(2)
    close(f(x), [2.0, 2.0])
    for epoch in range(12):          # an entry the function does not read: no retrace, no recompile limit
        cfg["epoch"] = epoch
        close(f(x), [2.0, 2.0])
    assert f.stats["traces"] == 1
    cfg["scale"] = 3
    close(f(x), [3.0, 3.0])
    assert f.stats["traces"] == 2


def test_attributes_read_only_by_methods_the_step_never_runs_are_not_guarded():
    class Helper:
        def __init__(self):
            self.k, self.calls = 2.0, 0

        def apply(self, x):
            return x * self.k

        def log(self):
            return f"calls: {self.calls}"

    h = Helper()
    f = jg.compile(lambda x: h.apply(x))
    x = jg.ones(2)
    for i in range(12):
        h.calls = i                  # read by log(), which the step never calls
        close(f(x), [2.0, 2.0])
    assert f.stats["traces"] == 1
    h.k = 5                          # read by apply(): guarded
    close(f(x), [5.0, 5.0])
    assert f.stats["traces"] == 2


def test_values_read_by_a_compiled_function_called_inside_another_are_guarded():
    k = 2.0
    inner = jg.compile(lambda x: x * k)
    outer = jg.compile(lambda x: inner(x) + 1)
    x = jg.ones(2)
    close(outer(x), [3.0, 3.0])
    k = 4.0
    close(outer(x), [5.0, 5.0])


def test_dynamic_float_promotes_as_the_python_float_it_stands_for():
    def f(i, x, s):
        return i * s, x * s, x * (s * 2.0 + 1.0), i * (s * 3.0), s * 2.0
    cf = jg.compile(f)
    i, x = jg.arange(3), jg.ones(3, dtype=jg.float64)
    for s in [0.1, 0.2, 0.3]:
        got, want = cf(i, x, s), f(i, x, s)
        for g, w in zip(got, want):
            if isinstance(w, jg.Tensor):
                assert g.dtype is w.dtype
                close(g, w)
            else:
                assert type(g) is float and g == pytest.approx(w)
    assert cf.stats["traces"] == 2


def test_numpy_scalars_and_arrays_read_by_the_trace_are_guarded():
    s = np.float32(2.0)
    table = np.array([1.0, 2.0, 3.0], np.float32)
    f = jg.compile(lambda x: x * s + jg.from_numpy(table))
    x = jg.ones(3)
    close(f(x), [3.0, 4.0, 5.0])
    table[0] = 10.0                  # in place: the graph's constant is stale
    close(f(x), [12.0, 4.0, 5.0])
    s = np.float32(3.0)
    close(f(x), [13.0, 5.0, 6.0])
    assert f.stats["traces"] == 3
    close(f(x), [13.0, 5.0, 6.0])
    assert f.stats["traces"] == 3


def test_attribute_of_a_deeply_nested_module_is_guarded():
    drop = nn.Dropout(0.0)
    m = drop
    for _ in range(7):
        m = nn.Sequential(m)
    f = jg.compile(lambda x: m(x))
    x = jg.ones(4)
    close(f(x), np.ones(4))
    drop.p = 1.0
    close(f(x), np.zeros(4))


def test_a_script_variable_named_like_an_attribute_the_step_uses_is_not_guarded():
    # ``lin.weight`` and ``opt.step()`` name attributes; the script's loop variables of the same names are not
    # read by the step and must not retrace it
    ns = {"jg": jg, "nn": nn}
    exec(textwrap.dedent("""
        lin = nn.Linear(3, 1)
        opt = jg.optim.SGD(lin.parameters(), lr=0.1)

        @jg.compile
        def train(x):
            opt.zero_grad()
            loss = (lin(x) * lin.weight.sum()).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        x = jg.randn(4, 3)
        for step in range(12):
            weight = float(step)
            train(x)
    """), ns)
    assert ns["train"].stats["traces"] <= 2 and ns["train"].stats["eager_fallbacks"] == 0


def test_partial_and_its_function_are_guarded():
    import functools

    def scaled(x, s):
        return x * s * GSCALE
    g = functools.partial(scaled, s=2.0)
    f = jg.compile(lambda x: g(x))
    x = jg.ones(2)
    close(f(x), [4.0, 4.0])
    g = functools.partial(scaled, s=3.0)
    close(f(x), [6.0, 6.0])


def test_argument_sharing_memory_with_state_the_step_writes_matches_eager():
    arr_c, arr_e = np.arange(3.0), np.arange(3.0)
    w_c, w_e = jg.from_numpy(arr_c), jg.from_numpy(arr_e)

    def make(w):
        def f(x):
            w.mul_(2.0)
            return x + 1          # eager: x is w's buffer, already doubled
        return f
    fc, fe = jg.compile(make(w_c)), make(w_e)
    other = jg.ones(3, dtype=jg.float64)
    close(fc(other), fe(other))                            # first call: no aliasing, compiled
    for _ in range(2):
        close(fc(jg.from_numpy(arr_c)), fe(jg.from_numpy(arr_e)))   # the argument is w's array
        close(arr_c, arr_e)
    close(fc(other), fe(other))
    close(arr_c, arr_e)
    assert fc.stats["traces"] == 1       # the same signature: the aliased calls ran eagerly

    # traced first with the aliasing argument: that signature runs eagerly
    arr_c, arr_e = np.arange(3.0), np.arange(3.0)
    w_c, w_e = jg.from_numpy(arr_c), jg.from_numpy(arr_e)
    fc, fe = jg.compile(make(w_c)), make(w_e)
    close(fc(jg.from_numpy(arr_c[::-1])), fe(jg.from_numpy(arr_e[::-1])))
    close(arr_c, arr_e)
    assert fc.stats["eager_fallbacks"] == 1


def test_attribute_read_by_a_bound_method_held_in_a_closure_is_guarded():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def apply(self, x):
            return x * self.k

    m = Scaler().apply
    f = jg.compile(lambda x: m(x))
    x = jg.ones(2)
    close(f(x), [2.0, 2.0])
    m.__self__.k = 7
    close(f(x), [7.0, 7.0])


# ---- issue 31: adversarial inputs -----------------------------------------------------------------------

_READ_ONLY_STEP = """
import sys, numpy as np, jitgrad as jg
path, backend = sys.argv[1], sys.argv[2]
np.save(path, np.arange(4, dtype=np.float32))

def run(f):
    x = jg.from_numpy(np.load(path, mmap_mode="r"))       # a tensor over a read-only mapping
    outs = [f(x).numpy().tolist() for _ in range(3)]
    return outs, x.numpy().tolist(), np.load(path).tolist()

def step(x):
    x.add_(1)
    return x * 2

w = jg.from_numpy(np.load(path, mmap_mode="r"))           # captured state over a read-only mapping

def state_step(x):
    w.mul_(2)
    return x + w

f = jg.compile(step, backend=backend, background=False)
assert run(step) == run(f), (run(step), run(f))
print("same", run(f))
g = jg.compile(state_step, backend=backend, background=False)
for _ in range(2):
    print("state", g(jg.ones(4)).numpy().tolist(), w.numpy().tolist())
print("file", np.load(path).tolist())
"""


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_inplace_write_into_a_read_only_input_copies_on_write_as_eager(backend, tmp_path):
    """Issue 31 item 3: a compiled step that updates in place an input (or captured state) over a read-only array
    (``np.load(mmap_mode="r")``) does what eager mode does (the tensor gets a private copy; the file is never
    written) instead of crashing in generated code.  In a child process: a crash must fail the test, not pytest."""
    r = subprocess.run([sys.executable, "-c", _READ_ONLY_STEP, str(tmp_path / "a.npy"), backend],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    assert "same ([[2.0, 4.0, 6.0, 8.0], [4.0, 6.0, 8.0, 10.0], [6.0, 8.0, 10.0, 12.0]], [3.0, 4.0, 5.0, 6.0], " \
           "[0.0, 1.0, 2.0, 3.0])" in r.stdout, r.stdout
    assert "state [1.0, 3.0, 5.0, 7.0] [0.0, 2.0, 4.0, 6.0]\nstate [1.0, 5.0, 9.0, 13.0] [0.0, 4.0, 8.0, 12.0]" \
        in r.stdout, r.stdout
    assert "file [0.0, 1.0, 2.0, 3.0]" in r.stdout


def test_inplace_write_into_a_read_only_array_raises_as_eager():
    """A read-only plain array (not a mapping): eager mode refuses the write; the compiled step gives the same
    error (its call runs eagerly), never a crash."""
    def step(x):
        x.add_(1)
        return x * 2
    for f in (step, jg.compile(step, backend="numba", background=False)):
        a = np.frombuffer(np.arange(3.0).tobytes())
        with pytest.raises(RuntimeError, match="Please clone\\(\\) the tensor before performing the operation"):
            f(jg.from_numpy(a))
        assert a.tolist() == [0.0, 1.0, 2.0]


class _SlotCfg:
    __slots__ = ("scale",)

    def __init__(self, scale):
        self.scale = scale


_NT = __import__("collections").namedtuple("_NT", "scale")
NT_CFG = _NT(2.0)


def _plain_objects():
    import argparse
    import dataclasses

    @dataclasses.dataclass
    class DC:
        scale: float = 2.0

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        scale: float = 2.0
    return {"namespace": types.SimpleNamespace(scale=2.0), "argparse": argparse.Namespace(scale=2.0),
            "dataclass": DC(), "frozen dataclass": Frozen(), "slots": _SlotCfg(2.0)}


def _set_scale(obj, v):
    object.__setattr__(obj, "scale", v)       # (a frozen dataclass too: a value the step reads changed)


@pytest.mark.parametrize("kind", ["namespace", "argparse", "dataclass", "frozen dataclass", "slots"])
@pytest.mark.parametrize("where", ["closure", "getattr", "nested", "argument"])
def test_attributes_of_plain_objects_are_guarded(kind, where):
    """Issue 31 item 4: a step reading an attribute of any plain object (SimpleNamespace, argparse.Namespace, a
    dataclass, a class with __slots__), from a closure, through getattr(obj, "name"), nested in another, or
    passed as an argument, retraces when the value changes (torch.compile guards them)."""
    cfg = _plain_objects()[kind]
    outer = types.SimpleNamespace(inner=cfg)
    steps = {"closure": lambda x: x * cfg.scale, "getattr": lambda x: x * getattr(cfg, "scale"),
             "nested": lambda x: x * outer.inner.scale, "argument": lambda x, c: x * c.scale}
    f = jg.compile(steps[where], backend="interpret")
    x = jg.ones(2)
    call = (lambda: f(x, cfg)) if where == "argument" else (lambda: f(x))
    close(call(), [2.0, 2.0])
    _set_scale(cfg, 3.0)
    close(call(), [3.0, 3.0])
    close(call(), [3.0, 3.0])
    assert f.stats["traces"] == 2


def test_named_tuple_global_is_guarded_by_value():
    global NT_CFG
    f = jg.compile(lambda x: x * NT_CFG.scale, backend="interpret")
    try:
        close(f(jg.ones(2)), [2.0, 2.0])
        NT_CFG = _NT(3.0)
        close(f(jg.ones(2)), [3.0, 3.0])
        NT_CFG = _NT(3.0)           # another tuple, the same values: no retrace
        f(jg.ones(2))
        assert f.stats["traces"] == 2
    finally:
        NT_CFG = _NT(2.0)


def test_a_new_argument_object_each_call_is_never_confused_with_a_freed_one():
    """Argument objects that cannot be hashed are keyed by identity: the entry holds the object, so a new one
    never reuses a freed one's id and its key."""
    f = jg.compile(lambda x, c: x * c.scale, backend="interpret")
    x = jg.ones(2)
    for v in (2.0, 3.0, 4.0):
        close(f(x, types.SimpleNamespace(scale=v)), [v, v])


def test_generator_functions_are_refused_naming_them():
    """Issue 31 item 5: a generator's body runs after the call, so a trace cannot capture it (a replay yielded
    nothing): jg.compile refuses generator, async generator and coroutine functions, bound methods and partials
    of them included, and a step that returns a generator, each error naming the function."""
    import functools

    def batches(x):
        for k in range(2):
            yield x * k

    async def later(x):
        return x

    async def agen(x):
        yield x

    class Loader:
        def each(self, x):
            yield x
    for fn, name, kind in ((batches, "batches", "generator"), (Loader().each, "Loader.each", "generator"),
                           (functools.partial(batches, jg.ones(1)), "batches", "generator"),
                           (later, "later", "coroutine"), (agen, "agen", "async generator")):
        with pytest.raises(TypeError, match=f"{name} is a{'n' if kind[0] == 'a' else ''} {kind} function"):
            jg.compile(fn)

    def lazy(x):
        return (x * k for k in range(2))
    f = jg.compile(lazy, backend="interpret")
    with pytest.raises(TypeError, match="lazy returned a generator"):
        f(jg.ones(2))
    assert [float(t.sum()) for t in lazy(jg.ones(2))] == [0.0, 2.0]     # eagerly it is an ordinary generator
