"""jg.autograd.profiler: profile, key_averages/table, record_function, chrome trace, emit_nvtx, load_nvprof."""
import json
import threading
import warnings

import pytest

import jitgrad as jg
from jitgrad.autograd import profiler
from jitgrad.autograd import profiler as rprof
from jitgrad.runtime import profiler_state


def _counts(prof, **kw):
    return {e.key: e.count for e in prof.key_averages(**kw)}


def _pow_loop(n=100, **kw):
    x = jg.randn((1, 1), requires_grad=True)
    with profiler.profile(**kw) as prof:
        for _ in range(n):  # any normal python code, really!
            y = x ** 2
            y.backward()
    return prof


# --- the seed's two examples ------------------------------------------------------------------------
def test_seed_example_pow_backward_loop():
    prof = _pow_loop()
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    for name in ("pow", "PowBackward0", "AccumulateGrad", "mul"):
        assert name in table
    for col in ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"):
        assert col in table
    assert "Self CPU time total:" in table
    # as in torch: pow 100 forward + 100 inside PowBackward0 (x ** 1), mul 2 per backward (grad * 2 * x**1)
    assert _counts(prof) == {"pow": 200, "PowBackward0": 100, "mul": 200, "AccumulateGrad": 100}


def test_seed_example_record_function_label():
    x = jg.randn((1, 1), requires_grad=True)
    with jg.autograd.profiler.profile() as prof:
        y = x ** 2
        with jg.autograd.profiler.record_function("label-z"):  # label the block
            z = y ** 3
        y.backward()
    assert z.shape == (1, 1)
    assert _counts(prof) == {"pow": 3, "label-z": 1, "PowBackward0": 1, "mul": 2, "AccumulateGrad": 1}
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    assert "label-z" in table
    label = next(e for e in prof.function_events if e.name == "label-z")
    assert [c.name for c in label.children] == ["pow"]
    assert label.children[0].parent is label
    assert label.cat == "user_annotation"


# --- events, nesting, self time --------------------------------------------------------------------
def test_backward_functions_nest_their_ops_and_self_time():
    prof = _pow_loop(3)
    evs = prof.function_events
    assert [e.id for e in evs] == sorted(e.id for e in evs)
    starts = [e.start for e in evs]
    assert starts == sorted(starts)
    for e in evs:
        assert e.end >= e.start
        assert e.self_cpu_time_total <= e.cpu_time_total + 1e-9
        assert e.self_cpu_time_total >= -1e-9
        assert e.count == 1 and e.key == e.name and e.cpu_time == e.cpu_time_total
        assert e.thread == threading.get_native_id()
        for c in e.children:
            assert c.parent is e and e.start <= c.start <= c.end <= e.end
        assert abs(e.self_cpu_time_total - (e.cpu_time_total - sum(c.cpu_time_total for c in e.children))) < 1e-6
    backs = [e for e in evs if e.name == "PowBackward0"]
    assert len(backs) == 3
    for b in backs:
        assert sorted(c.name for c in b.children) == ["mul", "mul", "pow"]
        assert b.parent is None
    top_level = [e.name for e in evs if e.parent is None]
    assert top_level == ["pow", "PowBackward0", "AccumulateGrad"] * 3
    assert abs(prof.self_cpu_time_total - sum(e.self_cpu_time_total for e in evs)) < 1e-6
    assert prof.self_cpu_time_total <= sum(e.cpu_time_total for e in evs) + 1e-6


def test_event_names_for_several_ops():
    a = jg.randn((2, 3), requires_grad=True)
    b = jg.randn((3, 4), requires_grad=True)
    with profiler.profile() as prof:
        (a @ b).tanh().sum().backward()
    names = {e.name for e in prof.function_events}
    assert {"matmul", "tanh", "sum", "MmBackward0", "TanhBackward0", "SumBackward0", "AccumulateGrad"} <= names
    assert _counts(prof)["AccumulateGrad"] == 2


def test_key_averages_sums_and_averages():
    prof = _pow_loop(10)
    avgs = prof.key_averages()
    assert isinstance(avgs, profiler.EventList)
    assert all(isinstance(a, profiler.FunctionEventAvg) for a in avgs)
    assert [a.key for a in avgs] == ["pow", "PowBackward0", "mul", "AccumulateGrad"]   # first-seen order
    by = {a.key: a for a in avgs}
    pows = [e for e in prof.function_events if e.name == "pow"]
    assert abs(by["pow"].cpu_time_total - sum(e.cpu_time_total for e in pows)) < 1e-6
    assert abs(by["pow"].cpu_time - by["pow"].cpu_time_total / 20) < 1e-9
    assert abs(by["PowBackward0"].self_cpu_time - by["PowBackward0"].self_cpu_time_total / 10) < 1e-9
    for a in avgs:
        assert a.self_cpu_time_total <= a.cpu_time_total + 1e-6
        assert a.input_shapes is None
        assert a.cuda_time_total == 0 and a.self_cuda_time_total == 0


def test_total_average():
    prof = _pow_loop(5)
    tot = prof.total_average()
    assert isinstance(tot, profiler.FunctionEventAvg)
    assert tot.key == "Total"
    assert tot.count == len(prof.function_events) == 5 * 6
    assert abs(tot.self_cpu_time_total - prof.self_cpu_time_total) < 1e-6
    assert abs(tot.cpu_time_total - sum(e.cpu_time_total for e in prof.function_events)) < 1e-6
    assert prof.key_averages().total_average().count == tot.count


# --- shapes --------------------------------------------------------------------------------------
def test_record_shapes_and_group_by_input_shape():
    a = jg.randn((2, 3))
    b = jg.randn((4, 5))
    with profiler.profile(record_shapes=True) as prof:
        a * a
        a * 2.0
        b * b
        b * b
    muls = [e for e in prof.function_events if e.name == "mul"]
    assert [e.input_shapes for e in muls] == [[[2, 3], [2, 3]], [[2, 3], []], [[4, 5], [4, 5]], [[4, 5], [4, 5]]]
    assert _counts(prof) == {"mul": 4}
    grouped = prof.key_averages(group_by_input_shape=True)
    assert [(g.key, g.input_shapes, g.count) for g in grouped] == [
        ("mul", [[2, 3], [2, 3]], 1), ("mul", [[2, 3], []], 1), ("mul", [[4, 5], [4, 5]], 2)]
    table = grouped.table()
    assert "Input Shapes" in table and "[[4, 5], [4, 5]]" in table and "[[2, 3], []]" in table
    assert "Input Shapes" not in prof.key_averages().table()


def test_record_shapes_of_backward_and_accumulate():
    x = jg.randn((3, 2), requires_grad=True)
    with profiler.profile(record_shapes=True) as prof:
        x.tanh().sum().backward()
    shapes = {e.name: e.input_shapes for e in prof.function_events}
    assert shapes["AccumulateGrad"] == [[3, 2]]
    assert shapes["tanh"] == [[3, 2]]
    assert shapes["TanhBackward0"] == [[3, 2]]


def test_no_shapes_without_record_shapes():
    x = jg.randn((3, 2))
    with profiler.profile() as prof:
        x * x
    assert prof.function_events[0].input_shapes == []
    assert "Input Shapes" not in prof.key_averages(group_by_input_shape=True).table()


# --- table ---------------------------------------------------------------------------------------
def _rows(table):
    lines = table.splitlines()
    seps = [i for i, l in enumerate(lines) if l.startswith("---")]
    return [l.split()[0] for l in lines[seps[1] + 1:seps[2]]]


def test_table_sort_by_and_row_limit():
    x = jg.randn((2, 2), requires_grad=True)
    with profiler.profile() as prof:
        for _ in range(3):
            x * x
        x.exp()
        for _ in range(2):
            x + x
    avgs = prof.key_averages()
    assert _rows(avgs.table()) == ["mul", "exp", "add"]                 # recording order by default
    assert _rows(avgs.table(sort_by="count")) == ["mul", "add", "exp"]
    assert _rows(avgs.table(sort_by="count", row_limit=2)) == ["mul", "add"]
    assert _rows(avgs.table(row_limit=1)) == ["mul"]
    assert _rows(avgs.table(row_limit=-1)) == ["mul", "exp", "add"]
    for key in ("cpu_time", "cpu_time_total", "self_cpu_time_total", "cuda_time", "cuda_time_total",
                "self_cuda_time_total", "cpu_memory_usage"):
        rows = _rows(avgs.table(sort_by=key))
        assert sorted(rows) == ["add", "exp", "mul"]
        if key.startswith(("cuda", "self_cuda")):
            assert rows == ["mul", "exp", "add"]                         # all zero: stable order
        else:
            vals = [getattr(next(a for a in avgs if a.key == r), key) for r in rows]
            assert vals == sorted(vals, reverse=True)
    with pytest.raises(ValueError, match="sort_by"):
        avgs.table(sort_by="bogus")


def test_table_header_counts_and_footer():
    prof = _pow_loop(4)
    t = prof.key_averages().table(header="My profile")
    lines = t.splitlines()
    assert lines[0].startswith("=====") and lines[1] == "My profile"
    assert lines[-1].startswith("Self CPU time total: ")
    assert lines[-1].endswith(("us", "ms", "s"))
    row = next(l for l in lines if l.startswith("PowBackward0"))
    assert row.split()[-1] == "4"
    assert profiler.EventList().table() == ""


def test_str_of_profile_is_the_raw_table():
    prof = _pow_loop(2)
    s = str(prof)
    assert s == prof.table() == prof.function_events.table()
    # inside PowBackward0, torch's own order: grad * (exponent * self.pow(exponent - 1)) runs pow, mul, mul
    assert _rows(s) == ["pow", "PowBackward0", "pow", "mul", "mul", "AccumulateGrad"] * 2


def test_time_format_like_torch():
    assert rprof._fmt_time(691.816) == "691.816us"
    assert rprof._fmt_time(32048.0) == "32.048ms"
    assert rprof._fmt_time(2.5e6) == "2.500s"
    assert rprof._fmt_mem(512) == "512 b" and rprof._fmt_mem(2048) == "2.00 Kb"


def test_long_names_are_truncated():
    with profiler.profile() as prof:
        with profiler.record_function("k" * 100):
            pass
    t = prof.table()
    assert "k" * 52 + "..." in t and "k" * 53 not in t


# --- chrome trace --------------------------------------------------------------------------------
def _check_nested(events):
    by_tid = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for spans in by_tid.values():
        stack = []
        for s, t in sorted(spans, key=lambda p: (p[0], -p[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack:
                assert t <= stack[-1], "events overlap without nesting"
            stack.append(t)


def test_export_chrome_trace(tmp_path):
    x = jg.randn((2, 2), requires_grad=True)
    with profiler.profile(record_shapes=True) as prof:
        with profiler.record_function("step", args="it=0"):
            (x * x).tanh().sum().backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        data = json.load(f)
    evs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(evs) == len(prof.function_events)
    for e in evs:
        assert set(e) >= {"name", "ph", "ts", "dur", "pid", "tid", "cat", "args"}
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
    names = {e["name"] for e in evs}
    assert {"step", "mul", "tanh", "sum", "TanhBackward0", "AccumulateGrad"} <= names
    mul = next(e for e in evs if e["name"] == "mul")
    assert mul["args"]["Input Shapes"] == [[2, 2], [2, 2]]
    step = next(e for e in evs if e["name"] == "step")
    assert step["args"]["Record function args"] == "it=0" and step["cat"] == "user_annotation"
    for e in evs:                                   # everything happened inside "step"
        assert step["ts"] <= e["ts"] + 1e-6 and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-6
    _check_nested(evs)
    with pytest.raises(TypeError):
        prof.key_averages().export_chrome_trace(str(tmp_path / "bad.json"))


def test_chrome_trace_of_many_events_nests(tmp_path):
    prof = _pow_loop(50)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    evs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(evs) == 300
    _check_nested(evs)


# --- record_function -----------------------------------------------------------------------------
def test_record_function_as_decorator():
    @profiler.record_function("my_step")
    def step(t):
        """doc kept"""
        return (t * t).sum()

    x = jg.randn((3,))
    assert step.__name__ == "step" and step.__doc__ == "doc kept"
    assert float(step(x)) == pytest.approx(float((x * x).sum()))          # no profiler: plain call
    with profiler.profile() as prof:
        step(x)
        step(x)
    assert _counts(prof) == {"my_step": 2, "mul": 2, "sum": 2}
    for e in prof.function_events:
        if e.name == "my_step":
            assert [c.name for c in e.children] == ["mul", "sum"]


def test_record_function_without_profiler_records_nothing():
    with profiler.record_function("idle") as rf:
        jg.ones(2) * 2
    assert rf.name == "idle"
    assert profiler_state.STATE.active is None


def test_record_function_closes_on_exception():
    with profiler.profile() as prof:
        with pytest.raises(ZeroDivisionError):
            with profiler.record_function("boom"):
                1 / 0
        jg.ones(2) * 2
    ev = {e.name: e for e in prof.function_events}
    assert ev["mul"].parent is None and ev["boom"].children == []


def test_failing_op_is_closed_and_raises():
    with profiler.profile() as prof:
        with pytest.raises(RuntimeError):
            jg.ones((2, 3)) @ jg.ones((2, 3))
        jg.ones(2) + 1
    evs = prof.function_events
    assert "matmul" in [e.name for e in evs]
    assert all(e.parent is None for e in evs)


# --- profile state -------------------------------------------------------------------------------
def test_active_only_inside_profile():
    assert profiler_state.STATE.active is None
    with profiler.profile() as prof:
        assert profiler_state.STATE.active is prof
        with pytest.raises(RuntimeError, match="didn't finish"):
            prof.function_events
    assert profiler_state.STATE.active is None
    with pytest.raises(ValueError):
        with profiler.profile():
            raise ValueError("x")
    assert profiler_state.STATE.active is None


def test_profile_is_not_reentrant():
    p = profiler.profile()
    with p:
        with pytest.raises(RuntimeError, match="reentrant"):
            p.__enter__()
    assert profiler_state.STATE.active is None


def test_nested_profiles():
    x = jg.randn((2,))
    with profiler.profile() as outer:
        x * x
        with profiler.profile(record_shapes=True) as inner:
            assert profiler_state.STATE.active is inner
            x + x
        assert profiler_state.STATE.active is outer
        x.exp()
    assert profiler_state.STATE.active is None
    assert [e.name for e in outer.function_events] == ["mul", "add", "exp"]
    assert [e.name for e in inner.function_events] == ["add"]
    assert inner.function_events[0].input_shapes == [[2], [2]]
    assert outer.function_events[1].input_shapes == []


def test_enabled_false_records_nothing():
    x = jg.randn((2,), requires_grad=True)
    with profiler.profile(enabled=False) as prof:
        assert profiler_state.STATE.active is None
        (x * x).sum().backward()
    assert len(prof.function_events) == 0
    assert prof.key_averages().table() == ""
    assert prof.self_cpu_time_total == 0


def test_use_cuda_warns_once_and_records_cpu(monkeypatch):
    monkeypatch.setattr(rprof, "_CUDA_WARNED", False)
    with pytest.warns(UserWarning, match="CUDA"):
        p1 = profiler.profile(use_cuda=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p2 = profiler.profile(use_cuda=True)
    with p1:
        jg.ones(2) * 2
    with p2:
        pass
    assert _counts(p1) == {"mul": 1}
    assert "CUDA" not in p1.key_averages().table()


def test_profile_options_like_torch():
    x = jg.randn((4, 4), requires_grad=True)
    with jg.autograd.profiler.profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        (x * x).sum().backward()
    ev = {e.name: e for e in prof.function_events}
    assert ev["mul"].self_cpu_memory_usage == 4 * 4 * 4        # one float32 4x4 output
    assert ev["MulBackward0"].cpu_memory_usage >= ev["MulBackward0"].self_cpu_memory_usage
    assert any("test_profiler.py" in s for s in ev["mul"].stack)
    assert "test_profile_options_like_torch" in ev["mul"].stack[0]
    t = prof.key_averages(group_by_stack_n=1).table()
    assert "CPU Mem" in t and "Source Location" in t and "test_profiler.py" in t


def test_events_from_another_thread():
    x = jg.randn((2,))
    with profiler.profile() as prof:
        with profiler.record_function("main"):
            th = threading.Thread(target=lambda: x.exp())
            th.start()
            th.join()
            x * x
    ev = {e.name: e for e in prof.function_events}
    assert ev["exp"].parent is None and ev["exp"].thread != ev["main"].thread
    assert [c.name for c in ev["main"].children] == ["mul"]


def test_events_alias():
    prof = _pow_loop(1)
    assert prof.events() is prof.function_events
    assert "FunctionEvent" in repr(prof.function_events[0])


# --- NVTX / nvprof -------------------------------------------------------------------------------
def test_emit_nvtx_warns_and_is_a_noop():
    x = jg.randn((2,), requires_grad=True)
    with pytest.warns(UserWarning, match="NVTX ranges are not emitted") as rec:
        with profiler.emit_nvtx(record_shapes=True):
            (x * x).sum().backward()
    assert len([w for w in rec if issubclass(w.category, UserWarning)]) == 1
    assert "CUDA" in str(rec[0].message)
    assert x.grad is not None
    assert profiler_state.STATE.active is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with profiler.emit_nvtx(enabled=False):
            pass


def test_load_nvprof_raises(tmp_path):
    path = str(tmp_path / "trace.prof")
    with pytest.raises(RuntimeError, match="nvprof") as ei:
        profiler.load_nvprof(path)
    assert path in str(ei.value)


def test_public_names():
    for n in ("profile", "record_function", "emit_nvtx", "load_nvprof", "EventList", "FunctionEvent",
              "FunctionEventAvg"):
        assert getattr(jg.autograd.profiler, n).__doc__
