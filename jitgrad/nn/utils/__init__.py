"""``jitgrad.nn.utils``: gradient clipping, parameters <-> vector, the hook-based ``weight_norm`` /
``spectral_norm``, ``parametrize`` and ``parametrizations``, conv/linear + BatchNorm fusion, ``skip_init``,
``stateless.functional_call`` and ``rnn`` (padded and packed sequences)."""
from .clip_grad import (clip_grad_norm_, clip_grad_value_, get_total_norm, clip_grads_with_norm_,  # noqa: F401
                        clip_grad_norm)
from .convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from . import rnn  # noqa: F401

# the rest load on first use (PEP 562): `import jitgrad` does not pay for them
_LAZY = {"weight_norm": "norm_hooks", "remove_weight_norm": "norm_hooks", "spectral_norm": "norm_hooks",
         "remove_spectral_norm": "norm_hooks", "fuse_conv_bn_eval": "fusion", "fuse_conv_bn_weights": "fusion",
         "fuse_linear_bn_eval": "fusion", "fuse_linear_bn_weights": "fusion", "skip_init": "init"}
_LAZY_MODULES = ("parametrize", "parametrizations", "stateless", "fusion")


def __getattr__(name):
    import importlib
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        mod = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        globals().update({n: getattr(mod, n) for n, m in _LAZY.items() if m == _LAZY[name]})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_", "clip_grad_norm",
           "parameters_to_vector", "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm",
           "remove_spectral_norm", "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights", "skip_init", "rnn", "parametrize", "parametrizations", "stateless"]
