"""Harness stand-in for torch.testing: make_tensor (a test-input factory) and assert_close over jitgrad."""
import math

import jitgrad as torch

from .comparison import compare


def make_tensor(*shape, dtype, device="cpu", low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    """Uniform values in [low, high) (default [-9, 9]) of ``dtype``, as torch.testing.make_tensor."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if dtype is torch.bool:
        t = torch.randint(0, 2, shape).to(torch.bool)
    elif not dtype.is_floating_point:
        lo = -9 if low is None else math.ceil(low)
        hi = 10 if high is None else math.ceil(high)
        t = torch.randint(lo, hi, shape, dtype=dtype)
    else:
        lo = -9.0 if low is None else low
        hi = 9.0 if high is None else high
        t = (torch.rand(shape, dtype=dtype) * (hi - lo) + lo)
        if exclude_zero:
            t = torch.where(t == 0, torch.full_like(t, 1e-3), t)
    if noncontiguous and t.numel() > 1:
        t = torch.repeat_interleave(t.reshape(-1), 2).reshape(*shape, 2)[..., 0] if shape else t
    if requires_grad:
        t = t.detach().requires_grad_(True)
    return t


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_device=True, check_dtype=True,
                 msg=None, **kw):
    compare(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, exact_dtype=check_dtype,
            exact_device=check_device)

__path__ = []   # torch.testing is a package (torch.testing._internal.* below it)
