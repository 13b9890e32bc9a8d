"""The flat per-op entry points (runtime/flat_bind.py, issue 28): a repeated call builds exactly what the general
path (``dispatch._bind`` / ``_record``) builds, hands every other call to it, and costs fewer Python calls (counted,
never timed); each entry, and ``_record``, is generated from one template (runtime/entry_source.py)."""
import builtins
import dis
import inspect
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.runtime import dispatch, flat_bind
from jitgrad.runtime.entry_source import flat_source, record_source
from jitgrad.runtime.generated_code import source_of
from jitgrad.runtime.flat_bind import flat_entry, installed
from jitgrad.ir.ops import OPS
from test_eager_overhead import _count


def _data():
    rng = np.random.default_rng(1)
    x = jg.tensor(rng.standard_normal((8, 4), dtype=np.float32), requires_grad=True)
    y = jg.tensor(rng.standard_normal((8, 4), dtype=np.float32))
    w = jg.tensor(rng.standard_normal((4, 4), dtype=np.float32), requires_grad=True)
    t = jg.tensor(rng.integers(0, 4, 8))
    return x, y, w, t


# calls each served by a flat entry point once warm: a tensor pair, a scalar on either side, an op that saves its
# inputs (mul), one that saves its output (tanh), a Python impl (relu), matmul, params ops (sum, layer_norm), the
# loss
CALLS = {
    "x + y": lambda x, y, w, t: x + y,
    "2.0 - x": lambda x, y, w, t: 2.0 - x,
    "x * 3": lambda x, y, w, t: x * 3,
    "x * y": lambda x, y, w, t: x * y,
    "x.tanh()": lambda x, y, w, t: x.tanh(),
    "relu(x)": lambda x, y, w, t: jg.relu(x),
    "x @ w": lambda x, y, w, t: x @ w,
    "x.sum()": lambda x, y, w, t: x.sum(),
    "cross_entropy": lambda x, y, w, t: F.cross_entropy(x @ w, t),
    "layer_norm": lambda x, y, w, t: F.layer_norm(x, (4,)),
}

_NODE_FIELDS = ("needs_grad", "shapes", "dtypes", "params", "out_meta", "torch_name", "view_args", "_freed")


def _described(r):
    """What a result's graph holds, comparable across two runs on the same leaves."""
    node = r.grad_fn
    edges = [(type(f).__name__, f.name() if f is not None else None, nr) for f, nr in node.next_functions]
    fields = {k: getattr(node, k) for k in _NODE_FIELDS}
    saved = [None if a is None else (a if not isinstance(a, jg.Tensor) else ("tensor", a._data.tobytes()))
             for a in node.inputs]
    outs = [None if o is None else o._data.tobytes() for o in node.outputs]
    return (node.name(), edges, fields, saved, node.versions, outs, node.out_versions, node.loc.file,
            r._data.tobytes(), r._data.dtype, r.requires_grad, r.is_leaf)


@pytest.mark.parametrize("name", list(CALLS))
def test_flat_entry_builds_the_general_paths_node(name, monkeypatch):
    x, y, w, t = _data()
    call = CALLS[name]
    call(x, y, w, t)        # (the signature's first call fills dispatch's cache)
    flat = call(x, y, w, t)
    seen = _described(flat)
    flat.sum().backward() if flat.ndim else flat.backward()
    grads = [x.grad.numpy().copy(), None if w.grad is None else w.grad.numpy().copy()]
    x.grad = w.grad = None
    real = dispatch._bind
    monkeypatch.setattr(dispatch, "_bind", lambda op, args, params: real(op, args, params))    # the general path
    general = call(x, y, w, t)
    want = _described(general)
    assert seen == want
    general.sum().backward() if general.ndim else general.backward()
    np.testing.assert_array_equal(grads[0], x.grad.numpy())
    if grads[1] is not None:
        np.testing.assert_array_equal(grads[1], w.grad.numpy())


def _stale(x):
    """A view whose base was written in place (recorded) after it was made: its use refreshes its history."""
    h = x * 1.0
    v = h[:, :2]
    h.mul_(2.0)
    return v


def _before_history(x):
    """A view made before its base had a history (the base gets one by an in-place op with a tensor that requires
    grad): its use adopts the base's history."""
    h = jg.zeros((8, 4))
    v = h[:, 1:3]
    h.add_(x)
    return v


def _no_grad_view(y):
    """A view made in no_grad of a tensor that requires no grad: a plain Tensor marked as made there."""
    with jg.no_grad():
        return y[:, :2]


def _hooked(x):
    v = x.T
    v.register_hook(lambda g: g * 3.0)
    return v


# view inputs of each kind (the last op is the one under test; the views are made by view ops, on the general path)
VIEW_CALLS = {
    "transpose of a leaf @": (lambda x, y, w: x @ w.T, "matmul"),
    "transpose + its leaf": (lambda x, y, w: w.T + w, "add"),
    "slice * slice": (lambda x, y, w: x[:, :2] * y[:, 2:], "mul"),
    "slice * 3": (lambda x, y, w: x[:, 1:] * 3, "mul"),
    "2.0 - select": (lambda x, y, w: 2.0 - x[1], "sub"),
    "expand * y": (lambda x, y, w: x[:, :1].expand(8, 4) * y, "mul"),
    "y * broadcast row": (lambda x, y, w: y * x[0].expand(8, 4), "mul"),
    "tanh of a transpose": (lambda x, y, w: x.T.tanh(), "tanh"),
    "view of a view, sum": (lambda x, y, w: x.T[1:].sum(), "sum"),
    "stale view * slice": (lambda x, y, w: _stale(x) * y[:, :2], "mul"),
    "stale view tanh": (lambda x, y, w: _stale(x).tanh(), "tanh"),
    "view before history * 2": (lambda x, y, w: _before_history(x) * 2.0, "mul"),
    "2.0 * view before history": (lambda x, y, w: 2.0 * _before_history(x), "mul"),
    "hooked view * 2": (lambda x, y, w: _hooked(x) * 2.0, "mul"),
    "no_grad view * slice": (lambda x, y, w: _no_grad_view(y) * x[:, 2:], "mul"),
}


@pytest.mark.parametrize("name", list(VIEW_CALLS))
def test_flat_entry_serves_view_inputs_as_the_general_path(name, monkeypatch):
    """A view input stays on the flat path (issue 28) and gets the general path's node, edges (a stale view's history
    refreshed first), saved versions and gradients."""
    x, y, w, _ = _data()
    call, op = VIEW_CALLS[name]
    call(x, y, w)           # (the signature's first call fills dispatch's cache)
    x.grad = w.grad = None
    recorded = []
    real_record = dispatch._record
    monkeypatch.setattr(dispatch, "_record", lambda op, params, args, hit, t: recorded.append(op.name) or
                        real_record(op, params, args, hit, t))
    flat = call(x, y, w)
    assert op not in recorded, recorded       # (the view ops, and a stale view's refresh, record on the general path)
    monkeypatch.setattr(dispatch, "_record", real_record)
    seen = _described(flat)
    flat.sum().backward() if flat.ndim else flat.backward()
    grads = [None if g is None else g.numpy().copy() for g in (x.grad, w.grad)]
    x.grad = w.grad = None
    real = dispatch._bind
    monkeypatch.setattr(dispatch, "_bind", lambda op, args, params: real(op, args, params))    # the general path
    general = call(x, y, w)
    assert _described(general) == seen
    general.sum().backward() if general.ndim else general.backward()
    for g, t in zip(grads, (x.grad, w.grad)):
        assert (g is None) == (t is None)
        if g is not None:
            np.testing.assert_array_equal(g, t.numpy())


def test_flat_entry_on_views_keeps_versions_and_hooks():
    """A view saved by a flat entry is checked at backward against its base's version; a hook on a view runs; a stale
    view's refreshed node reaches the base's new history."""
    x, y, w, _ = _data()
    for _ in range(2):
        h = x * 1.0
        v = h[:, :2]
        r = v * v                 # (mul saves its inputs: the view, at its base's version)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        r.sum().backward()
    for _ in range(2):
        r = _hooked(x) * 2.0
    r.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((8, 4), 6.0, np.float32))
    x.grad = None
    for _ in range(2):
        v = _stale(x)
        r = v * 1.0
    assert r.grad_fn.next_functions[0][0] is v.grad_fn and v.grad_fn.name() == "AsStridedBackward0"
    r.sum().backward()
    want = np.zeros((8, 4), np.float32)
    want[:, :2] = 2.0
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_flat_entry_view_input_python_calls():
    """``x.T @ y`` and ``x[:, :4] * 2`` with grad: the op on the view takes its flat entry (10 -> 8 and 12 -> 10 Python
    calls with the view op's bind; 5 -> 3 for the op on a view made before)."""
    x, y, _, _ = _data()
    xt, xs = x.T, x[:, :2]
    counts = {}
    for name, f in {"x.T @ x": lambda: x.T @ x, "x[:, :2] * 2": lambda: x[:, :2] * 2, "xt @ x": lambda: xt @ x,
                    "xs * 2": lambda: xs * 2}.items():
        f()
        counts[name] = _count(f)[0]
    assert counts == {"x.T @ x": 8, "x[:, :2] * 2": 10, "xt @ x": 3, "xs * 2": 3}, counts


def test_flat_entry_records_the_users_line_and_every_slot():
    x, y, _, _ = _data()
    x * y
    node = (x * y).grad_fn
    assert node.loc.file == __file__ and node.loc.line > 0
    assert node.seq > 0 and node._x is None and node.plans is not None


def test_flat_entry_hands_other_calls_to_the_general_path():
    """Inference tensors and modes, anomaly mode and no_grad keep the general path's semantics."""
    x, y, w, _ = _data()
    with jg.no_grad():
        for _ in range(2):
            r = x + y
    assert r.grad_fn is None and not r.requires_grad
    with jg.inference_mode():
        for _ in range(2):
            r = x * y
    assert r.is_inference() and r.grad_fn is None
    with jg.autograd.detect_anomaly():
        r = x.tanh()
    assert r.grad_fn.stack is not None      # anomaly mode's forward stack (the general path records it)
    seen = []
    real = dispatch._bind
    dispatch._bind = lambda op, args, params: seen.append(op.name) or real(op, args, params)
    try:
        x + y, 2.0 * x, x.sum()
    finally:
        dispatch._bind = real
    assert seen == ["add", "mul", "sum"]


def test_flat_entry_raises_the_ops_error_with_the_users_line():
    q = jg.tensor(np.full(3, 3e38, np.float32))
    q * 2.0
    with np.errstate(over="raise"), pytest.raises(RuntimeError, match="overflow") as e:
        q * 10.0
    assert "test_flat_bind.py" in str(e.value)


def test_view_ops_have_no_flat_entry():
    assert flat_entry(OPS["permute"], 1) is None and flat_entry(OPS["add"], 2) is flat_entry(OPS["add"], 2)


def test_cross_entropy_keeps_torchs_nodes_and_checks():
    x, _, w, t = _data()
    loss = F.cross_entropy(x @ w, t)
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert loss.grad_fn.next_functions[0][0].name() == "LogSoftmaxBackward0"
    ref = F.nll_loss(F.log_softmax(x @ w, 1), t)
    np.testing.assert_array_equal(loss.detach().numpy(), ref.detach().numpy())
    for red in ("sum", "none"):
        np.testing.assert_array_equal(F.cross_entropy(x @ w, t, reduction=red).detach().numpy(),
                                      F.nll_loss(F.log_softmax(x @ w, 1), t, reduction=red).detach().numpy())
    with pytest.raises(IndexError, match="Target 9 is out of bounds"):
        F.cross_entropy(x, jg.tensor(np.array([0, 1, 2, 3, 9, 0, 1, 2])))
    with pytest.raises(RuntimeError, match="expected target of shape"):
        F.cross_entropy(x, jg.tensor(np.zeros(5, np.int64)))
    with pytest.raises(RuntimeError, match="expected target of dtype int64"):
        F.cross_entropy(x, jg.tensor(np.zeros(8, bool)))
    with pytest.raises(ValueError):
        F.cross_entropy(x, t, reduction="bogus")
    ignored = jg.tensor(np.array([0, 1, -100, 3, 2, 0, 1, 2]))
    np.testing.assert_array_equal(F.cross_entropy(x, ignored).detach().numpy(),
                                  F.nll_loss(F.log_softmax(x, 1), ignored).detach().numpy())


def test_cross_entropy_forward_python_calls():
    """The lambda, cross_entropy, log_softmax's and nll_loss's flat entry points and their impls (log_softmax's
    shift inline in its impl since 7 -> 6): 13 Python calls when it went through _cross_entropy, _nll_loss, bind,
    _bind and _record twice."""
    x, _, w, t = _data()
    z = (x @ w).detach().requires_grad_()
    F.cross_entropy(z, t)
    calls, c_calls = _count(lambda: F.cross_entropy(z, t))
    assert calls <= 6, f"cross_entropy made {calls} Python calls (6 when this budget was set)"
    assert c_calls <= 28, f"cross_entropy made {c_calls} C calls (28 when this budget was set)"


def _globals_read(fn):
    """The global names ``fn``'s code reads (its text's free names, resolved in the module it serves)."""
    return {i.argval for i in dis.get_instructions(fn) if i.opname == "LOAD_GLOBAL"}


def test_every_op_with_a_flat_entry_gets_a_generated_one():
    """Every primitive but the views gets its flat entries over one and two arguments from the one template
    (entry_source.flat_source, rendered from its table row); every name the text reads is flat_bind's or a builtin,
    and the row decides the branches the text holds."""
    made = dict(flat_bind._ENTRIES)       # (the entries the published surface made when jitgrad was imported)
    assert (OPS["add"], 2) in made and (OPS["tanh"], 1) in made and (OPS["nll_loss"], 2) in made
    for (op, arity), f in made.items():
        assert installed(op, arity) is f and source_of(f) == flat_source(op, arity), op.name
    for op in OPS.values():
        for arity in (1, 2):
            f = flat_entry(op, arity)
            if op.view:
                assert f is None
                continue
            text = source_of(installed(op, arity))
            assert text == flat_source(op, arity) and f.__name__ == f"flat_{op.name}", op.name
            assert inspect.getsource(f) in text
            missing = {n for n in _globals_read(f) if n not in f.__globals__ and not hasattr(builtins, n)}
            assert not missing, (op.name, arity, missing)
            records = arity == 2 or 0 not in op.nondiff_inputs     # (else the entry never records a node)
            assert ("node = _new(OpNode)" in text) == records, op.name
            assert ("saved_inputs(_op" in text) == (records and bool(op.saves_in)), op.name
            assert ("so = _new(Tensor)" in text) == (records and bool(op.saves_out)), op.name
            if arity == 2:
                assert ("if db is not b:" in text) == (1 not in op.nondiff_inputs), op.name


def test_operators_call_the_generated_entries():
    """Tensor's operators hold their primitive's entry, whose generated code is put in place at its first call (the
    text compiled then, not at import); each op's entry has a code object of its own."""
    x = jg.tensor(np.ones(3, np.float32), requires_grad=True)
    x - x
    cells = [c.cell_contents for c in jg.Tensor.__sub__.__closure__]
    assert flat_entry(OPS["sub"], 2) in cells and source_of(flat_entry(OPS["sub"], 2)) == flat_source(OPS["sub"], 2)
    x + x
    assert flat_entry(OPS["add"], 2).__code__ is not flat_entry(OPS["sub"], 2).__code__
    assert flat_entry(OPS["add"], 2).__code__.co_code == flat_entry(OPS["sub"], 2).__code__.co_code   # (one text)
    assert (x - x).grad_fn.loc.file == __file__


def test_record_is_rendered_from_the_same_template():
    """dispatch._record's text is entry_source's, and shares the flat entries' node, saved-output and user-line
    fragments (the same lines, in both texts)."""
    text = source_of(dispatch._record)
    assert text == record_source()
    missing = {n for n in _globals_read(dispatch._record)
               if n not in dispatch.__dict__ and not hasattr(builtins, n)}
    assert not missing, missing
    flat = source_of(installed(OPS["tanh"], 1))     # (its code compiled now where no tanh ran before)
    for line in ("node.seq = _next(_node_seq)", "so.grad_fn = so._grad = so._base = so._hooks = so._acc = "
                 "so._view_origin = None", "node._loc = (code, f.f_lasti)", "node.plans = hit[11]"):
        assert line in text and line in flat, line


def test_the_printer_shows_a_generated_entry(capsys):
    from jitgrad.__main__ import main
    assert main(["entry", "mul"]) == 0
    out = capsys.readouterr().out
    assert "def flat_binary(a, b, params=None):" in out and "saved_inputs(_op, 2, needs)" in out
    assert main(["entry", "record"]) == 0
    assert "def _record(op, params, args, hit, t):" in capsys.readouterr().out
    with pytest.raises(ValueError, match="view op"):
        main(["entry", "permute", "1"])


def test_a_traceback_through_an_entry_shows_its_generated_line():
    q = jg.tensor(np.full(3, 3e38, np.float32))
    q * 2.0
    with np.errstate(over="raise"), pytest.raises(RuntimeError) as e:
        q * 10.0
    text = "".join(traceback.format_exception(e.value))
    assert "in flat_mul" in text and "raise op_error(_op, hit[1], e) from None" in text


_OVERFLOW = ("import traceback\n"
             "import numpy as np, jitgrad as jg\n"
             "q = jg.tensor(np.full(3, 3e38, np.float32))\n"
             "q * 2.0\n"
             "try:\n"
             "    with np.errstate(over='raise'):\n"
             "        q * 10.0\n"
             "except RuntimeError:\n"
             "    traceback.print_exc()\n"
             "with np.errstate(over='raise'):\n"
             "    q * 10.0\n")


def _overflow_script(tmp_path, cache):
    script = tmp_path / "overflow.py"
    script.write_text(_OVERFLOW)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "JITGRAD_CACHE_DIR": str(cache)})
    assert r.returncode == 1 and r.stderr.count("RuntimeError: mul: overflow") == 2, r.stderr
    return r.stderr.splitlines()


def test_an_uncaught_error_through_an_entry_shows_its_generated_line(tmp_path):
    """CPython 3.11's default hook prints a script's uncaught exception reading each frame's line from its file, not
    from ``linecache``: the generated entry's text is in a file of the cache directory (``generated_code``), so the
    line shows, there and in ``traceback.print_exc()``; jitgrad's error still names the user's line."""
    cache = tmp_path / "cache"
    lines = _overflow_script(tmp_path, cache)
    at = [n for n, line in enumerate(lines) if line.endswith(", in flat_mul")]
    assert len(at) == 2 and all(lines[n + 1].strip() == "raise op_error(_op, hit[1], e) from None" for n in at), lines
    assert all(str(cache / "generated") in lines[n] for n in at), lines
    assert sum(line.endswith("overflow.py:7 in <module>: q * 10.0") for line in lines) == 1, lines
    assert sum(line.endswith("overflow.py:11 in <module>: q * 10.0") for line in lines) == 1, lines
    assert (cache / "generated").stat().st_mode & 0o777 == 0o700
    files = sorted((cache / "generated").iterdir())
    assert files and all(f.name.endswith(".py") for f in files)
    # a second process finds each text in place and writes nothing
    stamps = {f: f.stat().st_mtime_ns for f in files}
    _overflow_script(tmp_path, cache)
    assert sorted((cache / "generated").iterdir()) == files and all(f.stat().st_mtime_ns == stamps[f] for f in files)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_directory_keeps_entries_in_memory(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o500)
    lines = _overflow_script(tmp_path, cache)
    assert not any(str(cache) in line for line in lines) and not list(cache.iterdir())
    assert sum(line.endswith(", in flat_mul") for line in lines) == 2, lines


def test_an_unusable_cache_directory_keeps_entries_in_memory(tmp_path):
    # the cache directory is a file, or generated/ inside it is a link: nothing is written, nothing there is touched
    (tmp_path / "file").write_text("not a directory")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir()
    (cache / "generated").symlink_to(tmp_path / "elsewhere")
    for c in (tmp_path / "file", cache):
        lines = _overflow_script(tmp_path, c)
        assert sum(line.endswith(", in flat_mul") for line in lines) == 2, lines
        assert not any("/generated/" in line for line in lines), lines
    assert (tmp_path / "file").read_text() == "not a directory" and not list((tmp_path / "elsewhere").iterdir())


def test_import_compiles_only_records_text():
    """``import jitgrad`` compiles one generated text (dispatch._record's); an entry's text is compiled at its first
    call (the parser's work for the ~7 texts the published surface uses is ~50M instructions, +6% on an import)."""
    code = ("import jitgrad as jg, numpy as np\n"
            "from jitgrad.runtime import generated_code as E\n"
            "n = len(E.SOURCES)\n"
            "x = jg.tensor(np.ones(2, np.float32), requires_grad=True)\n"
            "x * x, x * x, x + x\n"
            "print(n, len(E.SOURCES))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.stdout.split() == ["1", "3"], r.stdout      # _record's; then mul's and add's
