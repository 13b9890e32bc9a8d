"""``torch.utils.checkpoint``: trade compute for memory by not keeping a function's intermediates; its forward
runs again during backward.

- ``use_reentrant=True`` (torch's default when not given, with torch's warning): a custom Function that runs
  ``function`` without grad, keeps only the inputs, and in backward re-runs it with grad and backpropagates
  through the rerun (gradients reach parameters the function closes over, as torch).
- ``use_reentrant=False``: ``function`` runs with grad under saved-tensor hooks that keep an index instead of
  each saved tensor; the first saved tensor backward asks for re-runs the function once and hands out the
  recomputed values.

``preserve_rng_state`` restores the default generator's state for the rerun, so dropout draws the same mask.
Inside ``@jitgrad.compile`` the call is inlined (the graph's own fusion and workspace do the memory work), so
results and gradients are those of ``function``.
"""
from __future__ import annotations

import warnings

from ..runtime import grad_mode
from ..runtime.function import Function
from ..runtime.generator import default_generator
from ..runtime.saved_hooks import saved_tensors_hooks
from ..runtime.tensor import Tensor


def _rng_state():
    return default_generator._seed.clone(), default_generator._offset.clone()


class _rng_restored:
    """Within it the default generator is at ``state``; afterwards back where it was."""

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        if self.state is not None:
            self.now = _rng_state()
            with grad_mode.no_grad():
                default_generator._seed.copy_(self.state[0])
                default_generator._offset.copy_(self.state[1])

    def __exit__(self, *exc):
        if self.state is not None:
            with grad_mode.no_grad():
                default_generator._seed.copy_(self.now[0])
                default_generator._offset.copy_(self.now[1])


def _detached(args):
    out = []
    for a in args:
        if isinstance(a, Tensor):
            d = a.detach()
            d.requires_grad_(a.requires_grad)
            out.append(d)
        else:
            out.append(a)
    return tuple(out)


class CheckpointFunction(Function):
    """The reentrant checkpoint: forward without grad, backward by recomputation."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng = _rng_state() if preserve_rng_state else None
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        with grad_mode.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        from ..runtime.backward.engine import backward as run_backward
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        detached = _detached(inputs)
        with _rng_restored(ctx.rng), grad_mode.enable_grad():
            outputs = ctx.run_function(*detached)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        outs, gs = [], []
        for o, g in zip(outputs, grads):
            if isinstance(o, Tensor) and o.requires_grad and g is not None:
                outs.append(o)
                gs.append(g)
        if not outs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        run_backward(outs, gs)
        return (None, None) + tuple(d.grad if isinstance(d, Tensor) else None for d in detached)


def _checkpoint_without_reentrant(function, preserve_rng_state, args, kwargs):
    rng = _rng_state() if preserve_rng_state else None
    holder = {"values": None}
    count = [0]

    def pack(t):
        count[0] += 1
        return count[0] - 1

    def unpack(idx):
        if holder["values"] is None:
            values = []

            def keep(t):
                values.append(t)
                return t

            with _rng_restored(rng), grad_mode.enable_grad(), saved_tensors_hooks(keep, lambda t: t):
                function(*_detached(args), **kwargs)
            holder["values"] = values
        return holder["values"][idx]

    with saved_tensors_hooks(pack, unpack):
        return function(*args, **kwargs)


def _is_compiling():
    from ..jit.guards import is_compiling
    return is_compiling()


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               early_stop=True, **kwargs):
    """``function(*args, **kwargs)`` without keeping its intermediates for backward: they are recomputed by
    running ``function`` again when backward needs them (see the module docstring for the two variants).
    ``preserve_rng_state=True`` (a keyword) makes the rerun draw the same random numbers."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in "
                      "PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
                      "use_reentrant=False is recommended, but if you need to preserve the current default behavior, "
                      "you can pass use_reentrant=True. Refer to docs for more details on the differences between "
                      "the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if use_reentrant:
        if context_fn is not None or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
    elif determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got {determinism_check}")
    if _is_compiling():
        return function(*args, **kwargs)
    if use_reentrant:
        if grad_mode.STATE.grad_enabled and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        return CheckpointFunction.apply(function, preserve, *args)
    if context_fn is not None:
        forward_ctx, recompute_ctx = context_fn()
        with forward_ctx:
            return _checkpoint_without_reentrant(function, preserve, args, kwargs)
    return _checkpoint_without_reentrant(function, preserve, args, kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run a sequence of modules (or a ``Sequential``) in ``segments`` chunks, checkpointing all chunks but the
    last, as torch's."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
                      "explicitly. In version 2.9 we will raise an exception if use_reentrant is not passed. "
                      "use_reentrant=False is recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more details on the differences "
                      "between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    from ..nn.modules.container import Sequential
    if isinstance(functions, Sequential):
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)


__all__ = ["checkpoint", "checkpoint_sequential"]
