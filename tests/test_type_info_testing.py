"""finfo/iinfo, is_tensor/is_storage, broadcast_shapes, promote_types, torch.testing (assert_close messages,
make_tensor, assert_allclose) and submodule imports under an alias (``sys.modules["torch"] = jitgrad``)."""
from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import jitgrad as jg
from torch_agreement import raises_as_torch

torch = pytest.importorskip("torch")


def _to_torch_text(s: str) -> str:
    return s.replace("jitgrad.", "torch.")


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", None])
def test_finfo(name):
    j = jg.finfo(getattr(jg, name)) if name else jg.finfo()
    t = torch.finfo(getattr(torch, name)) if name else torch.finfo()
    for a in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(j, a) == getattr(t, a), a
    assert repr(j) == repr(t)
    assert j == jg.finfo(j and (getattr(jg, name) if name else jg.float32))


@pytest.mark.parametrize("name", ["int32", "int64", "uint8"])
def test_iinfo(name):
    j, t = jg.iinfo(getattr(jg, name)), torch.iinfo(getattr(torch, name))
    for a in ("bits", "max", "min", "dtype"):
        assert getattr(j, a) == getattr(t, a), a
    assert repr(j) == repr(t)


def test_finfo_follows_default_dtype_and_errors():
    try:
        jg.set_default_dtype(jg.float64)
        assert jg.finfo().dtype == "float64"
    finally:
        jg.set_default_dtype(jg.float32)
    raises_as_torch(lambda: jg.finfo(jg.int32), lambda: torch.finfo(torch.int32))
    raises_as_torch(lambda: jg.iinfo(jg.float32), lambda: torch.iinfo(torch.float32))
    raises_as_torch(lambda: jg.iinfo(jg.bool), lambda: torch.iinfo(torch.bool))


def test_is_tensor_is_storage_is_floating_point():
    for j, t in [(jg.ones(1), torch.ones(1)), ([1.0], [1.0]), (1.0, 1.0), (np.ones(1), np.ones(1))]:
        assert jg.is_tensor(j) == torch.is_tensor(t)
        assert jg.is_storage(j) == torch.is_storage(t)
    assert jg.is_floating_point(jg.ones(1)) and not jg.is_floating_point(jg.arange(2))


SHAPES = [((2, 1), (1, 3)), ((2,), (3, 1), (1, 1, 1)), (2, (3, 1)), ((), (4,)), (), (jg.Size([2, 1]), [1, 3]),
          ((0,), (1,)), ((2, 3), (4, 3)), ((2,), (-1,)), ((2, 1), [1, 3], 5), ("ab",)]


@pytest.mark.parametrize("i", range(len(SHAPES)))
def test_broadcast_shapes(i):
    js = SHAPES[i]
    ts = tuple(torch.Size(s) if isinstance(s, jg.Size) else s for s in js)
    try:
        want = torch.broadcast_shapes(*ts)
    except Exception as e:
        with pytest.raises(type(e)) as info:
            jg.broadcast_shapes(*js)
        assert _to_torch_text(str(info.value)) == str(e)
        return
    got = jg.broadcast_shapes(*js)
    assert isinstance(got, jg.Size) and tuple(got) == tuple(want)


def test_promote_types():
    for a, b in [("int64", "float32"), ("int32", "int64"), ("bool", "int32"), ("float32", "float64")]:
        assert jg.promote_types(getattr(jg, a), getattr(jg, b)).name == \
            str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[1]


# ---- torch.testing ----------------------------------------------------------------------------------------------
CLOSE_CASES = {
    "one_off": lambda m: (m.tensor([1., 2., 3.]), m.tensor([1., 2.5, 3.])),
    "dtype": lambda m: (m.tensor([1., 2.]), m.tensor([1., 2.], dtype=m.float64)),
    "shape": lambda m: (m.ones(2), m.ones(3)),
    "int": lambda m: (m.tensor([1, 2, 3]), m.tensor([1, 5, 3])),
    "nan": lambda m: (m.tensor([float("nan")]), m.tensor([float("nan")])),
    "two_off": lambda m: (m.tensor([1., 2., 3., 4.]), m.tensor([1.1, 2., 3.3, 4.])),
    "tensor_vs_float": lambda m: (m.tensor(1.), 1.0),
    "floats": lambda m: (1.0, 1.5),
    "ints": lambda m: (1, 2),
    "list": lambda m: ([m.ones(1)], [m.zeros(1)]),
    "bool": lambda m: (m.tensor([True]), m.tensor([False])),
    "dict": lambda m: ({"a": m.ones(1)}, {"a": m.zeros(1)}),
    "tensor_vs_list": lambda m: (m.ones(1), [1.]),
    "zero_dim": lambda m: (m.tensor(1.), m.tensor(2.)),
    "2d": lambda m: (m.ones(2, 3), m.zeros(2, 3)),
    "2d_partial": lambda m: (m.tensor([[1., 2.], [3., 4.]]), m.tensor([[1., 2.], [3., 4.5]])),
    "float64_close": lambda m: (m.tensor([1.], dtype=m.float64), m.tensor([1. + 1e-8], dtype=m.float64)),
    "float64_far": lambda m: (m.tensor([1.], dtype=m.float64), m.tensor([1. + 1e-6], dtype=m.float64)),
    "within_f32": lambda m: (m.tensor([1.]), m.tensor([1.000001])),
    "numpy": lambda m: (np.ones(2), np.zeros(2)),
}
KWARGS = [{}, {"rtol": 1e-3}, {"atol": 1e-3}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 0.5, "atol": 0.5},
          {"check_dtype": False}, {"equal_nan": True}, {"msg": "custom"}, {"msg": lambda m: "X" + m}]


@pytest.mark.parametrize("case", list(CLOSE_CASES))
@pytest.mark.parametrize("k", range(len(KWARGS)))
def test_assert_close_as_torch(case, k):
    kw = KWARGS[k]
    try:
        torch.testing.assert_close(*CLOSE_CASES[case](torch), **kw)
    except Exception as e:
        with pytest.raises(type(e)) as info:
            jg.testing.assert_close(*CLOSE_CASES[case](jg), **kw)
        got = _to_torch_text(str(info.value)).replace("torch.runtime.tensor.Tensor", "torch.Tensor")
        assert got == str(e)
        return
    jg.testing.assert_close(*CLOSE_CASES[case](jg), **kw)


def test_assert_allclose():
    with pytest.warns(FutureWarning, match="deprecated"):
        jg.testing.assert_allclose(jg.tensor([1., 2.]), [1.00005, 2.])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(AssertionError) as j:
            jg.testing.assert_allclose(jg.tensor([1., 2.]), [1.1, 2.])
        with pytest.raises(AssertionError) as t:
            torch.testing.assert_allclose(torch.tensor([1., 2.]), [1.1, 2.])
    assert str(j.value) == str(t.value)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "bool", "uint8"])
def test_make_tensor(dtype):
    d = getattr(jg, dtype)
    t = jg.testing.make_tensor((3, 4), dtype=d, device="cpu")
    assert t.dtype is d and tuple(t.shape) == (3, 4) and t.is_contiguous()
    if dtype != "bool":
        lo = 0 if dtype == "uint8" else -9
        assert t.min().item() >= lo and t.max().item() < (9 if d.is_floating_point else 10)
    n = jg.testing.make_tensor(3, 4, dtype=d, device="cpu", noncontiguous=True)
    assert tuple(n.shape) == (3, 4) and not n.is_contiguous()
    z = jg.testing.make_tensor((50,), dtype=d, device="cpu", low=0, high=2, exclude_zero=True)
    assert (z != 0).all().item()
    if d.is_floating_point:
        g = jg.testing.make_tensor((2,), dtype=d, device="cpu", low=1, high=2, requires_grad=True)
        assert g.requires_grad and g.is_leaf and ((g >= 1) & (g < 2)).all().item()


def test_make_tensor_errors():
    for kw in [dict(low=3, high=1), dict(low=float("nan")), dict(dtype="int64", requires_grad=True),
               dict(dtype="uint8", low=-5, high=-1)]:
        d = kw.pop("dtype", "float32")
        with pytest.raises(ValueError) as t:
            torch.testing.make_tensor((2,), dtype=getattr(torch, d), device="cpu", **kw)
        with pytest.raises(ValueError) as j:
            jg.testing.make_tensor((2,), dtype=getattr(jg, d), device="cpu", **kw)
        assert _to_torch_text(str(j.value)) == str(t.value)
    with pytest.warns(FutureWarning):
        t = jg.testing.make_tensor((2,), dtype=jg.float32, device="cpu", low=1, high=1)
    assert t.tolist() == [1.0, 1.0]


# ---- imports under an alias ---------------------------------------------------------------------------------
def test_aliased_submodule_imports_load_one_copy():
    code = """
import importlib, sys
import jitgrad
for name in ("", ".nn", ".nn.functional", ".optim"):
    sys.modules["torch" + name] = importlib.import_module("jitgrad" + name)
import torch
from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence
import torch.testing
p = pack_padded_sequence(pad_sequence([torch.ones(3, 2), torch.ones(1, 2)], batch_first=True), [3, 1],
                         batch_first=True)
assert p.batch_sizes.tolist() == [2, 1, 1]
import torch.ir.dtypes
assert torch.ir.dtypes is sys.modules["jitgrad.ir.dtypes"]
assert sys.modules["torch.nn.utils.rnn"] is sys.modules["jitgrad.nn.utils.rnn"]
assert sys.modules["jitgrad.nn.utils.rnn"].__spec__.name == "jitgrad.nn.utils.rnn"
assert torch.testing is sys.modules["jitgrad.testing"]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_alias_finder_leaves_other_imports_alone():
    from jitgrad.import_alias import AliasFinder
    f = AliasFinder()
    assert f.find_spec("json.decoder") is None
    assert f.find_spec("jitgrad.nn") is None        # jitgrad's own names go the normal way
    assert f.find_spec("toplevel") is None
    assert importlib.import_module("jitgrad.nn.utils.rnn").__name__ == "jitgrad.nn.utils.rnn"


@pytest.mark.parametrize("module", ["jitgrad.runtime.defaults", "jitgrad.library.pointwise.division",
                                    "jitgrad.library.tensor_info.type_info", "jitgrad.testing", "jitgrad.import_alias"])
def test_docstring_examples(module):
    import doctest
    r = doctest.testmod(importlib.import_module(module))
    assert r.attempted > 0 and r.failed == 0
