"""Grad modes (thread-local): no_grad, enable_grad, set_grad_enabled, inference_mode."""
from __future__ import annotations

import functools
import inspect
import threading

from ..tracer.trace import INFERENCE, mark_departed


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.inference_on = False   # read by the hot paths (no property call); written only through ``inference``

    @property
    def inference(self) -> bool:
        """Whether inference mode is on in this thread; setting it keeps the thread's bit in ``DEPARTED``."""
        return self.inference_on

    @inference.setter
    def inference(self, on: bool):
        self.inference_on = on
        mark_departed(INFERENCE, on)


STATE = _State()


def is_grad_enabled() -> bool:
    """True if gradient recording is on in this thread."""
    return STATE.grad_enabled


def is_inference_mode_enabled() -> bool:
    return STATE.inference


class _DecoratorContextManager:
    """A context manager that also decorates functions (each call runs inside a fresh context)."""

    def __call__(self, fn):
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} can only decorate callables, got {fn!r}")
        clone = self._clone
        if inspect.isclass(fn):
            import warnings
            warnings.warn("Decorating classes is deprecated and will be disabled in future versions. You should only "
                          "decorate functions or methods. To preserve the current behavior of class decoration, you "
                          "can directly decorate the `__init__` method and nothing else.", FutureWarning,
                          stacklevel=2)
            cls = fn

            def fn(*args, **kwargs):        # construction runs inside the context, as torch's
                return cls(*args, **kwargs)
        if inspect.isgeneratorfunction(fn):
            return _wrap_generator(fn, clone)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with clone():
                return fn(*args, **kwargs)
        return wrapper

    def _clone(self):
        return type(self)()


def _wrap_generator(fn, clone):
    """A decorated generator function runs each step (not only its creation) inside the context, as in torch."""

    @functools.wraps(fn)
    def gen_wrapper(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with clone():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with clone():
                        gen.close()
                    raise
                except BaseException as e:
                    with clone():
                        response = gen.throw(e)
                else:
                    with clone():
                        response = gen.send(request)
        except StopIteration as e:
            return e.value
    return gen_wrapper


class _NoParamDecorator(_DecoratorContextManager):
    """Allows both ``@no_grad()`` and bare ``@no_grad``."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamDecorator):
    """Context manager (and decorator) that disables gradient recording.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1.], requires_grad=True)
    >>> with jg.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = False

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev
        return False


class enable_grad(_NoParamDecorator):
    """Context manager (and decorator) that enables gradient recording inside no_grad.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1.], requires_grad=True)
    >>> with jg.no_grad():
    ...     with jg.enable_grad():
    ...         y = x * 2
    >>> y.requires_grad
    True
    """

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = True

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev
        return False


class set_grad_enabled(_DecoratorContextManager):
    """Set grad mode on or off: as a plain call, a context manager (restores on exit) or a decorator.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1.], requires_grad=True)
    >>> with jg.set_grad_enabled(False):
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def __init__(self, mode: bool):
        self.prev = STATE.grad_enabled
        self.mode = bool(mode)
        STATE.grad_enabled = self.mode

    def __call__(self, fn):
        # as a decorator the mode applies to each call only: undo the switch __init__ made
        STATE.grad_enabled = self.prev
        return super().__call__(fn)

    def _clone(self):
        return set_grad_enabled(self.mode)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev
        return False


class inference_mode(_DecoratorContextManager):
    """Like no_grad, and tensors created inside are inference tensors: they can't be saved for backward
    or modified in place outside inference mode."""

    def __new__(cls, mode=True):
        if callable(mode):
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)

    def _clone(self):
        return inference_mode(self.mode)

    def __enter__(self):
        self.prev = (STATE.grad_enabled, STATE.inference)
        # as torch's InferenceMode(enabled): grad mode is the opposite of ``mode`` (inference_mode(False) enables it)
        STATE.grad_enabled = not self.mode
        STATE.inference = self.mode

    def __exit__(self, *exc):
        STATE.grad_enabled, STATE.inference = self.prev
        return False


_MULTITHREADING = [True]


class set_multithreading_enabled(_DecoratorContextManager):
    """torch's switch for running backward on one thread per device.  jitgrad's engine always runs backward on
    the calling thread, so the flag is recorded (``is_multithreading_enabled``) and changes nothing else."""

    def __init__(self, mode: bool):
        self.prev = _MULTITHREADING[0]
        self.mode = bool(mode)
        _MULTITHREADING[0] = self.mode

    def __call__(self, fn):
        _MULTITHREADING[0] = self.prev
        return super().__call__(fn)

    def _clone(self):
        return set_multithreading_enabled(self.mode)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        _MULTITHREADING[0] = self.prev
        return False


def is_multithreading_enabled() -> bool:
    return _MULTITHREADING[0]
