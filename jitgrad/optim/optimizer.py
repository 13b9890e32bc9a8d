"""``jitgrad.optim.Optimizer``: param groups, per-parameter state, torch's state_dict format, and what makes an
optimiser step compile.

How a step behaves inside ``@jitgrad.compile``:
- state (momentum buffers, exp_avg, step counts) is ordinary tensors, created *concretely* when first needed
  (even if that happens while a trace runs, see :func:`jitgrad.jit.guards.outside_trace`): the trace captures
  them by identity as graph inputs and their in-place updates become write-backs, so every call continues from
  the state the previous call left;
- each group's ``lr`` is mirrored into a 0-d float64 tensor that the step reads (a graph input): changing
  ``group['lr']`` by hand or by a scheduler between calls takes effect without a retrace;
- a numeric hyperparameter the optimiser reads through ``group.hyper(key)`` (its ``runtime_hypers``: SGD's
  momentum, Adam's betas, ...) is baked into the trace until its value changes (a scheduler cycling momentum,
  a hand edit); from then on it is mirrored into 0-d float64 tensors the step reads as graph inputs, promoted
  as the Python floats they stand for, and only its sign is guarded (the step branches on ``momentum != 0``):
  one retrace, then none however often it changes (torch's automatic dynamic scalars);
- everything else the step's Python branches on (the other hyperparameters, which state tensors exist) is a
  compile guard (:func:`jitgrad.jit.guards.guard`): changing it retraces.
"""
from __future__ import annotations

import copy
import weakref
from collections import defaultdict

import numpy as np

from ..ir import dtypes as dt
from ..jit.guards import guard, is_compiling, on_trace_abort, outside_trace, scalar_input
from ..library.creation import factories
from ..runtime import grad_mode
from ..runtime.tensor import Tensor
from ..nn.modules.module import zero_grads


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


def _as_float(v):
    return float(v.item()) if isinstance(v, Tensor) else float(v)


def _numbers(v):
    """The Python numbers of a numeric hyperparameter (``0.9``, ``(0.9, 0.999)``), or None for any other value."""
    if type(v) in (int, float):
        return (v,)
    if type(v) is tuple and v and all(type(x) in (int, float) for x in v):
        return v
    return None


def _sign(v):
    return tuple((x > 0) - (x < 0) for x in _numbers(v))


class _ParamGroup(dict):
    """A parameter group: a plain dict to the user (``group['lr'] = 0.01``).  Its ``lr`` is also kept in
    ``lr_tensor`` (0-d float64), which the step reads, so a compiled step sees the current value; so are, once
    they change, the numeric hyperparameters a step reads with :meth:`hyper` (``dynamic``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with outside_trace():
            self.lr_tensor = factories.tensor(0.0, dtype=dt.float64)
        self.dynamic = set()        # hyperparameters seen to change: graph inputs of a compiled step
        self._hyper_tensors = {}    # key -> its 0-d float64 mirrors, one per number
        self._sync_lr(check=False)

    def hyper(self, key):
        """``self[key]``; inside a compile trace, for a hyperparameter that has changed before, its mirror
        tensor(s) read as graph inputs (a tuple of them for a tuple such as ``betas``)."""
        v = self[key]
        if key not in self.dynamic or not is_compiling():
            return v
        ts = self._hyper_tensors.get(key)
        if ts is None:
            with outside_trace():
                ts = self._hyper_tensors[key] = tuple(factories.tensor(float(x), dtype=dt.float64)
                                                      for x in _numbers(v))
        ts = tuple(scalar_input(t) for t in ts)
        return ts if type(v) is tuple else ts[0]

    def _note(self, key, old, new):
        """``self[key]`` went from ``old`` to ``new``: a numeric value that changed becomes dynamic; a dynamic
        one's mirrors take the new value."""
        if key in ("params", "lr", "initial_lr"):
            return
        nums = _numbers(new)
        if key not in self.dynamic:
            was = _numbers(old)
            if was is None or nums is None or len(was) != len(nums) or was == nums:
                return
            self.dynamic.add(key)
        ts = self._hyper_tensors.get(key)
        if ts is None:
            return
        if nums is None or len(nums) != len(ts):      # no longer numbers of that form: plain again
            self.dynamic.discard(key)
            del self._hyper_tensors[key]
            return
        if is_compiling():
            raise RuntimeError(f"optimizer: a param group's {key!r} was changed inside a @jitgrad.compile "
                               "function; change it outside: the compiled step reads it at every call.")
        for t, x in zip(ts, nums):
            t._data[...] = float(x)

    def _sync_lr(self, check=True):
        if "lr" not in self:
            return
        if check and is_compiling():
            raise RuntimeError("optimizer: a param group's 'lr' was changed inside a @jitgrad.compile function; "
                               "that Python code runs only while tracing, so later calls would keep the old value. "
                               "Change lr (or call scheduler.step()) outside the compiled function: the compiled "
                               "step reads the current lr at every call.")
        self.lr_tensor._data[...] = _as_float(self["lr"])

    def __setitem__(self, key, value):
        old = self.get(key)
        super().__setitem__(key, value)
        if key == "lr":
            self._sync_lr()
        else:
            self._note(key, old, value)

    def update(self, *args, **kwargs):
        new = dict(*args, **kwargs)
        old = {k: self.get(k) for k in new}
        super().update(new)
        if "lr" in new:
            self._sync_lr()
        for k, v in new.items():
            if k != "lr":
                self._note(k, old[k], v)

    def setdefault(self, key, default=None):
        r = super().setdefault(key, default)
        if key == "lr":
            self._sync_lr(check=False)
        return r

    def __reduce__(self):
        return (_ParamGroup, (dict(self),))

    def __deepcopy__(self, memo):
        return _ParamGroup({k: copy.deepcopy(v, memo) for k, v in self.items()})


def _zeros_like(p, dtype=None):
    """Concrete zeros shaped like ``p``: optimiser state, even when made while a trace runs."""
    with outside_trace():
        return factories.zeros(*p.shape, dtype=p.dtype if dtype is None else dtype)


def _scalar(value, dtype):
    with outside_trace():
        return factories.tensor(value, dtype=dtype)


class Optimizer:
    """Base class of optimisers (``torch.optim.Optimizer``): ``param_groups`` (dicts with ``'params'`` and the
    hyperparameters), ``state`` (per parameter), ``add_param_group``, ``zero_grad``, ``state_dict`` /
    ``load_state_dict`` in torch's format.  Subclasses implement ``step``."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but "
                            f"got {_typename(params)}")
        self.state = defaultdict(dict)
        self.param_groups = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(dict(group))

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, with hyperparameters not given taken from the optimiser's defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            param_group["params"] = list(params)
        for p in param_group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_typename(p)}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        if len({id(p) for p in param_group["params"]}) != len(param_group["params"]):
            import warnings
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(_ParamGroup(param_group))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimised parameters: to None (the default) or to zeros in place."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def _state_for(self, p, group):
        """``p``'s state, made on first use from ``_initial_state`` (the per-parameter and the multi-tensor
        paths both ask here, so the state is the same whichever made it)."""
        state = self.state[p]
        if len(state) == 0:
            state.update(self._initial_state(p, group))
        return state

    def _initial_state(self, p, group) -> dict:
        """The state an optimiser keeps for ``p`` from its first step (made concretely, even inside a trace:
        zeros are the first step's input); none by default."""
        return {}

    def _run_closure(self, closure):
        """torch's ``step(closure)``: the loss re-evaluated with grad enabled (None without a closure).  Every
        ``step`` starts here, so inside a compile trace this also arranges for the state to be put back if the
        trace fails."""
        if is_compiling():
            self._restore_state_on_abort()
        if closure is None:
            return None
        with grad_mode.enable_grad():
            return closure()

    def _restore_state_on_abort(self):
        """A failed trace must leave the optimiser as it was: state entries made by this step (a momentum
        buffer created on the first step, holding a traced value) are dropped, existing entries get their old
        objects back (their tensors' values are restored by the compiler, which captured them)."""
        state = self.state
        before = {p: dict(s) for p, s in state.items()}

        def undo():
            for p in list(state):
                if p not in before:
                    del state[p]
            for p, s in before.items():
                state[p].clear()
                state[p].update(s)
        on_trace_abort(undo)

    def step(self, closure=None):
        raise NotImplementedError(f"{type(self).__name__}.step is not implemented")

    # --- state_dict ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}``: parameters are numbered
        in group order; the state tensors are the optimiser's own (not copies), as in torch."""
        index = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            for p in g["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in g["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()`` (of this optimiser class, with the same group sizes).  State tensors are
        copied (floating ones cast to their parameter's dtype, ``step`` kept as is); hyperparameters come from
        the saved groups."""
        state_dict = copy.deepcopy(dict(state_dict))
        groups, saved_groups = self.param_groups, state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = {}
        for g, s in zip(groups, saved_groups):
            for old_id, p in zip(s["params"], g["params"]):
                id_map[old_id] = p
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                p = id_map[k]
                state[p] = {key: self._cast_state(p, key, val) for key, val in v.items()}
            else:
                state[k] = v
        self.state = state
        for g, s in zip(groups, saved_groups):     # in place: each group keeps its lr tensor
            s = dict(s)
            s["params"] = g["params"]
            dict.clear(g)
            g.update(s)

    @staticmethod
    def _cast_state(p, key, value):
        if isinstance(value, dict):          # torch recurses into containers (LBFGS keeps lists of tensors)
            return {k: Optimizer._cast_state(p, k, v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(Optimizer._cast_state(p, key, v) for v in value)
        if not isinstance(value, Tensor):
            return value
        arr = value._data
        if key != "step" and p.dtype.is_floating_point and arr.dtype.kind == "f":
            arr = arr.astype(p.dtype.np)
        return Tensor._make(np.array(arr, copy=True))

    # --- compile support ----------------------------------------------------------------------------------
    # hyperparameters this optimiser's step reads with ``group.hyper(key)``: once changed, graph inputs
    runtime_hypers = frozenset()

    def _trace_key(self):
        """What the step's Python code branches on: hyperparameters other than lr (only the sign of those read
        as graph inputs), and which state tensors exist (by identity).  A compiled step is valid while this is
        unchanged."""
        out = []
        rt = self.runtime_hypers
        for g in self.param_groups:
            dyn = g.dynamic & rt if rt and g.dynamic else None
            if dyn:
                hyper = tuple((k, ("dynamic", _sign(v)) if k in dyn else v) for k, v in g.items()
                              if k not in ("params", "lr", "initial_lr") and not isinstance(v, Tensor))
            else:       # (every call checks this: the common case as cheap as it was)
                hyper = tuple((k, v) for k, v in g.items()
                              if k not in ("params", "lr", "initial_lr") and not isinstance(v, Tensor))
            st = tuple(tuple((k, id(v)) for k, v in self.state[p].items()) if p in self.state else None
                       for p in g["params"])
            out.append((hyper, st, id(g.lr_tensor)))
        return tuple(out)

    def _guard_trace(self, value=None):
        """Inside a compile trace: the compiled step is valid while ``_trace_key()`` equals ``value`` (default:
        its value now, after this step made its state)."""
        if not is_compiling():
            return
        ref = weakref.ref(self)

        def key():
            o = ref()
            return None if o is None else o._trace_key()
        guard(key, self._trace_key() if value is None else value, what=_explain_key)

    def __repr__(self):
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    s += f"    {key}: {group[key]}\n"
        return s + ")"


def _explain_key(old, new) -> str:
    """What changed between two ``Optimizer._trace_key`` values (a retrace's explanation)."""
    if new is None:
        return "the optimizer was freed"
    if len(old) != len(new):
        return "the optimizer's number of param groups changed"
    for i, ((h0, s0, l0), (h1, s1, l1)) in enumerate(zip(old, new)):
        d0, d1 = dict(h0), dict(h1)
        for k in sorted(set(d0) | set(d1), key=str):
            a, b = d0.get(k, "(absent)"), d1.get(k, "(absent)")
            if a != b:
                if type(b) is tuple and b[:1] == ("dynamic",) and not (type(a) is tuple and a[:1] == ("dynamic",)):
                    return f"optimizer param group {i}: {k!r} changed; it is a graph input from now on"
                return f"optimizer param group {i}: hyperparameter {k!r} changed from {a!r} to {b!r}"
        if s0 != s1:
            return f"optimizer param group {i}: its state tensors were created or replaced"
        if l0 != l1:
            return f"optimizer param group {i}: its lr tensor was replaced"
    return "the optimizer's hyperparameters or state changed"


def _typename(x):
    if isinstance(x, Tensor):
        return "torch." + {"float32": "FloatTensor", "float64": "DoubleTensor"}.get(x.dtype.name, "Tensor")
    return type(x).__module__ + "." + type(x).__name__ if type(x).__module__ != "builtins" else type(x).__name__




def _lerp_(t, end, weight):
    """``t.lerp_(end, weight)`` with torch's kernel formula: ``t + w * (end - t)`` for ``|w| < 0.5``, else
    ``end - (end - t) * (1 - w)`` (so a weight of 1 gives ``end`` exactly).  ``weight`` a number (the branch is
    chosen in Python) or a 0-d tensor (both computed, ``where`` picks: the same values, traceable)."""
    from ..library import elementary as F
    if isinstance(weight, Tensor):
        small = F.abs(weight) < 0.5
        t.copy_(F.where(small, t + weight * (end - t), end - (end - t) * (1 - weight)))
    elif abs(weight) < 0.5:
        t.add_((end - t) * weight)
    else:
        t.copy_(end - (end - t) * (1 - weight))
    return t


def _check_lr(lr):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")


def _check_adam_args(lr, betas, eps, weight_decay):
    """The Adam family's argument checks (Adam, AdamW, Adamax, NAdam, RAdam), in torch's order and texts."""
    _check_lr(lr)
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _check_unsupported(differentiable, capturable=False, fused=None, foreach=None):
    if fused and foreach:       # torch's refusal (fused, differentiable: jitgrad refuses differentiable below anyway)
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if differentiable:
        raise NotImplementedError("jitgrad.optim: differentiable=True (autograd through the optimiser step) is not "
                                  "supported")


__all__ = ["Optimizer", "required"]
