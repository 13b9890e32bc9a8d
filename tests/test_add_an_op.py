"""ARCHITECTURE.md's recipe for adding an elementwise primitive is what the code does: its worked example, expm1,
is three source edits (the OpDef, one publishing declaration, its singular samples), and every name it gets
(``jg.expm1``, ``x.expm1()``, ``x.expm1_()``) comes from that one declaration."""
from __future__ import annotations

import inspect
import os
import re

import numpy as np

import jitgrad as jg
from jitgrad.ir.ops import OPS
from jitgrad.ir.ops import elementwise
from jitgrad.publisher import PUBLISHED

from singular_samples import SAMPLES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_worked_example_is_the_code():
    doc = open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8").read()
    example = doc[doc.index("### Worked example: expm1"):doc.index("To add an op:")]
    lines = re.findall(r"^# \d\. (\S+): .*\n(.+(?:\n(?!#|```).+)*)", example, re.M)
    assert [f for f, _ in lines] == ["jitgrad/ir/ops/elementwise.py", "jitgrad/library/elementary.py",
                                     "tests/singular_samples.py"]
    for path, code in lines:
        src = open(os.path.join(ROOT, path), encoding="utf-8").read()
        for line in code.strip().splitlines():
            assert line.strip() in src, f"ARCHITECTURE.md's recipe line is not in {path}: {line.strip()}"


def test_one_declaration_publishes_every_name():
    op = OPS["expm1"]
    assert op.family == "elementwise" and op.scalar is not None and op.vjp is not None
    assert 'ew("expm1"' in inspect.getsource(elementwise)
    decls = [PUBLISHED[k] for k in (("jitgrad", "expm1"), ("Tensor", "expm1"), ("Tensor", "expm1_"))]
    assert {(d.module, d.line) for d in decls} == {("jitgrad.library.elementary", decls[0].line)}
    assert jg.expm1 is jg.Tensor.expm1
    assert "expm1" in SAMPLES


def test_every_unary_primitive_and_its_inplace_form_share_a_declaration():
    """What the recipe promises for expm1 holds for every unary primitive published as elementary.py does it
    (``_unary(name)``) with an in-place form."""
    # in-place forms with semantics of their own, declared beside those semantics
    own = {"logical_not_": "writes 1/0 in the tensor's own dtype, as torch (library/aliases.py)"}
    checked = 0
    for (where, name), d in PUBLISHED.items():
        if where != "Tensor" or not name.endswith("_") or name[:-1] not in OPS or name in own:
            continue
        base = PUBLISHED.get(("Tensor", name[:-1]))
        if base is None or not (base.obj.__doc__ or "").startswith("Elementwise ``"):
            continue
        assert (d.module, d.line) == (base.module, base.line), f"Tensor.{name} is declared apart from {name[:-1]}"
        checked += 1
    assert checked >= 15


def test_the_example_runs_eager_in_place_and_compiled():
    x = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(jg.expm1(jg.tensor(x)).numpy(), np.expm1(x), rtol=1e-15)
    t = jg.tensor(x.copy())
    v = t._version
    assert t.expm1_() is t and t._version == v + 1
    np.testing.assert_allclose(t.numpy(), np.expm1(x), rtol=1e-15)
    a = jg.tensor(x, requires_grad=True)
    f = jg.compile(lambda a: a.expm1().sum(), backend="interpret")
    assert jg.autograd.gradcheck(lambda a: f(a), (a,))
