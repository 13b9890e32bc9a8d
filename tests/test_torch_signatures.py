"""Every function of ``nn.functional``, every ``nn`` module, optimiser and scheduler that jitgrad shares with torch
takes torch's parameters in torch's order with torch's defaults, so code that passes them positionally (old
scripts: ``F.nll_loss(x, t, w, None, -1)``) means the same thing.  jitgrad may stop early (a trailing torch
parameter it lacks reaches ``**torch_kw`` and is refused by name) and skips torch's private ``_stacklevel``."""
import inspect
import typing

import pytest

import jitgrad as jg
import jitgrad.nn.functional as JF

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
# torch's Parameter takes its arguments in __new__, jitgrad's in __init__ (the same two, data and requires_grad)
_NOT_COMPARABLE = {"nn.Parameter"}


def _default(d):
    """A default as compared: a function by its name (``activation=F.relu`` is jitgrad's relu in jitgrad, torch's
    in torch; their reprs differ only by address)."""
    return f"<function {d.__name__}>" if inspect.isfunction(d) else repr(d)


def _params(f, drop_self):
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return None
    ps = [(p.name, p.default) for p in sig.parameters.values() if p.kind in _KINDS and not p.name.startswith("_")]
    return ps[1:] if drop_self else ps


def _documented(t, n):
    """torch's boolean-dispatch functions (``max_pool2d`` picks ``_max_pool2d`` or the ``_with_indices`` one) take
    ``(*args, **kwargs)``; their documented parameters are those of the branch ``_<name>``."""
    try:
        kinds = {p.kind for p in inspect.signature(t).parameters.values()}
    except (TypeError, ValueError):
        return t
    if kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        return getattr(TF, "_" + n, t)
    return t


def _documented_init(cls):
    """torch's RNN, LSTM and GRU take ``(*args, **kwargs)``; their documented parameters are those of the first
    ``typing.overload`` of ``__init__`` (Python 3.11+ records overloads; before, the catch-all is compared)."""
    try:
        kinds = {p.kind for p in inspect.signature(cls.__init__).parameters.values()}
        kinds.discard(inspect.Parameter.POSITIONAL_OR_KEYWORD)     # self
    except (TypeError, ValueError):
        return cls.__init__
    if kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        overloads = typing.get_overloads(cls.__init__) if hasattr(typing, "get_overloads") else []
        return overloads[0] if overloads else cls.__init__
    return cls.__init__


def _pairs():
    for n in sorted(set(dir(TF)) & set(dir(JF))):
        t, j = getattr(TF, n), getattr(JF, n)
        if callable(t) and callable(j) and not isinstance(t, type) and not n.startswith("_"):
            yield f"F.{n}", _documented(t, n), j, False
    for label, tm, jm in (("nn", torch.nn, jg.nn), ("optim", torch.optim, jg.optim),
                          ("lr_scheduler", torch.optim.lr_scheduler, jg.optim.lr_scheduler)):
        for n in sorted(set(dir(tm)) & set(dir(jm))):
            t, j = getattr(tm, n), getattr(jm, n)
            if isinstance(t, type) and isinstance(j, type) and not n.startswith("_"):
                yield f"{label}.{n}", _documented_init(t), j.__init__, True


PAIRS = [p for p in _pairs() if p[0] not in _NOT_COMPARABLE]


def test_the_comparison_covers_the_surface():
    names = {p[0] for p in PAIRS}
    assert len(PAIRS) > 70 and {"F.nll_loss", "F.scaled_dot_product_attention", "nn.Linear", "optim.AdamW"} <= names


@pytest.mark.skipif(not hasattr(typing, "get_overloads"), reason="typing.get_overloads is Python 3.11+")
def test_modules_taking_star_args_are_compared_by_their_documented_signature():
    """torch.nn.LSTM.__init__ is ``(*args, **kwargs)``: the comparison takes its documented overload, so
    jitgrad's LSTM is held to ``input_size, hidden_size, num_layers=1, bias=True, ...``."""
    pairs = {p[0]: p for p in PAIRS}
    for name in ("nn.RNN", "nn.LSTM", "nn.GRU"):
        _, t, j, _ = pairs[name]
        names = [n for n, _ in _params(t, True)]
        assert names[:3] == ["input_size", "hidden_size", "num_layers"] and names == [n for n, _ in _params(j, True)]


@pytest.mark.parametrize("name,t,j,is_init", PAIRS, ids=[p[0] for p in PAIRS])
def test_parameters_in_torchs_order_with_torchs_defaults(name, t, j, is_init):
    pt, pj = _params(t, is_init), _params(j, is_init)
    if pt is None or pj is None:
        pytest.skip("no Python signature to compare")
    assert [n for n, _ in pj] == [n for n, _ in pt][:len(pj)], f"{name}: parameters differ from torch's order"
    for (n, dj), (_, dt) in zip(pj, pt):
        assert _default(dj) == _default(dt), f"{name}({n}=...): default {dj!r}, torch's {dt!r}"
