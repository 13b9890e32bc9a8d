"""Harness stand-in for torch.testing._internal.common_dtype (dtype tuples over jitgrad's dtypes)."""
import jitgrad as torch


def floating_types():
    return (torch.float32, torch.float64)


def floating_types_and(*dtypes):
    return (torch.float32, torch.float64) + tuple(dtypes)


def integral_types():
    return (torch.uint8, torch.int32, torch.int64)


def all_types():
    return floating_types() + integral_types()
