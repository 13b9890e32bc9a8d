"""Hooks on the tensors autograd saves for backward: ``torch.autograd.graph.saved_tensors_hooks(pack, unpack)``,
``disable_saved_tensors_hooks`` and ``save_on_cpu``.

While a ``saved_tensors_hooks`` context is entered, each tensor an op or a custom Function saves is replaced by
``pack(tensor)`` (any object); backward gets ``unpack(packed)`` each time it reads the saved value (a Node
before its vjp runs, a custom Function's ``ctx.saved_tensors`` at each access).  The recording path pays one
check of ``STATE.stack`` per node.  A value that went through hooks is not version-checked: what ``unpack``
returns is the user's choice (torch does the same).
"""
from __future__ import annotations

import functools

from . import grad_mode


class _State:
    __slots__ = ("stack", "disabled")

    def __init__(self):
        self.stack = []         # (pack, unpack) pairs, innermost last
        self.disabled = None    # the error message while disable_saved_tensors_hooks is entered


STATE = _State()


class saved_tensors_hooks:
    """Context manager: tensors saved for backward inside it are stored as ``pack_hook(tensor)`` and read back
    as ``unpack_hook(packed)``.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1., 2.], requires_grad=True)
    >>> with jg.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda p: p):
    ...     y = x * x
    >>> y.sum().backward()      # d(x*x)/dx = 2 * (saved x), with the saved x doubled
    >>> x.grad
    tensor([4., 8.])
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if STATE.disabled is not None:
            raise RuntimeError(STATE.disabled)
        STATE.stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        # torch tolerates unbalanced exits (an unpack hook leaving its own context): remove this pair if present
        pair = (self.pack_hook, self.unpack_hook)
        stack = STATE.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] == pair:
                del stack[i]
                break


class disable_saved_tensors_hooks:
    """Context manager (and decorator): entering ``saved_tensors_hooks`` inside it raises ``error_message``."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        self._prev = STATE.disabled
        self._prev_stack = STATE.stack
        if STATE.stack:
            raise RuntimeError(self.error_message)
        STATE.disabled = self.error_message
        return self

    def __exit__(self, *exc):
        STATE.disabled = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with disable_saved_tensors_hooks(self.error_message):
                return fn(*a, **k)
        return wrapper


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are kept on the host and moved back to their device when backward reads them."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack(t):
            return t.device, t.detach().to("cpu")

        def unpack(packed):
            device, t = packed
            return t.to(device)
        super().__init__(pack, unpack)


def pack(t, keep_identity=False):
    """``t`` packed by the innermost hooks: (unpack, packed), plus ``t``'s autograd identity when asked (a saved
    input: what ``unpack`` gives back is connected to ``t``'s history, as torch's SavedVariable)."""
    pack_hook, unpack_hook = STATE.stack[-1]
    packed = run_pack_hook(pack_hook, t)
    return (unpack_hook, packed, identity_of(t)) if keep_identity else (unpack_hook, packed)


def identity_of(t):
    """(grad_fn, output_nr, leaf) of a tensor that takes part in autograd, else None."""
    if t.grad_fn is not None:
        return (t.grad_fn, t._out_nr, None)
    if t._requires_grad:
        return (None, 0, t)
    return None


def _with_identity(r, ident):
    """``r`` (what an unpack hook returned) carrying the saved tensor's autograd identity: its grad_fn, or the
    leaf's gradient accumulator, so double backward through a hooked saved value reaches the original."""
    from .tensor import Tensor
    grad_fn, nr, leaf = ident
    if (grad_fn is not None and r.grad_fn is grad_fn) or r is leaf:
        return r
    u = Tensor._make(r._data)
    if grad_fn is not None:
        u.grad_fn, u._out_nr = grad_fn, nr
    else:
        u._requires_grad = True
        u._acc = leaf._accumulator()
    return u


def run_pack_hook(pack_hook, t):
    """``pack_hook(t)`` with grad mode off, refusing a hook that modifies its input in place (torch's rule)."""
    before = t._vc[0]
    with grad_mode.no_grad():
        packed = pack_hook(t)
    if t._vc[0] != before:
        raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
                           "pack hook can not be modified by in-place operations as this can lead to unexpected "
                           "side-effects. Please open an issue if you need to perform in-place operations on the "
                           "input to a pack hook.")
    return packed


def unpack(entry):
    """The tensor that the unpack hook makes of a packed entry (a TypeError unless it is a Tensor)."""
    from .tensor import Tensor
    unpack_hook, packed = entry[0], entry[1]
    r = unpack_hook(packed)
    if not isinstance(r, Tensor):
        raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                        f"{type(r).__name__}")
    if len(entry) > 2 and entry[2] is not None:
        r = _with_identity(r, entry[2])
    return r


def pack_node(node):
    """Replace the saved values of an op's node by packed entries (called when the node is recorded)."""
    from .tensor import Tensor
    ins = node.inputs
    node.packed = (tuple(pack(t, True) if isinstance(t, Tensor) else None for t in ins),
                   tuple(pack(t) if isinstance(t, Tensor) else None for t in node.outputs))
    node.inputs = tuple(None if isinstance(t, Tensor) else t for t in ins)
    node.outputs = (None,) * len(node.outputs)
    node.versions = node.out_versions = None


def unpack_node(node):
    """Give the node its saved values back from the packed entries (before each run of its vjp)."""
    pin, pout = node.packed
    ins = node.inputs
    node.inputs = tuple(unpack(p) if p is not None else ins[i] for i, p in enumerate(pin))
    node.outputs = tuple(unpack(p) if p is not None else None for p in pout)


__all__ = ["saved_tensors_hooks", "disable_saved_tensors_hooks", "save_on_cpu", "STATE"]
