"""Harness stand-in for the one helper test_autograd.py takes from common_methods_invocations."""
import jitgrad as torch


def mask_not_all_zeros(shape):
    """A random boolean mask with at least one True (as the torch helper of the same name)."""
    assert len(shape) > 0
    while True:
        result = torch.randn(shape).gt(0)
        if result.sum() > 0:
            return result
