"""What the torch-agreement tests share: ``agree`` runs a jitgrad function and the same torch function on float64
arrays (values, gradients, eager and compiled, gradcheck/gradgradcheck), ``raises_as_torch`` compares a bad call's
exception type and text."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck
from compiled import flat, maybe_compile

torch = pytest.importorskip("torch")


def rng(seed=0):
    return np.random.default_rng(seed)


def agree(fj, ft, arrays, modes=("eager", "compiled"), second_order=True, atol=1e-10, needs_grad=None):
    """``fj`` (jitgrad) and ``ft`` (torch) on the float64 ``arrays``: equal values and input gradients of
    ``sum(out * w)``, in each of ``modes``; then gradcheck (and gradgradcheck) of ``fj`` eagerly.  ``needs_grad``:
    which arrays require grad (all by default)."""
    rg = needs_grad or [True] * len(arrays)
    ts = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, rg)]
    outs_t = flat(ft(*ts))
    ws = [rng(9).uniform(0.5, 1.5, tuple(o.shape)) for o in outs_t]
    floats = [o.is_floating_point() for o in outs_t]
    if any(floats):
        sum(((o * torch.tensor(w)).sum() for o, w, fl in zip(outs_t, ws, floats) if fl)).backward()
    for mode in modes:
        js = [jg.tensor(a, requires_grad=r) for a, r in zip(arrays, rg)]
        outs_j = flat(maybe_compile(fj, mode)(*js))
        assert len(outs_j) == len(outs_t)
        for oj, ot in zip(outs_j, outs_t):
            assert tuple(oj.shape) == tuple(ot.shape) and oj.dtype.name == str(ot.dtype).split(".")[1], mode
            np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), atol=atol, rtol=1e-10)
        if any(floats):
            sum(((o * jg.tensor(w)).sum() for o, w, fl in zip(outs_j, ws, floats) if fl)).backward()
            for a, b in zip(js, ts):
                ga = np.zeros(a.shape) if a.grad is None else a.grad.numpy()
                gb = np.zeros(tuple(b.shape)) if b.grad is None else b.grad.numpy()
                np.testing.assert_allclose(ga, gb, atol=atol, rtol=1e-9, err_msg=mode)
    if any(floats) and second_order is not None:
        js = [jg.tensor(a, requires_grad=r) for a, r in zip(arrays, rg)]
        assert gradcheck(fj, js)
        if second_order:
            assert gradgradcheck(fj, js)


def raises_as_torch(fj, ft, upto=None):
    """``fj`` raises the exception type and text that ``ft`` (the same call in torch) raises (the text up to
    ``upto`` only, where torch goes on to print a tensor in C++'s format)."""
    with pytest.raises(Exception) as tinfo:
        ft()
    with pytest.raises(type(tinfo.value)) as jinfo:
        fj()
    cut = (lambda s: s.split(upto)[0]) if upto else (lambda s: s)
    assert cut(str(jinfo.value)) == cut(str(tinfo.value))
