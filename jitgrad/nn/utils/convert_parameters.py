"""``parameters_to_vector`` / ``vector_to_parameters``: the parameters flattened into one vector and back."""
from __future__ import annotations

from ...library.shaping.views import cat
from ...runtime.tensor import Tensor


def _check_same_device(param, old_device):
    dev = param.device
    if old_device is not None and dev != old_device:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return dev


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one vector (differentiable, as torch's)."""
    device = None
    vec = []
    for param in parameters:
        device = _check_same_device(param, device)
        vec.append(param.view(-1))
    return cat(vec)


def vector_to_parameters(vec, parameters) -> None:
    """Copy consecutive slices of ``vec`` into the parameters' ``.data`` (their shapes restored)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    device = None
    pointer = 0
    for param in parameters:
        device = _check_same_device(param, device)
        n = param.numel()
        param.data = vec[pointer:pointer + n].view_as(param).data
        pointer += n


__all__ = ["parameters_to_vector", "vector_to_parameters"]
