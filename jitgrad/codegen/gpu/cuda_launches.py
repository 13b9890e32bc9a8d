"""The CUDA target's program under construction (``Launches``): the builder its step emitters write into.

It holds the places (``places.Places``, shared with the CPU target), the kernel launches in order and the
distinct kernels, and emits the steps every kind needs: copies (views materialised, outputs, write-backs), anomaly
checks and host steps.  The emitters are functions registered per step kind (``lowering.emits``, target
``"cuda"``) in ``cuda_steps.py``, which imports this module; ``cuda.CudaGraph`` walks a plan through them and runs
the result.
"""
from __future__ import annotations

import numpy as np

from ...ir.plan import Group
from . import cuda_kernels as K
from ..kernels.index_checks import NO_KEY
from ..places import Place, Places, bcast_strides, coalesce


class Step:
    """A kernel launch (``kernel``, ``grid``, ``block``, ``args``: ints or Roots) or a host step (``eqn``).
    ``guarded``: a write-back; ``state_write``: writes a state input in place (both skipped once a step raised)."""
    __slots__ = ("kind", "kernel", "grid", "block", "args", "label", "eqn", "ins", "outs", "guarded", "scope",
                 "state_write")

    def __init__(self, kind, label, kernel=None, grid=0, block=0, args=(), eqn=None, scope=()):
        self.kind, self.label, self.kernel, self.grid, self.block, self.args = kind, label, kernel, grid, block, args
        self.eqn, self.ins, self.outs, self.guarded, self.scope = eqn, (), (), False, scope
        self.state_write = False


class Launches:
    """The launches of one plan for CUDA (see the module docstring); ``finish()`` after the plan's steps adds the
    outputs and the write-backs."""

    def __init__(self, plan, writes, cfg, check_ids):
        self.graph = plan.graph
        self.cfg = cfg
        self.check_ids = check_ids
        self.places = Places(plan.graph, plan, writes, check_ids, copy=self.copy)
        self.steps, self.kernels = [], {}
        self.native = True
        self.index_steps = []       # eqns of the bounds-checked steps (gather, scatter), by step id
        self.key_next = 0           # the next step's key base (index_step)
        self.outputs = []

    def index_step(self, e, n: int = 1) -> tuple:
        """Eqn ``e`` as the next step that records index errors (a gather or scatter over ``n`` flat positions, or
        a guarded eqn): its (step id, key base).  A record's key is the base plus its flat position, and each
        step's bases start past every earlier step's positions, so the least key is the first error in launch
        order, then in position order, for positions of any size (``cuda_kernels.claim``).  CUDA programs are laid
        out per concrete shape (their grids too): a symbolic ``n`` is refused, naming the op."""
        if not isinstance(n, (int, np.integer)):
            raise NotImplementedError(f"{e.op.name}: a CUDA program's index checks need each step's size when the "
                                      f"program is laid out, got the symbolic size {n}")
        sid, kb = len(self.index_steps), self.key_next
        self.key_next += max(int(n), 1)
        if self.key_next >= NO_KEY:
            raise ValueError(f"{e.op.name}: the program's index checks span {self.key_next} positions, more than "
                             "an int64 error key can order")
        self.index_steps.append(e)
        return sid, kb

    def place(self, v) -> Place:
        return self.places.place(v)

    def launch(self, kern, n, args, label, scope=(), grid=None, block=None) -> Step:
        """Append a launch of ``kern`` over ``n`` threads (grid-stride) or on an explicit ``grid`` x ``block``."""
        kern = self.kernels.setdefault(kern.key, kern)
        if grid is None:
            t = self.cfg["threads"]
            grid, block = max(1, min(-(-n // t), self.cfg["blocks"])), t
        st = Step("kernel", label, kern, grid, block, list(args), scope=scope)
        if n == 0:
            st.kind = "empty"
        self.steps.append(st)
        return st

    @staticmethod
    def operand(place, strides):
        """A kernel's arguments for one operand: its root, element offset and strides."""
        return [place.root, place.offset] + [int(s) for s in strides]

    def copy(self, src: Place, dst: Place, label) -> Step:
        """A copy kernel from ``src`` into ``dst`` (broadcast, cast, any strides)."""
        it = dst.shape
        sst = bcast_strides(src, it) if src.shape != it else list(src.strides)
        shape, (sst, dst_st) = coalesce(it, [sst, list(dst.strides)])
        n = int(np.prod(it)) if it else 1
        kern = K.gen_copy(src.dtype, dst.dtype, len(shape))
        return self.launch(kern, n, [n] + shape + self.operand(src, sst) + self.operand(dst, dst_st), label)

    def after_step(self, s):
        """After each plan entry: the anomaly check of a single eqn's output (groups check inside their loop)."""
        if not isinstance(s, Group):
            self.check(s, self.places[s.outs[0]])

    def check(self, e, place: Place):
        """An anomaly check of ``e``'s value at ``place`` (when ``e`` is checked)."""
        if e not in self.check_ids:
            return
        shape, (sts,) = coalesce(place.shape, [list(place.strides)])
        n = int(np.prod(place.shape)) if place.shape else 1
        self.launch(K.gen_check(place.dtype, len(shape)), n, [n] + shape + self.operand(place, sts) +
                    ["err", self.check_ids[e]], f"check {e.op.name}", e.scope)

    def host_step(self, e, ins, outs, label) -> Step:
        """Eqn ``e`` run by its NumPy impl on host copies of ``ins``, its results uploaded into ``outs``."""
        self.native = False
        st = Step("host", label, eqn=e, scope=e.scope)
        st.ins, st.outs = tuple(ins), tuple(outs)
        self.steps.append(st)
        return st

    def finish(self):
        """After the plan's steps: where each output is, and the write-backs (after every step, and only when no
        check failed and no step raised)."""
        self.outputs = [self.places.output(v) for v in self.graph.outputs]      # ("input", k) | ("fresh", j)
        for src, dst in self.places.write_backs():
            st = self.copy(src, dst, "write-back")
            self.steps.remove(st)
            st.guarded = True
            self.steps.append(st)


__all__ = ["Launches", "Step"]
