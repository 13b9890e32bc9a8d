"""``nn.DataParallel``: torch's single-process multi-GPU wrapper.

torch's DataParallel splits each batch over the visible GPUs and runs a replica on each; with no GPU it keeps no
device ids and calls the module directly.  jitgrad does the latter everywhere: the wrapped module runs once, on
the device its parameters are on (multi-GPU replication is not implemented; use DistributedDataParallel for data
parallelism).  The wrapper is a Module holding the module as ``.module``, so ``state_dict`` keys carry torch's
``module.`` prefix and parameters, hooks and ``train()``/``eval()`` reach the wrapped module.
"""
from __future__ import annotations

from ..modules.module import Module


class DataParallel(Module):
    """Wrap ``module``; calling the wrapper calls ``module`` (see the module docstring)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: module must be a jitgrad.nn.Module, got {type(module).__name__}")
        self.module = module
        self.device_ids = []        # torch's value when it does not replicate (no GPUs)
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """The functional form: ``module(*inputs, **module_kwargs)`` (torch.nn.parallel.data_parallel)."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return module(*inputs, **(module_kwargs or {}))


__all__ = ["DataParallel", "data_parallel"]
