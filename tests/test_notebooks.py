"""The notebooks in notebooks/ run top to bottom in a fresh Jupyter kernel, and show what they promise.

Each notebook runs with nbclient in a new kernel of this very interpreter (a kernelspec made for the test, so a
user-wide ``python3`` kernel of another Python cannot be picked), importing the jitgrad this test imports.
A cell error fails the test, except in cells tagged ``raises-exception`` (their error is checked here).
"""
import json
import os
import re
import sys

import pytest

import jitgrad

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
NAMES = ["01_autograd_tour", "02_compile_a_training_step", "03_anomaly_and_profiler", "04_gradcheck_regression",
         "05_add_an_op"]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KERNEL_FRAMES = ("ipykernel", "tornado", "asyncio", "site-packages/IPython", "zmq")


def _read(name):
    return nbformat.read(os.path.join(NOTEBOOKS, name + ".ipynb"), as_version=4)


def test_the_notebooks_are_the_five_named():
    assert sorted(f[:-6] for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    nb = _read(name)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: clear the outputs before committing"


def _text(cell) -> str:
    """Everything a code cell showed, as text (ANSI colours stripped)."""
    parts = []
    for o in cell.outputs:
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type == "error":
            parts.append(f"{o.ename}: {o.evalue}\n" + "\n".join(o.traceback))
        else:
            parts.extend(v if isinstance(v, str) else json.dumps(v) for v in o.get("data", {}).values())
    return _ANSI.sub("", "\n".join(parts))


def _cell(nb, first_line):
    hits = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(first_line)]
    assert len(hits) == 1, first_line
    return hits[0]


def _html(cell) -> str:
    htmls = [o.data["text/html"] for o in cell.outputs if o.output_type == "execute_result" and "text/html" in o.data]
    assert htmls, "the cell's value has no HTML view"
    return htmls[0]


@pytest.fixture
def run_notebook(tmp_path, monkeypatch):
    # a kernelspec of this interpreter, found first (JUPYTER_PATH precedes the user's and the system's dirs)
    spec = tmp_path / "jupyter" / "kernels" / "jitgrad-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jitgrad test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    # the kernel imports the jitgrad under test (a checkout on PYTHONPATH, or the installed package)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(jitgrad.__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([pkg_parent] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")     # kernels built before the first call: deterministic
    monkeypatch.delenv("JITGRAD_BACKEND", raising=False)      # the notebooks' own backends, as a user runs them
    work = tmp_path / "work"
    work.mkdir()

    def run(name):
        nb = _read(name)
        nb.cells.append(nbformat.v4.new_code_cell("import sys, jitgrad; print(sys.executable, jitgrad.__file__)"))
        client = nbclient.NotebookClient(nb, kernel_name="jitgrad-test", timeout=600, startup_timeout=120,
                                         resources={"metadata": {"path": str(work)}})
        client.execute()      # raises CellExecutionError on an error in a cell not tagged raises-exception
        exe, pkg = _text(nb.cells[-1]).split()
        assert os.path.realpath(exe) == os.path.realpath(sys.executable)
        assert os.path.realpath(pkg) == os.path.realpath(jitgrad.__file__)
        return nb, work
    return run


def test_01_autograd_tour(run_notebook):
    nb, _ = run_notebook("01_autograd_tour")
    assert "27.0 18.0 6.0" in _text(_cell(nb, "a = jg.tensor(3.0"))
    inplace = _text(_cell(nb, "p = jg.tensor([1.0, 2.0]"))
    assert "modified by an inplace operation" in inplace
    assert re.search(r"created at Cell In\[\d+\], line 2: q = p.sigmoid\(\)", inplace), inplace


def test_02_compile_a_training_step(run_notebook):
    nb, _ = run_notebook("02_compile_a_training_step")
    assert "backend numba, first call" in _text(_cell(nb, "step = jg.compile(train_step)"))
    ir = _cell(nb, "step.ir(x, y)")
    html = _html(ir)
    assert "<table" in html and "matmul" in html
    assert re.search(r"# Cell In\[\d+\], line \d+ train_step", html)       # each eqn's cell and line
    assert "loss = loss_fn(model(x), y)" in html                            # ... and the user's line itself
    plain = [o.data["text/plain"] for o in ir.outputs if o.output_type == "execute_result"][0]
    assert "\n" in plain and not plain.startswith("'")                    # the text, not one quoted line
    plan = _html(_cell(nb, "step.fusion_plan(x, y)"))
    assert "fused_0[" in plan and "loss_fn(model(x), y)" in plan
    assert "lines; the first lines of code" in _text(_cell(nb, "src = step.source(x, y)"))
    timings = _text(_cell(nb, "def per_step_us"))
    assert re.search(r"compiled +\d+ us/step", timings) and "'traces': 1" in timings
    assert "eager and compiled training agree" in _text(_cell(nb, "def train(compiled"))


def test_03_anomaly_and_profiler(run_notebook):
    nb, work = run_notebook("03_anomaly_and_profiler")
    raised = _cell(nb, "w.grad = None\nwith jg.autograd.detect_anomaly():")
    err = [o for o in raised.outputs if o.output_type == "error"]
    assert len(err) == 1 and err[0].ename == "AnomalyError"
    message = err[0].evalue
    assert "Function 'SqrtBackward0' returned nan values in its 0th output." in message
    assert "[checked inside compiled code]" in message
    # the user's line, named as IPython names the cell, in the op line and in the forward traceback
    assert re.search(r"at Cell In\[\d+\], line 12 \(loss = jg.sqrt\(h\).sum\(\)", message), message
    trace = message.split("Traceback of forward call that caused the error:\n", 1)[1]
    assert re.search(r"Cell In\[\d+\], line 3, in <module>\n +step\(x\)", trace), trace
    assert re.search(r"Cell In\[\d+\], line 12, in step", trace), trace
    assert not any(k in trace for k in _KERNEL_FRAMES) and "ipykernel_" not in trace, trace
    assert "Cell In[" in _text(_cell(nb, "w.grad = None\ntry:"))
    table = _html(_cell(nb, "W = jg.randn(16, 8"))
    assert "<table" in table and "<th" in table
    for col in ("Name", "Self CPU %", "CPU total", "# of Calls"):
        assert f">{col}</th>" in table.replace("&#x27;", "'")
    for event in ("matmul", "TanhBackward0", "compile/trace", "eager", "compiled"):
        assert f">{event}</td>" in table
    assert (work / "trace.json").exists()
    assert json.loads((work / "trace.json").read_text())["traceEvents"]


def test_04_gradcheck_regression(run_notebook):
    nb, _ = run_notebook("04_gradcheck_regression")
    table = _text(_cell(nb, "rows = []"))
    assert table.count(" ok") == 28 and "FAIL" not in table
    caught = _text(_cell(nb, "class Cube"))
    assert "gradcheck: False" in caught and "Jacobian mismatch" in caught


def test_05_add_an_op(run_notebook):
    nb, _ = run_notebook("05_add_an_op")
    assert "cpu  float32: log1p_f32(x)" in _text(_cell(nb, "from jitgrad.codegen.math_table import"))
    agree = _text(_cell(nb, "import torch"))
    assert "eager    value and gradient agree with torch" in agree and "compiled value and gradient agree" in agree
    assert _text(_cell(nb, "x = jg.tensor(np.linspace(-3, 3, 7)")).count("True True") == 2
    assert "log1p_f32(exp_f32(" in _text(_cell(nb, "def step(x, w):"))
    assert "math.log1p" in _text(_cell(nb, "from jitgrad.jit.graph_code import cuda_graph"))
