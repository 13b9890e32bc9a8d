"""``jitgrad.nn.attention``: which attention kernel ``F.scaled_dot_product_attention`` runs (torch keeps its
``sdpa_kernel`` backend choice here too): ``TILING``, the thresholds and block sizes of the key-tiled path,
and ``attention_tiling``, a context manager that sets them (``nn/functional/attention.py`` says how the
choice is made).
"""
from __future__ import annotations

import contextlib
import os


class AttentionTiling:
    """When ``F.scaled_dot_product_attention`` tiles, and the block sizes it tiles with (read at each call, so at
    trace time for a compiled function: a change takes effect in functions traced after it).

    ``min_score_bytes``: a traced (compiled) call tiles when ``prod(batch) * L * S * itemsize`` (the bytes of
    ONE untiled score matrix; the untiled path holds three or four of that size at once) is at least this.
    Default 16 MiB, or ``JITGRAD_SDPA_TILE_MIN_MB`` (float MiB): below it the compiled decomposition (fused
    loops) is faster, above it the tiled host steps are (BENCHMARKS.md, "Key-tiled attention"); 0 tiles always.
    ``eager_min_score_bytes``: the same for eager calls; default 2 MiB, or ``JITGRAD_SDPA_TILE_MIN_MB_EAGER``:
    eager NumPy's untiled path makes several passes over whole score matrices, so tiling wins from about
    1 MiB (4 heads x 256 x 256 float32); small attentions (a batch of short sequences) stay one fused op.
    ``traced_dropout_min_score_bytes``: a traced call with dropout tiles from this size (default 256 MiB, or
    ``JITGRAD_SDPA_TILE_DROPOUT_MIN_MB``): below it the compiled composition is about twice as fast (its
    Philox draw is fused), above it the memory the composition holds (several score matrices) decides.
    ``block_q`` x ``block_k``: queries and keys per block (default 256 x 256); a block's scores are
    ``prod(batch) * block_q * block_k`` values (4 heads, float32: 1 MiB).  Between 128 and 512 the time
    changes by under 10% (BENCHMARKS.md): the products are BLAS calls either way."""

    __slots__ = ("min_score_bytes", "eager_min_score_bytes", "traced_dropout_min_score_bytes", "block_q", "block_k")

    def __init__(self):
        self.min_score_bytes = int(float(os.environ.get("JITGRAD_SDPA_TILE_MIN_MB", "16")) * (1 << 20))
        self.eager_min_score_bytes = int(float(os.environ.get("JITGRAD_SDPA_TILE_MIN_MB_EAGER", "2")) * (1 << 20))
        self.traced_dropout_min_score_bytes = int(
            float(os.environ.get("JITGRAD_SDPA_TILE_DROPOUT_MIN_MB", "256")) * (1 << 20))
        self.block_q = 256
        self.block_k = 256


TILING = AttentionTiling()


@contextlib.contextmanager
def attention_tiling(min_score_bytes=None, block_q=None, block_k=None, eager_min_score_bytes=None,
                     traced_dropout_min_score_bytes=None):
    """Set ``TILING``'s fields inside a ``with`` block (None: unchanged; ``min_score_bytes`` sets all three
    thresholds unless the other two are given too); tests force tiling with ``attention_tiling(0, 3, 2)``."""
    old = (TILING.min_score_bytes, TILING.eager_min_score_bytes, TILING.traced_dropout_min_score_bytes,
           TILING.block_q, TILING.block_k)
    if eager_min_score_bytes is None:
        eager_min_score_bytes = min_score_bytes
    if traced_dropout_min_score_bytes is None:
        traced_dropout_min_score_bytes = min_score_bytes
    new = (("min_score_bytes", min_score_bytes, 0), ("eager_min_score_bytes", eager_min_score_bytes, 0),
           ("traced_dropout_min_score_bytes", traced_dropout_min_score_bytes, 0),
           ("block_q", block_q, 1), ("block_k", block_k, 1))
    for name, val, low in new:
        if val is not None and (type(val) is not int or val < low):
            raise ValueError(f"attention_tiling: {name} must be an int >= {low}, got {val!r}")
    for name, val, _ in new:
        if val is not None:
            setattr(TILING, name, val)
    try:
        yield TILING
    finally:
        (TILING.min_score_bytes, TILING.eager_min_score_bytes, TILING.traced_dropout_min_score_bytes,
         TILING.block_q, TILING.block_k) = old


__all__ = ["TILING", "AttentionTiling", "attention_tiling"]
