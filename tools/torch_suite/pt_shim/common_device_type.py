"""Harness stand-in for torch.testing._internal.common_device_type: CPU instantiation only.

instantiate_device_type_tests(Generic, scope) puts ``GenericCPU`` in ``scope`` (unless ``except_for`` names cpu
or ``only_for`` leaves it out) and removes ``Generic``; each ``test_x(self, device[, dtype], **params)`` becomes
``test_x[_params]_cpu[_dtype]`` called with device "cpu".  CUDA-only decorators mark the test skipped.
"""
from __future__ import annotations

import functools
import inspect
import unittest

import jitgrad as torch

from .common_utils import dtype_name


class dtypes:
    def __init__(self, *args, device_type="all"):
        self.args = args
        self.device_type = device_type

    def __call__(self, fn):
        d = getattr(fn, "dtypes", {})
        d = dict(d)
        d[self.device_type] = self.args
        fn.dtypes = d
        return fn


class dtypesIfCPU(dtypes):
    def __init__(self, *args):
        super().__init__(*args, device_type="cpu")


class dtypesIfCUDA(dtypes):
    def __init__(self, *args):
        super().__init__(*args, device_type="cuda")


class dtypesIfMPS(dtypes):
    def __init__(self, *args):
        super().__init__(*args, device_type="mps")


def _skip(reason):
    def deco(fn):
        return unittest.skip(reason)(fn)
    return deco


def onlyCPU(fn):
    return fn


def onlyNativeDeviceTypes(fn):
    return fn


onlyCUDA = _skip("onlyCUDA: no CUDA in this harness")
onlyMPS = _skip("onlyMPS")
onlyXPU = _skip("onlyXPU")


def deviceCountAtLeast(n):
    if n <= 1:
        def deco(fn):
            @functools.wraps(fn)
            def wrapper(self, device, *a, **k):
                return fn(self, [device], *a, **k)
            wrapper.__wrapped__ = None
            del wrapper.__wrapped__
            return wrapper
        return deco
    return _skip(f"needs {n} devices")


def _identity(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


skipMeta = expectedFailureMPS = skipCUDAIfRocm = skipCUDAIf = skipCPUIf = expectedFailureMeta = _identity
skipXLA = skipMPS = skipCUDA = expectedFailureXLA = largeTensorTest = precisionOverride = _identity
toleranceOverride = _identity


def onlyOn(device_types):
    return (lambda fn: fn) if "cpu" in device_types else _skip(f"only on {device_types}")


def instantiate_device_type_tests(generic_test_class, scope, except_for=None, only_for=None,
                                  include_lazy=False, allow_mps=False, allow_xpu=False):
    def as_list(v):
        return [v] if isinstance(v, str) else list(v or [])
    del scope[generic_test_class.__name__]
    if "cpu" in as_list(except_for) or (only_for is not None and "cpu" not in as_list(only_for)):
        return
    members = {}
    for name, value in generic_test_class.__dict__.items():
        if name.startswith("test"):
            continue
        if name in ("__dict__", "__weakref__"):
            continue
        members[name] = value
    members["device_type"] = "cpu"
    cls = type(generic_test_class.__name__ + "CPU", generic_test_class.__bases__, members)
    cls.__module__ = generic_test_class.__module__

    for name, test in generic_test_class.__dict__.items():
        if not name.startswith("test") or not callable(test):
            continue
        param_sets = [(test, "", {}, lambda _: [])]
        if hasattr(test, "parametrize_fn"):
            param_sets = list(test.parametrize_fn(test, generic_cls=generic_test_class, device_cls=cls))
        dts = getattr(test, "dtypes", None)
        dtype_list = [None]
        if dts:
            dtype_list = list(dts.get("cpu", dts.get("all", ())))
        for (t, suffix, kwargs, dec_fn) in param_sets:
            for d in dec_fn(kwargs):
                t = d(t)
            for dt in dtype_list:
                full = name + (f"_{suffix}" if suffix else "") + "_cpu"
                if dt is not None:
                    full += "_" + ("_".join(dtype_name(x) for x in dt) if isinstance(dt, (tuple, list))
                                   else dtype_name(dt))

                sig = inspect.signature(inspect.unwrap(t)).parameters

                def make(t=t, kwargs=kwargs, dt=dt, sig=sig):
                    @functools.wraps(t)
                    def instantiated(self):
                        # as torch: the device / dtype arguments are passed when the test takes them
                        extra = {}
                        if "device" in sig or "devices" in sig:
                            extra["device"] = "cpu"
                        if dt is not None and "dtype" in sig:
                            extra["dtype"] = dt
                        return t(self, **extra, **kwargs)
                    return instantiated
                inst = make()
                inst.__name__ = full
                setattr(cls, full, inst)
    scope[cls.__name__] = cls
