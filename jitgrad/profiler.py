"""``jitgrad.profiler``: torch.profiler's names over jitgrad's profiler (runtime/profiler.py).

``profile(activities=[ProfilerActivity.CPU], record_shapes=..., profile_memory=..., with_stack=...)`` records the
same events as ``jitgrad.autograd.profiler.profile``; ``ProfilerActivity.CUDA`` turns on device timing.  A
``schedule`` is honoured by ``step()``: events are kept only during the active steps, and ``on_trace_ready(prof)``
runs at the end of each active span.  There is no Kineto (``kineto_available()`` is False).
"""
from __future__ import annotations

import enum

from .runtime.profiler import profile as _autograd_profile, record_function  # noqa: F401


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    """The activities this build can record."""
    from . import cuda
    return {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if cuda.is_available() else set())


def kineto_available() -> bool:
    return False


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """torch.profiler.schedule: step number -> ProfilerAction (skip_first steps, then cycles of wait, warmup,
    active steps; ``repeat`` cycles, 0 for no limit)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError("Invalid profiler schedule arguments")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return action


class profile(_autograd_profile):
    """torch.profiler.profile over jitgrad's event recorder."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None):
        acts = set(activities) if activities is not None else supported_activities()
        cuda = ProfilerActivity.CUDA in acts if use_cuda is None else use_cuda
        super().__init__(enabled=True, use_cuda=cuda, record_shapes=record_shapes, with_stack=with_stack,
                         profile_memory=profile_memory)
        self.activities = acts
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.step_num = 0

    def __enter__(self):
        super().__enter__()
        return self

    def __exit__(self, *exc):
        r = super().__exit__(*exc)
        if self.on_trace_ready is not None and (self.schedule is None or self.schedule(self.step_num) in (
                ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)):
            self.on_trace_ready(self)
        return r

    def start(self):
        self.__enter__()

    def stop(self):
        self.__exit__(None, None, None)

    def step(self):
        """Advance the schedule by one step (a training iteration)."""
        if self.schedule is not None and self.schedule(self.step_num) is ProfilerAction.RECORD_AND_SAVE \
                and self.on_trace_ready is not None:
            self.on_trace_ready(self)
        self.step_num += 1


__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "supported_activities",
           "kineto_available"]
