"""The hook-based (deprecated in torch, still used) ``weight_norm`` and ``spectral_norm``: the weight is
recomputed from new parameters/buffers by a forward pre-hook before every call."""
from __future__ import annotations

import warnings

from ...library.creation import factories

from ...runtime import grad_mode
from ...library.elementary import dot
from ...library.linalg.products import mv
from ..functional.normalization import normalize
from ..parameter import Parameter


def norm_except_dim(v, pow=2, dim=0):
    """The ``pow``-norm of ``v`` over every dim but ``dim``, kept broadcastable to ``v`` (``dim=-1``: the norm of
    the whole tensor, 0-d), as torch.norm_except_dim."""
    if dim == -1:
        return v.norm(pow)
    dim = dim % v.dim()
    dims = [d for d in range(v.dim()) if d != dim]
    return v.norm(pow, dim=dims, keepdim=True) if dims else v.abs()


def _weight_norm(v, g, dim=0):
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook of :func:`weight_norm`: ``name = g * v / ||v||`` (norm over all dims but ``dim``)."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module, name: str, dim: int) -> "WeightNorm":
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.data))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name: str = "weight", dim: int = 0):
    """Reparametrise ``module.<name>`` as ``g * v / ||v||``: new parameters ``<name>_g`` (the norms, over every
    dim but ``dim``; ``dim=None``: the whole tensor) and ``<name>_v`` (the direction); a forward pre-hook
    recomputes the weight before each call.  Warns FutureWarning, as torch (use
    ``parametrizations.weight_norm``)."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name: str = "weight"):
    """Undo :func:`weight_norm`: the current weight becomes a plain Parameter again."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")


class SpectralNorm:
    """The forward pre-hook of :func:`spectral_norm`: ``name = name_orig / sigma``, sigma estimated by power
    iteration on the buffers ``name_u``, ``name_v`` (updated in place in training mode only)."""

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        self.name, self.dim = name, dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but "
                             f"got n_power_iterations={n_power_iterations}")
        self.n_power_iterations, self.eps = n_power_iterations, eps

    def reshape_weight_to_matrix(self, weight):
        w = weight
        if self.dim != 0:
            w = w.permute(self.dim, *[d for d in range(w.dim()) if d != self.dim])
        return w.reshape(w.shape[0], -1)

    def compute_weight(self, module, do_power_iteration: bool):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with grad_mode.no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(normalize(mv(mat.t(), u), dim=0, eps=self.eps))
                    u.copy_(normalize(mv(mat, v), dim=0, eps=self.eps))
                u, v = u.clone(), v.clone()
        sigma = dot(u, mv(mat, v))
        return weight / sigma

    def remove(self, module) -> None:
        with grad_mode.no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps) -> "SpectralNorm":
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with grad_mode.no_grad():
            mat = fn.reshape_weight_to_matrix(weight)
            h, w = mat.shape
            u = normalize(factories.randn(h, dtype=weight.dtype, device=weight.device), dim=0, eps=fn.eps)
            v = normalize(factories.randn(w, dtype=weight.dtype, device=weight.device), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def _is_conv_transpose(module):
    return type(module).__name__ in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """Divide ``module.<name>`` by its spectral norm, estimated by ``n_power_iterations`` power-iteration steps
    per training-mode call (eval mode reuses the stored ``<name>_u``, ``<name>_v``).  The original weight
    becomes ``<name>_orig``; ``dim`` defaults to 1 for transposed convolutions, else 0."""
    if dim is None:
        dim = 1 if _is_conv_transpose(module) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module, name: str = "weight"):
    """Undo :func:`spectral_norm`: the current normalised weight becomes a plain Parameter."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")


__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]
