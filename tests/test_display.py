"""Notebook display: listings (f.ir, f.fusion_plan, f.source) as str with an HTML view, notebook-cell source
locations, kernel frames left out of forward tracebacks, profiler tables as HTML."""
import html
import linecache
import pickle
import re
import sys
import types
import warnings

import pytest

import jitgrad as jg
from jitgrad.ir.listing import Listing
from jitgrad.ir.graph import SourceLoc, format_graph
from jitgrad.ir.passes import fusion_plan
from jitgrad.runtime.source import format_stack, user_stack

W = jg.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)


def _step(x):
    h = (x @ W).tanh()                         # MARK h
    loss = (h * h + 1.0).sum()                 # MARK loss
    return loss


def _entry(f, *args):
    return f._entry_for(args, {})


def _rows_of(html_text):
    return re.findall(r"<tr>(.*?)</tr>", html_text, re.S)


def _cells(row):
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


# --- listings ------------------------------------------------------------------------------------------
def test_ir_is_todays_text_and_a_str():
    f = jg.compile(_step, backend="interpret")
    x = jg.tensor([[1.0, 2.0], [3.0, -1.0]])
    with jg.no_grad():
        text = f.ir(x)
        e = _entry(f, x)
    assert isinstance(text, Listing) and isinstance(text, str)
    assert text == format_graph(e.graph, "_step") and str(text) == format_graph(e.graph, "_step")
    assert type(str(text)) is str and "tanh" in text and text.splitlines()[0].startswith("_step(")
    back = pickle.loads(pickle.dumps(text))
    assert back == text and back._repr_html_() == text._repr_html_()


def test_ir_html_shows_each_eqns_user_line():
    f = jg.compile(_step, backend="interpret")
    x = jg.tensor([[1.0, 2.0], [3.0, -1.0]], requires_grad=True)
    text = f.ir(x)                              # forward and backward graphs
    page = text._repr_html_()
    rows = _rows_of(page)
    assert len(rows) == len(text.splitlines())  # one row per printed line (the blank line between graphs too)
    assert page.startswith("<table") and "monospace" in page
    for row in rows:
        code, notes, user = _cells(row)
        if "= tanh" in code:
            assert re.fullmatch(r"# test_display\.py:\d+ _step", notes)
            assert user == "h = (x @ W).tanh()                         # MARK h"
        if " = sum" in code and "grad of" not in notes:
            assert user.startswith("loss = (h * h + 1.0).sum()")
    # the backward graph's eqns show the forward line they differentiate
    cells = [_cells(r) for r in rows]
    start = next(i for i, c in enumerate(cells) if c[0].startswith("_step_backward("))
    bwd = [c for c in cells[start:] if " = " in c[0]]
    assert len(bwd) >= 6 and all(u.endswith(("# MARK h", "# MARK loss")) for _, _, u in bwd)


def test_html_escapes_and_pretty_prints():
    f = jg.compile(lambda x: (x * 2.0).exp(), backend="interpret")
    text = f.ir(jg.tensor([1.0, 2.0]))
    page = text._repr_html_()
    assert "&lt;lambda&gt;(%0" in page and "<lambda>" not in page
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(text) == str(text)     # Jupyter's text/plain: the listing, not one quoted line
    assert repr(text) == repr(str(text))        # repr stays a str's


def test_fusion_plan_listing():
    f = jg.compile(_step, backend="interpret")
    x = jg.tensor([[1.0, 2.0], [3.0, -1.0]])
    with jg.no_grad():
        p = f.fusion_plan(x)
        e = _entry(f, x)
    assert isinstance(p, Listing) and p == str(fusion_plan(e.graph))
    assert p.startswith("plan {") and "fused_0[" in p and "matmul" in p
    rows = [_cells(r) for r in _rows_of(p._repr_html_())]
    assert len(rows) == len(p.splitlines())
    groups = [r for r in rows if r[0].strip().startswith("fused_")]
    # the tanh group ends in the sum of the loss line: it lists both user lines, each with its location
    both = [g for g in groups if "MARK h" in g[2] and "MARK loss" in g[2]]
    assert both and re.search(r"test_display\.py:\d+: h = \(x @ W\)\.tanh\(\)", both[0][2])
    assert any(r[0].strip() == "matmul" and r[2].endswith("# MARK h") for r in rows)


def test_interpreter_source_listing():
    f = jg.compile(_step, backend="interpret")
    x = jg.tensor([[1.0, 2.0], [3.0, -1.0]])
    with jg.no_grad():
        src = f.source(x)
    lines = src.splitlines()
    assert isinstance(src, Listing) and lines[0] == "def _step(v0, v1):" and lines[-1].startswith("    return ")
    assert re.fullmatch(r"    v\d+ = tanh\(v\d+\)  # test_display\.py:\d+", next(ln for ln in lines if "tanh" in ln))
    rows = [_cells(r) for r in _rows_of(src._repr_html_())]
    assert [r[0] + (f"  {r[1]}" if r[1] else "") for r in rows] == lines
    assert any(r[2].endswith("# MARK h") for r in rows if "tanh" in r[0])


def test_numba_source_listing_is_preformatted():
    from jitgrad.jit.graph_code import _COMPILED
    acc = jg.tensor([1.0, 2.0, 3.0])

    def fn(x):
        with jg.no_grad():
            acc.add_(x * 2.0)               # a write-back: the compiled graph that runs has writes
        return (acc * x + 1.0).sum()
    f = jg.compile(fn, backend="numba")
    x = jg.tensor([1.0, 2.0, 3.0])
    f(x)
    built = len(_COMPILED)
    src = f.source(x)
    assert len(_COMPILED) == built          # the source of the code that runs, not a second build
    assert isinstance(src, Listing) and src.rows is None and "fused_0" in src
    page = src._repr_html_()
    assert page.startswith('<pre class="jitgrad-listing">') and html.unescape(page[29:-6]) == str(src)


def test_graph_has_an_html_view():
    f = jg.compile(_step, backend="interpret")
    x = jg.tensor([[1.0, 2.0], [3.0, -1.0]])
    with jg.no_grad():
        g = _entry(f, x).graph
    assert "<table" in g._repr_html_() and len(_rows_of(g._repr_html_())) == len(str(g).splitlines())


# --- notebook cells ------------------------------------------------------------------------------------
CELL_FILE = "/tmp/ipykernel_4242/1887378078.py"
CELL_SRC = '''\
def cell_fn(x):
    y = x.sqrt()
    return (y * 0.0).sum()
'''


@pytest.fixture
def ipython_cell(monkeypatch):
    """A notebook cell as IPython compiles it (its file name, linecache entry and cell number), with a
    stand-in for the running IPython's ``get_ipython().compile.format_code_name``."""
    class Compiler:
        def format_code_name(self, name):
            return ("Cell", "In[7]") if name == CELL_FILE else None
    shell = types.SimpleNamespace(compile=Compiler())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setitem(linecache.cache, CELL_FILE,
                        (len(CELL_SRC), None, CELL_SRC.splitlines(True), CELL_FILE))
    ns = {"__name__": "__main__"}
    exec(compile(CELL_SRC, CELL_FILE, "exec"), ns)
    return ns["cell_fn"]


def test_locations_in_a_cell_read_as_ipython_says(ipython_cell):
    loc = SourceLoc(CELL_FILE, 2, "cell_fn")
    assert loc.short() == "Cell In[7], line 2" and loc.where() == "Cell In[7], line 2"
    assert str(loc) == "Cell In[7], line 2, in cell_fn" and loc.text == "y = x.sqrt()"
    other = SourceLoc("/home/u/train.py", 14, "step")
    assert (other.short(), other.where()) == ("train.py:14", "/home/u/train.py:14")
    assert str(other) == 'File "/home/u/train.py", line 14, in step'

    f = jg.compile(ipython_cell, backend="interpret")
    text = f.ir(jg.tensor([1.0, 4.0]))
    assert re.search(r"= sqrt %0 +# Cell In\[7\], line 2 cell_fn", text), text
    plan = f.fusion_plan(jg.tensor([1.0, 4.0]))
    assert "# Cell In[7], lines 2-3" in plan
    # generated code keeps the cell's file name: a cell number changes on every re-run, and would change the
    # generated source (and its cache key) with it
    group = fusion_plan(_entry(f, jg.tensor([1.0, 4.0])).graph).groups[0]
    assert (group.lines(), group.where()) == ("1887378078.py:2-3", "Cell In[7], lines 2-3")
    assert "Cell In[7], line 2" in f.source(jg.tensor([1.0, 4.0]))


def test_without_ipython_cells_keep_their_file_name(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert SourceLoc(CELL_FILE, 2, "f").short() == "1887378078.py:2"
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert SourceLoc(CELL_FILE, 2, "f").short() == "1887378078.py:2"     # IPython loaded, no shell running


@pytest.mark.parametrize("compiled", [False, True])
def test_anomaly_in_a_cell_names_the_cell(ipython_cell, compiled):
    fn = jg.compile(ipython_cell, backend="interpret") if compiled else ipython_cell
    x = jg.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info:
            with jg.autograd.detect_anomaly():
                fn(x).backward()
    msg = str(info.value)
    assert msg.startswith("Function 'SqrtBackward0' returned nan values in its 0th output.")
    assert "at Cell In[7], line 2 (y = x.sqrt())" in msg
    assert "  Cell In[7], line 2, in cell_fn\n    y = x.sqrt()\n" in msg
    assert "1887378078" not in msg


# --- kernel frames -------------------------------------------------------------------------------------
def _as_kernel_module(module, src, name):
    ns = {"__name__": module}
    exec(compile(src, f"/venv/site-packages/{module.replace('.', '/')}.py", "exec"), ns)
    return ns[name]


def test_forward_traceback_drops_kernel_frames():
    # an ipykernel -> tornado -> asyncio -> IPython chain around the user's code, as in a Jupyter kernel
    run_code = _as_kernel_module("IPython.core.interactiveshell", "def run_code(f):\n    return f()\n", "run_code")
    loop = _as_kernel_module("asyncio.events", "def _run(f, g):\n    return f(g)\n", "_run")
    tornado = _as_kernel_module("tornado.ioloop", "def run_callback(f, g, h):\n    return f(g, h)\n",
                                "run_callback")
    kernel = _as_kernel_module("ipykernel.kernelbase",
                               "def dispatch_shell(f, g, h, i):\n    return f(g, h, i)\n", "dispatch_shell")

    def user_outer():
        return user_inner()

    def user_inner():
        return user_stack(1)

    stack = kernel(tornado, loop, run_code, user_outer)
    names = [fs.name for fs in stack]
    assert names[-2:] == ["user_outer", "user_inner"]
    assert not {"run_code", "_run", "run_callback", "dispatch_shell"} & set(names)
    assert "test_forward_traceback_drops_kernel_frames" in names      # the frames outside the kernel remain
    assert "site-packages/IPython" not in format_stack(stack)


def test_anomaly_message_drops_kernel_frames():
    kernel = _as_kernel_module("ipykernel.kernelbase", "def execute_request(f):\n    return f()\n",
                               "execute_request")
    x = jg.tensor([0.0], requires_grad=True)

    def cell():
        return (x.sqrt() * 0.0).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info:
            with jg.autograd.detect_anomaly():
                kernel(cell).backward()
    msg = str(info.value)
    assert "in cell\n    return (x.sqrt() * 0.0).sum()" in msg
    assert "execute_request" not in msg and "ipykernel" not in msg


# --- profiler tables -----------------------------------------------------------------------------------
def _profiled(**kw):
    x = jg.randn(3, 4, requires_grad=True)
    with jg.autograd.profiler.profile(**kw) as prof:
        with jg.autograd.profiler.record_function("<block>"):
            (x.tanh() * 2.0).sum().backward()
    return prof


def _header(table_text):
    return [h for h in re.split(r"\s{2,}", table_text.splitlines()[1].strip())]


def test_key_averages_render_as_an_html_table():
    prof = _profiled()
    ev = prof.key_averages()
    page = ev._repr_html_()
    heads = [html.unescape(h) for h in re.findall(r"<th [^>]*>(.*?)</th>", page)]
    assert heads == _header(ev.table())
    body = re.findall(r"<tr>(.*?)</tr>", page.split("<tbody>")[1], re.S)
    assert len(body) == len(ev)
    names = [_cells(r)[0] for r in body]
    assert names == [e.key for e in ev] and "&lt;block&gt;" in page and "<block>" not in page
    tanh = next(_cells(r) for r in body if _cells(r)[0] == "tanh")
    assert tanh[heads.index("# of Calls")] == "1" and tanh[heads.index("Self CPU %")].endswith("%")
    assert "Self CPU time total:" in page
    # the same columns as table() when it grows shapes and stacks
    prof = _profiled(record_shapes=True, with_stack=True)
    ev = prof.key_averages(group_by_input_shape=True, group_by_stack_n=2)
    page = ev._repr_html_()
    heads = [html.unescape(h) for h in re.findall(r"<th [^>]*>(.*?)</th>", page)]
    assert heads == _header(ev.table()) and "Input Shapes" in heads and "Source Location" in heads
    assert "[[3, 4]]" in page and "test_display.py" in page


def test_function_events_and_empty_lists_render():
    prof = _profiled()
    assert "<table" in prof.function_events._repr_html_()
    from jitgrad.autograd.profiler import EventList
    assert EventList()._repr_html_() == "<p>(no events)</p>"

