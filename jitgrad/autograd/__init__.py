"""``jitgrad.autograd``: the torch.autograd-shaped public namespace."""
import sys

from ..runtime.anomaly import detect_anomaly, set_detect_anomaly, is_anomaly_enabled, is_anomaly_check_nan_enabled
from ..runtime.backward.engine import backward, _calculate_shape  # noqa: F401
from .batched_grad import grad
from ..runtime.function import Function, FunctionCtx, once_differentiable, InplaceFunction, NestedIOFunction
from ..runtime.grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled, \
    set_multithreading_enabled
from ..runtime.tensor import Tensor
from ..runtime.saved_access import SavedTensor  # noqa: F401
from . import functional, profiler, graph, function, gradcheck, forward_ad  # noqa: F401
# as in torch, the names are the functions (the submodule stays importable: ``from ...gradcheck import gradcheck``)
from .gradcheck import gradcheck, gradgradcheck, GradcheckError  # noqa: E402,F811


def kineto_available() -> bool:
    """False: jitgrad's profiler is its own event recorder, not the Kineto library."""
    return False


class _ExecutionEngine:
    """``Variable._execution_engine``: the hook torch code uses to queue a callback that runs when the
    backward now running finishes."""

    @staticmethod
    def queue_callback(fn):
        from ..runtime.backward.engine import queue_callback
        queue_callback(fn)


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)      # as in torch, every tensor is a Variable


class Variable(metaclass=_VariableMeta):
    """Deprecated: ``Variable(t, requires_grad=False)`` returns a Tensor (a new leaf sharing ``t``'s storage),
    requiring grad when asked; ``isinstance(t, Variable)`` holds for every tensor.

    As in torch, the argument itself is left alone: ``Variable(t, requires_grad=True)`` does not make ``t``
    require grad.
    """
    _execution_engine = _ExecutionEngine()

    def __new__(cls, tensor, requires_grad=False, volatile=False):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(tensor).__name__}")
        t = tensor.detach()
        if requires_grad:
            t.requires_grad_(True)
        return t


def __getattr__(name):
    """``torch.autograd.torch`` is ``torch``: code written for torch reaches it.  The parent package is the one
    importing this one (so it is in ``sys.modules`` already): no import, and no import circle."""
    if name == "torch":
        return sys.modules[__name__.rpartition(".")[0]]
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "gradcheck", "gradgradcheck", "GradcheckError",
           "detect_anomaly", "set_detect_anomaly", "Variable", "functional", "profiler", "graph", "kineto_available",
           "forward_ad",
           "set_multithreading_enabled"]
