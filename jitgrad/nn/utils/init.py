"""``skip_init``: build a module without running its parameter initialisation."""
from __future__ import annotations

import inspect

from ...library.creation import factories
from ...runtime import grad_mode
from ...runtime.generator import default_generator


def skip_init(module_cls, *args, **kwargs):
    """An instance of ``module_cls(*args, **kwargs)`` whose parameters and buffers are uninitialised memory
    (``empty_like``), as torch's (which builds on the meta device).  jitgrad has no meta device: the module is
    built normally, then its tensors replaced, and the default generator's state restored, so the random stream
    is as if nothing had been drawn."""
    from ..modules.module import Module
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    state = default_generator.get_state()
    try:
        module = module_cls(*args, **kwargs)
    finally:
        default_generator.set_state(state)
    with grad_mode.no_grad():
        for m in module.modules():
            for table in (m._parameters, m._buffers):
                for k, t in table.items():
                    if t is not None:
                        t.data = factories.empty_like(t)
    return module


__all__ = ["skip_init"]
