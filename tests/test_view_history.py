"""A view made before its base had an autograd history takes that history once the base gets one (torch refreshes
a view's grad_fn when its base or another view of it was written in place); views made in no_grad or inference
mode raise torch's error instead.  Each program runs on jitgrad and on torch (the oracle)."""
import numpy as np
import pytest

import jitgrad as jg

torch = pytest.importorskip("torch")


def np_of(t):
    return t.detach().numpy()


def same(a, b):
    assert (a is None) == (b is None)
    if a is not None:
        np.testing.assert_allclose(np_of(a), np_of(b), rtol=1e-6, atol=1e-9)


def node_name(lib, t):
    if t.grad_fn is None:
        return None
    return type(t.grad_fn).__name__ if lib is torch else t.grad_fn.name()


def xs(lib):
    return lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)


def test_view_made_before_base_history():
    def run(lib):
        x = xs(lib)
        s = lib.zeros(2, dtype=lib.float64)
        v = s.unsqueeze(0)
        s.add_(x)
        flags = (v.requires_grad, v.is_leaf, node_name(lib, v))
        (v * 3).sum().backward()
        return flags, v, x.grad
    (f, v, g), (tf, tv, tg) = run(jg), run(torch)
    assert f == tf and tf[0] is True
    same(v, tv)
    same(g, tg)


def test_base_written_through_another_view():
    def run(lib):
        x = xs(lib)
        s = lib.zeros(3, dtype=lib.float64)
        v, w = s[:2], s[1:]
        w.add_(x)
        (v * v).sum().backward()
        return v, x.grad, node_name(lib, v), node_name(lib, s)
    (v, g, n, ns), (tv, tg, tn, tns) = run(jg), run(torch)
    same(v, tv)
    same(g, tg)
    assert (n, ns) == (tn, tns)


def test_view_of_a_view_and_two_writes():
    def run(lib):
        x = xs(lib)
        s = lib.zeros(2, 2, dtype=lib.float64)
        v = s[0]
        vv = v.unsqueeze(0)
        s.add_(x)
        s.mul_(x)       # a second write after the view took the first history
        (vv * 3).sum().backward()
        return vv, x.grad, node_name(lib, vv)
    (v, g, n), (tv, tg, tn) = run(jg), run(torch)
    same(v, tv)
    same(g, tg)
    assert n == tn


def test_view_written_in_place_afterwards():
    def run(lib):
        x = xs(lib)
        y = lib.tensor([3.0, 4.0], dtype=lib.float64, requires_grad=True)
        s = lib.zeros(2, dtype=lib.float64)
        v = s.unsqueeze(0)
        s.add_(x)
        v.grad_fn       # (torch raises a leaf error on mul_ until the view's grad_fn is regenerated)
        v.mul_(y)
        (s * s).sum().backward()
        return s, x.grad, y.grad, node_name(lib, v), node_name(lib, s)
    (s, gx, gy, n, ns), (ts, tgx, tgy, tn, tns) = run(jg), run(torch)
    same(s, ts)
    same(gx, tgx)
    same(gy, tgy)
    assert (n, ns) == (tn, tns)


def test_double_backward_through_the_view():
    def run(lib):
        x = xs(lib)
        s = lib.zeros(2, dtype=lib.float64)
        v = s.unsqueeze(0)
        s.add_(x * x)
        g, = lib.autograd.grad((v ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        return g, x.grad
    (g, gg), (tg, tgg) = run(jg), run(torch)
    same(g, tg)
    same(gg, tgg)


def test_second_backward_raises():
    def run(lib):
        x = xs(lib)
        s = lib.zeros(2, dtype=lib.float64)
        v = s.unsqueeze(0)
        s.add_(x * x)           # x * x saves x, freed by the first backward
        loss = (v * 3).sum()
        loss.backward()
        with pytest.raises(RuntimeError) as e:
            loss.backward()
        return str(e.value), x.grad
    (m, g), (tm, tg) = run(jg), run(torch)
    assert tm.startswith("Trying to backward through the graph a second time")
    assert m.startswith(tm[:60])
    same(g, tg)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("chain", ["view", "view_of_view"])
def test_view_made_in_no_grad_mode_raises_on_use(mode, chain):
    def run(lib):
        x = xs(lib)
        b = x * 1
        with getattr(lib, mode)():
            v = b[0]
        use = v[None] if chain == "view_of_view" else v
        b.add_(1)
        with pytest.raises(RuntimeError) as e:
            (use * 2).sum().backward()
        return use.requires_grad, str(e.value)
    (rg, m), (trg, tm) = run(jg), run(torch)
    assert rg == trg
    # (torch names the view-of-a-view's op, "Output 0 of Unsqueeze"; jitgrad's view has no node to name)
    assert m.split(" view", 1)[1] == tm.split(" view", 1)[1] if chain == "view" else m.endswith(tm.split("view of a ")[1])


def test_view_made_in_no_grad_mode_base_unchanged_is_a_constant():
    def run(lib):
        x = xs(lib)
        b = x * 1
        with lib.no_grad():
            v = b[0]
        (b * v).sum().backward()
        return x.grad, v.grad_fn
    (g, n), (tg, tn) = run(jg), run(torch)
    same(g, tg)
    assert n is None and tn is None


def test_view_made_before_history_inside_compile():
    def prog(lib, x):
        s = lib.zeros(2, dtype=lib.float64)
        v = s.unsqueeze(0)
        s.add_(x)
        return (v * 3).sum() + (v * v).sum()

    for backend in ("interpret", "numba"):
        x = xs(jg)
        f = jg.compile(lambda x: prog(jg, x), backend=backend)
        f(x).backward()
        tx = xs(torch)
        prog(torch, tx).backward()
        same(x.grad, tx.grad)
        x2 = xs(jg)
        out = f(x2)
        same(out, prog(torch, xs(torch)))


def test_a_no_grad_view_written_through_prints_invalid_grad_fn():
    a = jg.ones(1, requires_grad=True)
    with jg.no_grad():
        b = a[:]
        b *= 2
    assert repr(b) == "tensor([2.], grad_fn=<Invalid>)"
    with jg.no_grad():
        c = a[:]
    assert repr(c) == "tensor([2.], requires_grad=True)"     # unwritten since: a plain view that requires grad
    assert c.requires_grad and c.grad_fn is None


@pytest.mark.parametrize("write", ["add_", "transpose_"])
def test_reading_grad_fn_of_an_inference_view_after_its_base_was_written(write):
    for requires_grad in (True, False):
        leaf = jg.ones(1, 2, 3, requires_grad=requires_grad)
        base = leaf.clone()
        with jg.inference_mode():
            v = base.view(-1)
        getattr(base, write)(*((2,) if write == "add_" else (0, 1)))
        if requires_grad:
            with pytest.raises(RuntimeError, match="A view was created in inference mode and its base or another "
                                                   "view of its base has been modified inplace in normal mode"):
                v.grad_fn
            with jg.no_grad():      # (only a read that could record refuses it)
                assert v.grad_fn is None
        else:
            assert v.grad_fn is None

