"""Activation modules with torch's arguments, defaults and reprs: ``ReLU``, ``GELU``, ``Tanh``, ``Sigmoid``,
``Softmax``, ``SiLU``, ``Softplus``, ``LogSigmoid``, ``Threshold``, ``Hardtanh``, ``ReLU6``, ``ELU``, ``CELU``, ``SELU``,
``LeakyReLU``, ``PReLU`` (learnable slopes), ``RReLU``, ``Hardsigmoid``, ``Hardswish``, ``Mish``, ``Hardshrink``,
``Softshrink``, ``Tanhshrink``, ``Softsign``, ``GLU``, ``Softmin``, ``LogSoftmax``, ``Softmax2d``; and, as in torch,
``MultiheadAttention`` (over ``F.multi_head_attention_forward``).

>>> import jitgrad as jg
>>> jg.nn.LeakyReLU(0.1)(jg.tensor([-1.0, 2.0]))
tensor([-0.1000,  2.0000])
"""
from __future__ import annotations

import warnings

from ...library import elementary as F
from .. import functional, init as _init, init
from ..functional import activation as P
from ..functional.attention import _canonical_mask, _none_or_dtype, multi_head_attention_forward
from .linear import NonDynamicallyQuantizableLinear
from .module import Module
from ..parameter import Parameter, _empty


class ReLU(Module):
    """``max(x, 0)``; ``inplace=True`` writes into the input."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        if self.inplace:
            return input.clamp_(min=0)
        return F.relu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return functional.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    """Elementwise ``tanh``."""

    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    """Elementwise logistic sigmoid."""

    def forward(self, input):
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along ``dim`` (torch's legacy choice of dim when None: 0 for 0-, 1- and 3-D input, else 1)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim
        if dim is None:
            import warnings
            warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include "
                          "dim=X as an argument.", stacklevel=2)
            dim = 0 if input.ndim in (0, 1, 3) else 1
        return F.softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class SiLU(Module):
    """``x * sigmoid(x)`` (swish); ``inplace=True`` writes into the input."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return functional.silu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return functional.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    """Elementwise ``log(sigmoid(x))``."""

    def forward(self, input):
        return functional.logsigmoid(input)


def _inplace_str(inplace):
    return ", inplace=True" if inplace else ""


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return P.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_str(self.inplace)}"


class Hardtanh(Module):
    """``clamp(x, min_val, max_val)`` (gradient 0 at the bounds, as torch); ``min_value``/``max_value`` are torch's
    deprecated spellings."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False, min_value=None,
                 max_value=None):
        super().__init__()
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated and renamed to `min_val`", FutureWarning,
                          stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated and renamed to `max_val`", FutureWarning,
                          stacklevel=2)
            max_val = max_value
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({self.max_val}) must be greater than min_val ({self.min_val})")

    def forward(self, input):
        return P.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_str(self.inplace)}"


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``."""

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ELU(Module):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return P.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_str(self.inplace)}"


class CELU(ELU):
    """``x`` where ``x > 0``, else ``alpha * (exp(x / alpha) - 1)``."""

    def forward(self, input):
        return P.celu(input, self.alpha, self.inplace)


class _InplaceOnly(Module):
    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class SELU(_InplaceOnly):
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    _fn = staticmethod(P.selu)


class Mish(_InplaceOnly):
    """``x * tanh(softplus(x))``."""
    _fn = staticmethod(P.mish)


class Hardsigmoid(_InplaceOnly):
    """``relu6(x + 3) / 6``."""
    _fn = staticmethod(P.hardsigmoid)

    def extra_repr(self):       # torch prints no inplace here
        return ""


class Hardswish(_InplaceOnly):
    """``x * relu6(x + 3) / 6``."""
    _fn = staticmethod(P.hardswish)

    def extra_repr(self):       # torch prints no inplace here
        return ""


class LeakyReLU(Module):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return P.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}{_inplace_str(self.inplace)}"


class RReLU(Module):
    """Randomised leaky ReLU: slopes drawn from U(lower, upper) in training, their mean in eval."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return P.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{_inplace_str(self.inplace)}"


class PReLU(Module):
    """``x`` where ``x > 0``, else ``a * x`` with learnable ``weight`` ``a`` (``num_parameters`` slopes: 1, or one
    per channel, initialised to ``init``)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = Parameter(_empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init.constant_(self.weight, self.init)

    def forward(self, input):
        return P.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Hardshrink(Module):
    """``x`` where ``|x| > lambd``, else 0."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return P.hardshrink(input, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""

    def forward(self, input):
        return P.softshrink(input, self.lambd)


class Tanhshrink(Module):
    """``x - tanh(x)``."""

    def forward(self, input):
        return P.tanhshrink(input)


class Softsign(Module):
    """``x / (1 + |x|)``."""

    def forward(self, input):
        return P.softsign(input)


class GLU(Module):
    """``a * sigmoid(b)`` over the halves ``a``, ``b`` of the input along ``dim``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return P.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(Module):
    """``softmax(-x)`` along ``dim`` (torch's legacy dim when None)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return P.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``log(softmax(x))`` along ``dim`` (torch's legacy dim when None)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else P.legacy_softmax_dim("log_softmax", input.ndim, 4)
        return F.log_softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


class MultiheadAttention(Module):
    """Attention with ``num_heads`` heads over ``embed_dim`` features (``torch.nn.MultiheadAttention``).

    Parameters as torch's: ``in_proj_weight`` (3E, E) and ``in_proj_bias`` (3E) when ``kdim == vdim ==
    embed_dim``, else ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``; ``out_proj`` (a Linear);
    ``bias_k``/``bias_v`` (1, 1, E) with ``add_bias_kv``.  Weights are xavier-uniform, biases zero, ``bias_k`` and
    ``bias_v`` xavier-normal.  ``forward(query, key, value)`` returns ``(output, weights)``; inputs are (L, N, E),
    (N, L, E) with ``batch_first``, or unbatched (L, E).  Masks: ``key_padding_mask`` (N, S), ``attn_mask`` (L, S)
    or (N * num_heads, L, S); bool ``True`` excludes a position, a float mask is added to the scores.

    >>> import jitgrad as jg
    >>> mha = jg.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> x = jg.randn(2, 5, 8)
    >>> out, weights = mha(x, x, x)
    >>> out.shape, weights.shape
    (jitgrad.Size([2, 5, 8]), jitgrad.Size([2, 5, 5]))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        fk = dict(device=device, dtype=dtype)
        # registration order is torch's, so parameters() and state_dict() list them as torch does
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(_empty(embed_dim, embed_dim, **fk))
            self.k_proj_weight = Parameter(_empty(embed_dim, self.kdim, **fk))
            self.v_proj_weight = Parameter(_empty(embed_dim, self.vdim, **fk))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim, **fk))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        if bias:
            self.in_proj_bias = Parameter(_empty(3 * embed_dim, **fk))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **fk)
        if add_bias_kv:
            self.bias_k = Parameter(_empty(1, 1, embed_dim, **fk))
            self.bias_v = Parameter(_empty(1, 1, embed_dim, **fk))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        is_batched = query.dim() == 3
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", _none_or_dtype(attn_mask),
                                           "attn_mask", query.dtype)
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, check_other=False)
        if self.batch_first and is_batched:
            # transpose each distinct tensor once, so the projection still sees which of them are the same
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        separate = not self._qkv_same_embed_dim
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=separate, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and is_batched:
            return out.transpose(1, 0), weights
        return out, weights


__all__ = ["ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "SiLU", "Softplus", "LogSigmoid", "Threshold", "Hardtanh",
           "ReLU6", "ELU", "CELU", "SELU", "Mish", "Hardsigmoid", "Hardswish", "LeakyReLU", "RReLU", "PReLU",
           "Hardshrink", "Softshrink", "Tanhshrink", "Softsign", "GLU", "Softmin", "LogSoftmax", "Softmax2d",
           "MultiheadAttention"]
