"""Harness stand-in for torch.testing._internal.common_utils (test infrastructure only; no torch behaviour).

TestCase.assertEqual follows PyTorch's semantics (comparison.py); parametrize / subtest /
instantiate_parametrized_tests name and compose tests as PyTorch does ("<new>_<old>" suffixes, subtest names,
subtest decorators); gradcheck / gradgradcheck are jitgrad's with common_utils' defaults, except
``check_batched_grad`` (vmap, out of scope: RULE.md) which stays off.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import random
import re
import sys
import unittest
import warnings

import numpy as np

import jitgrad as torch

from .comparison import compare

IS_MACOS = sys.platform == "darwin"
IS_WINDOWS = sys.platform == "win32"
IS_LINUX = sys.platform.startswith("linux")
IS_FBCODE = False
IS_SANDCASTLE = False
TEST_WITH_TORCHDYNAMO = False
TEST_WITH_TORCHINDUCTOR = False
TEST_WITH_SLOW_GRADCHECK = False
TEST_WITH_ROCM = False
TEST_WITH_ASAN = False
TEST_WITH_TSAN = False
TEST_CUDA = False
TEST_MPS = False
TEST_XPU = False
TEST_NUMPY = True
TEST_SCIPY = True
SEED = 1234
# PyTorch's test/expect/ of the source tree run.sh was given (tools/torch_suite/layout.py)
EXPECT_DIR = os.path.join(os.environ.get("JITGRAD_TORCH_SUITE_SRC", ""), "test", "expect")
NATIVE_DEVICES = ("cpu", "cuda", "xpu", "meta")


class HardwareClassification:
    GENERIC = "generic"
    ACCELERATOR = "accelerator"


def set_rng_seed(seed):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


# ---- decorators that do nothing on CPU Linux without dynamo -----------------------------------------------

def _identity_decorator_factory(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


skipIfTorchDynamo = _identity_decorator_factory
skipIfTorchInductor = _identity_decorator_factory
skipIfMPS = _identity_decorator_factory
skipIfXpu = _identity_decorator_factory
skipIfWindows = _identity_decorator_factory
skipIfNoLapack = _identity_decorator_factory
skipIfSlowGradcheckEnv = _identity_decorator_factory
skipIfRocm = _identity_decorator_factory
skipIfCrossRef = _identity_decorator_factory
skipIfTorchDynamo = _identity_decorator_factory
xfailIfTorchDynamo = _identity_decorator_factory
slowTest = _identity_decorator_factory
serialTest = _identity_decorator_factory
markDynamoStrictTest = _identity_decorator_factory


def skipCUDANonDefaultStreamIf(condition):
    return lambda fn: fn


def skipIfNoSciPy(fn):
    return fn


def skipIfNoNumpy(fn):
    return fn


def skipIfNoCuda(fn):
    return unittest.skip("CUDA not available")(fn)


@contextlib.contextmanager
def disable_gc():
    if gc.isenabled():
        try:
            gc.disable()
            yield
        finally:
            gc.enable()
    else:
        yield


@contextlib.contextmanager
def set_warn_always_context(new_val: bool):
    old_val = torch.is_warn_always_enabled()
    torch.set_warn_always(new_val)
    try:
        yield
    finally:
        torch.set_warn_always(old_val)


def scoped_load_inline(fn):     # C++ extensions: out of scope (RULE.md); the tests using it are not run
    return fn


def gradcheck(fn, inputs, **kwargs):
    kwargs.setdefault("fast_mode", True)
    if kwargs.get("fast_mode") is None:
        kwargs["fast_mode"] = True
    if kwargs.get("check_batched_grad") is None:
        kwargs["check_batched_grad"] = False        # vmap: out of scope
    return torch.autograd.gradcheck(fn, inputs, **kwargs)


def gradgradcheck(fn, inputs, grad_outputs=None, **kwargs):
    if kwargs.get("fast_mode") is None:
        kwargs["fast_mode"] = True
    if kwargs.get("check_batched_grad") is None:
        kwargs["check_batched_grad"] = False
    return torch.autograd.gradgradcheck(fn, inputs, grad_outputs, **kwargs)


# ---- parametrization --------------------------------------------------------------------------------------

class subtest:
    __slots__ = ["arg_values", "name", "decorators"]

    def __init__(self, arg_values, name=None, decorators=None):
        self.arg_values = arg_values
        self.name = name
        self.decorators = decorators if decorators else []


def _compose(old, new):
    def composite(test, generic_cls, device_cls):
        for (t_old, n_old, kw_old, d_old) in list(old(test, generic_cls, device_cls)):
            for (t_new, n_new, kw_new, d_new) in new(t_old, generic_cls, device_cls):
                name = n_new + ("_" if n_old and n_new else "") + n_old
                yield (t_new, name, {**kw_old, **kw_new},
                       (lambda kw, a=d_old, b=d_new: list(a(kw)) + list(b(kw))))
    return composite


class _TestParametrizer:
    def _parametrize_test(self, test, generic_cls, device_cls):
        raise NotImplementedError

    def __call__(self, fn):
        if hasattr(fn, "parametrize_fn"):
            fn.parametrize_fn = _compose(fn.parametrize_fn, self._parametrize_test)
        else:
            fn.parametrize_fn = self._parametrize_test
        return fn


def dtype_name(dt):
    return getattr(dt, "name", str(dt).split(".")[-1])


class parametrize(_TestParametrizer):
    def __init__(self, arg_str, arg_values, name_fn=None):
        self.arg_names = [s.strip() for s in arg_str.split(",") if s != ""]
        self.arg_values = arg_values
        self.name_fn = name_fn

    def _repr(self, idx, name, value):
        if isinstance(value, torch.dtype):
            return dtype_name(value)
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, (int, float, str)):
            return f"{name}_{str(value).replace('.', '_')}"
        return f"{name}{idx}"

    def _parametrize_test(self, test, generic_cls, device_cls):
        if not self.arg_names:
            yield (test, "", {}, lambda _: [])
            return
        for idx, values in enumerate(self.arg_values):
            name = None
            decorators = []
            gen_test = test
            if isinstance(values, subtest):
                name, decorators, values = values.name, values.decorators, values.arg_values

                @functools.wraps(test)
                def gen_test(*a, _t=test, **k):
                    return _t(*a, **k)
            values = list(values) if len(self.arg_names) > 1 else [values]
            kwargs = dict(zip(self.arg_names, values))
            if not name:
                name = self.name_fn(*values) if self.name_fn else \
                    "_".join(self._repr(idx, a, v) for a, v in zip(self.arg_names, values))
            yield (gen_test, name, kwargs, (lambda _, d=decorators: d))


def instantiate_parametrized_tests(generic_cls):
    for attr_name in tuple(dir(generic_cls)):
        class_attr = getattr(generic_cls, attr_name)
        if not hasattr(class_attr, "parametrize_fn"):
            continue
        delattr(generic_cls, attr_name)
        for (test, suffix, kwargs, dec_fn) in class_attr.parametrize_fn(class_attr, generic_cls=generic_cls,
                                                                         device_cls=None):
            full_name = f"{test.__name__}_{suffix}"
            for d in dec_fn(kwargs):
                test = d(test)

            def make(test=test, kwargs=kwargs):
                @functools.wraps(test)
                def instantiated(self):
                    test(self, **kwargs)
                return instantiated
            if hasattr(generic_cls, full_name):
                raise AssertionError(f"Redefinition of test {full_name}")
            inst = make()
            inst.__name__ = full_name
            setattr(generic_cls, full_name, inst)
    return generic_cls


def run_tests():
    unittest.main()


# ---- TestCase ---------------------------------------------------------------------------------------------

class TestCase(unittest.TestCase):
    precision = 0.0
    rel_tol = 0.0
    _ignore_not_implemented_error = False
    maxDiff = None

    def setUp(self):
        set_rng_seed(SEED)

    # the one name the harness maps inside expected texts: "torch" in an expected error / warning pattern also
    # matches "jitgrad" (torch.Size -> jitgrad.Size, torch.float64 -> jitgrad.float64); nothing else is relaxed
    @staticmethod
    def _map_name(regex):
        if isinstance(regex, str):
            return regex.replace("torch", "(?:torch|jitgrad)")
        if isinstance(regex, re.Pattern):
            return re.compile(regex.pattern.replace("torch", "(?:torch|jitgrad)"), regex.flags)
        return regex

    def assertRaisesRegex(self, expected_exception, expected_regex, *args, **kwargs):
        return super().assertRaisesRegex(expected_exception, self._map_name(expected_regex), *args, **kwargs)

    def assertWarnsRegex(self, expected_warning, expected_regex, *args, **kwargs):
        return super().assertWarnsRegex(expected_warning, self._map_name(expected_regex), *args, **kwargs)

    def assertRegex(self, text, expected_regex, msg=None):
        return super().assertRegex(text, self._map_name(expected_regex), msg)

    def assertEqual(self, x, y, msg=None, *, atol=None, rtol=None, equal_nan=True, exact_dtype=True,
                    exact_device=False, exact_layout=False, exact_stride=False, exact_is_coalesced=False):
        __tracebackhide__ = True
        try:
            compare(x, y, rtol=rtol, atol=atol, rtol_override=self.rel_tol, atol_override=self.precision,
                    equal_nan=equal_nan, exact_dtype=exact_dtype, exact_device=exact_device)
        except AssertionError as e:
            if callable(msg):
                raise AssertionError(msg(str(e))) from None
            raise AssertionError(f"{e}\n{msg}" if isinstance(msg, str) else str(e)) from None

    def assertNotEqual(self, x, y, msg=None, *, atol=None, rtol=None, **kwargs):
        with self.assertRaises(AssertionError, msg=msg):
            self.assertEqual(x, y, msg, atol=atol, rtol=rtol, **kwargs)

    def assertEqualIgnoreType(self, *args, **kwargs):
        return self.assertEqual(*args, exact_dtype=False, **kwargs)

    def assertEqualTypeString(self, x, y):
        self.assertEqual(x.device, y.device)
        self.assertEqual(x.dtype, y.dtype)

    def assertObjectIn(self, obj, iterable):
        for elem in iterable:
            if id(obj) == id(elem):
                return
        raise AssertionError("object not found in iterable")

    @contextlib.contextmanager
    def assertWarnsOnceRegex(self, category, regex=""):
        pattern = re.compile(regex)
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            with set_warn_always_context(True):
                yield
        if len(ws) == 0:
            self.fail("no warning caught")
        self.assertTrue(any(type(w.message) is category for w in ws))
        self.assertTrue(any(re.match(pattern, str(w.message)) for w in ws), f"{pattern}, {[w.message for w in ws]}")

    @contextlib.contextmanager
    def assertNotWarn(self, msg=""):
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            yield
        self.assertTrue(len(ws) == 0, msg + "\n" + "\n".join(str(w.message) for w in ws))

    def assertExpected(self, s, subname=None):
        """Compare with PyTorch's expect file test/expect/<Class>.<test>[-subname].expect (in the PyTorch
        source dir, $JITGRAD_TORCH_SUITE_SRC)."""
        cls = type(self).__name__
        test = self._testMethodName
        name = f"{cls}.{test}" + (f"-{subname}" if subname else "") + ".expect"
        with open(os.path.join(EXPECT_DIR, name), encoding="utf-8") as f:
            expected = f.read()
        self.assertEqual(s.rstrip("\n"), expected.rstrip("\n"))

    def assertExpectedInline(self, actual, expect, skip=0):
        # expecttest's rule: a leading newline of the literal is dropped, the rest compared exactly
        if expect.startswith("\n"):
            expect = expect[1:]
        self.assertMultiLineEqual(expect, actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        try:
            callable(*args, **kwargs)
        except exc_type as e:
            self.assertExpectedInline(str(e), expect)
            return
        self.fail("Did not raise when expected to")

    def assertLeaksNoCudaTensors(self, name=None):
        return contextlib.nullcontext()

    def enforceNonDefaultStream(self):
        return contextlib.nullcontext()

    def wrap_with_cuda_memory_check(self, method):
        return method


__all__ = [n for n in dir() if not n.startswith("_")]
