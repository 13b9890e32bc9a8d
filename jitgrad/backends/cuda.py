"""``torch.backends.cuda``: matmul precision flags and the scaled-dot-product-attention kernel switches (kept,
with torch's defaults; jitgrad's SDPA is always the math definition)."""
from __future__ import annotations


class _MatmulFlags:
    """``torch.backends.cuda.matmul``: allow_tf32 (False), reduced-precision reductions (True)."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True
        self.fp32_precision = "none"


matmul = _MatmulFlags()
_SDP = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """Whether jitgrad can run on CUDA (numba-cuda importable)."""
    from .. import cuda as _cuda
    return _cuda.is_available()


def flash_sdp_enabled() -> bool:
    return _SDP["flash"]


def enable_flash_sdp(enabled: bool) -> None:
    _SDP["flash"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _SDP["mem_efficient"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _SDP["mem_efficient"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _SDP["math"]


def enable_math_sdp(enabled: bool) -> None:
    _SDP["math"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    return _SDP["cudnn"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _SDP["cudnn"] = bool(enabled)
