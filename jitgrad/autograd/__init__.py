"""``jitgrad.autograd``: the torch.autograd-shaped public namespace."""
from ..runtime.anomaly import detect_anomaly, set_detect_anomaly, is_anomaly_enabled, is_anomaly_check_nan_enabled
from ..runtime.engine import backward, grad
from ..runtime.function import Function, FunctionCtx, once_differentiable, InplaceFunction, NestedIOFunction
from ..runtime.grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled
from ..runtime.gradcheck import gradcheck, gradgradcheck, GradcheckError
from ..runtime.tensor import Tensor
from . import functional, profiler, graph  # noqa: F401


def Variable(tensor, requires_grad=False, volatile=False):
    """Deprecated: returns ``tensor`` itself (a Tensor), with ``requires_grad`` set when asked."""
    from ..runtime.factories import tensor as _tensor
    t = tensor if isinstance(tensor, Tensor) else _tensor(tensor)
    if requires_grad:
        t.requires_grad_(True)
    return t


__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "gradcheck", "gradgradcheck", "GradcheckError",
           "detect_anomaly", "set_detect_anomaly", "Variable", "functional", "profiler", "graph"]
