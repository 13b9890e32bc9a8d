"""``jitgrad.nn.utils``: gradient clipping, parameters <-> vector, the hook-based ``weight_norm`` /
``spectral_norm``, ``parametrize`` and ``parametrizations``, conv/linear + BatchNorm fusion, ``skip_init``,
``stateless.functional_call`` and ``rnn`` (padded and packed sequences)."""
from .clip_grad import (clip_grad_norm_, clip_grad_value_, get_total_norm, clip_grads_with_norm_,  # noqa: F401
                        clip_grad_norm)
from .convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from .weight_norm import weight_norm, remove_weight_norm, spectral_norm, remove_spectral_norm  # noqa: F401
from .fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval,  # noqa: F401
                     fuse_linear_bn_weights)
from .init import skip_init  # noqa: F401
from . import rnn, parametrize, parametrizations, stateless  # noqa: F401

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_", "clip_grad_norm",
           "parameters_to_vector", "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm",
           "remove_spectral_norm", "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights", "skip_init", "rnn", "parametrize", "parametrizations", "stateless"]
