"""``jitgrad.profiler``: torch.profiler's names over jitgrad's profiler (autograd/profiler.py).

``profile(activities=[ProfilerActivity.CPU], record_shapes=..., profile_memory=..., with_stack=...)`` records the
same events as ``jitgrad.autograd.profiler.profile``; ``ProfilerActivity.CUDA`` turns on device timing.  A
``schedule`` is honoured by ``step()``: events are kept only during the active steps, and ``on_trace_ready(prof)``
runs at the end of each active span (``tensorboard_trace_handler(dir)`` writes each span's trace there).  There is no Kineto (``kineto_available()`` is False).
"""
from __future__ import annotations

import enum

from .autograd.profiler import profile as _autograd_profile, record_function  # noqa: F401


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


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def _record_always(step):
    """The schedule of a profile without one: every step is recorded (one span, saved at the end)."""
    return ProfilerAction.RECORD


class profile(_autograd_profile):
    """torch.profiler.profile over jitgrad's event recorder.

    As in torch, each active span of the schedule is a recording of its own: it starts with the first RECORD step
    and ends with the step that ``step()`` leaves in RECORD_AND_SAVE (or at ``stop()`` / the end of the ``with``
    block); ``on_trace_ready(prof)`` then runs on the finished span, whose events ``prof.events()``,
    ``key_averages()`` and ``export_chrome_trace()`` show.  Wait and warmup steps record nothing."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None):
        acts = set(activities) if activities is not None else supported_activities()
        cuda = ProfilerActivity.CUDA in acts if use_cuda is None else use_cuda
        super().__init__(enabled=True, use_cuda=cuda, record_shapes=record_shapes, with_stack=with_stack,
                         profile_memory=profile_memory)
        self.activities = acts
        self.schedule = schedule if schedule is not None else _record_always
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._recording = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        self.current_action = self.schedule(self.step_num)
        if self.current_action in _RECORDING:
            self._start_span()

    def stop(self):
        if self._recording:
            self._end_span()

    def step(self):
        """Advance the schedule by one step (a training iteration): a span whose last step this was ends (and
        ``on_trace_ready`` runs), and the next step starts one if it is to be recorded."""
        prev = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if prev is ProfilerAction.RECORD_AND_SAVE and self._recording:
            self._end_span()
        if self.current_action in _RECORDING and not self._recording:
            self._start_span()

    def _start_span(self):
        self.entered = False          # a fresh recording per span (the recorder itself is not reentrant)
        _autograd_profile.__enter__(self)
        self._recording = True

    def _end_span(self):
        _autograd_profile.__exit__(self, None, None, None)
        self._recording = False
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An ``on_trace_ready`` that writes each span's Chrome trace to ``dir_name`` (created if missing) as
    ``{worker_name}.{time_ns}.pt.trace.json`` (``.gz`` with ``use_gzip``), the names TensorBoard's profiler
    plugin reads; ``worker_name`` defaults to ``{hostname}_{pid}``, as in torch."""
    import os
    import socket
    import time

    def handler_fn(prof) -> None:
        nonlocal worker_name
        if not os.path.isdir(dir_name):
            try:
                os.makedirs(dir_name, exist_ok=True)
            except Exception as e:
                raise RuntimeError("Can't create directory: " + dir_name) from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, file_name))
    return handler_fn


__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "supported_activities",
           "kineto_available", "tensorboard_trace_handler"]
