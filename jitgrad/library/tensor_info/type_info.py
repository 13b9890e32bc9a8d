"""Type facts with torch's names: ``finfo`` and ``iinfo`` (numeric limits of jitgrad's dtypes), ``is_tensor``,
``is_storage``, ``broadcast_shapes`` (torch's error texts) and ``promote_types``.

>>> import jitgrad as jg
>>> jg.finfo(jg.float32).eps, jg.iinfo(jg.int32).max
(1.1920928955078125e-07, 2147483647)
>>> jg.broadcast_shapes((2, 1), (1, 3))
jitgrad.Size([2, 3])
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...runtime.size import Size
from ...runtime.tensor import Tensor


def _g(v) -> str:
    return f"{v:.6g}"


@published("jitgrad")
class finfo:      # noqa: N801  (torch's name)
    """Machine limits of a floating-point dtype (``float32``, ``float64``, ``float16``; the default dtype when
    none is given): ``bits``, ``eps``, ``max``, ``min``, ``tiny`` (= ``smallest_normal``), ``resolution`` and
    ``dtype`` (the dtype's name, as torch)."""

    def __init__(self, type=None):      # noqa: A002  (torch's parameter name)
        d = dt.DEFAULT_FLOAT if type is None else type
        if not isinstance(d, dt.DType) or not d.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            "'torch.finfo'")
        if isinstance(d, dt.NameOnlyDType):      # bfloat16: named only, but its limits are facts
            self.bits, self.eps, self.max, self.tiny, self.resolution = \
                16, 0.0078125, 3.3895313892515355e+38, 1.1754943508222875e-38, 0.01
        else:
            fi = np.finfo(d.np)
            self.bits, self.eps, self.max, self.tiny = int(fi.bits), float(fi.eps), float(fi.max), \
                float(fi.smallest_normal)
            self.resolution = 10.0 ** -int(fi.precision)
        self.min = -self.max
        self.smallest_normal = self.tiny
        self.dtype = d.name

    def __repr__(self):
        return (f"finfo(resolution={_g(self.resolution)}, min={_g(self.min)}, max={_g(self.max)}, "
                f"eps={_g(self.eps)}, smallest_normal={_g(self.smallest_normal)}, tiny={_g(self.tiny)}, "
                f"dtype={self.dtype})")

    def __eq__(self, other):
        return isinstance(other, finfo) and other.dtype == self.dtype

    __hash__ = None


@published("jitgrad")
class iinfo:      # noqa: N801
    """Machine limits of an integer dtype (``int32``, ``int64``, ``uint8``): ``bits``, ``max``, ``min``, ``dtype``
    (the dtype's name)."""

    def __init__(self, type):       # noqa: A002
        if not isinstance(type, dt.DType) or type.is_floating_point:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle 'torch.iinfo'")
        if type is dt.bool_:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        ii = np.iinfo(type.np)
        self.bits, self.max, self.min, self.dtype = int(ii.bits), int(ii.max), int(ii.min), type.name

    def __repr__(self):
        return f"iinfo(min={_g(float(self.min))}, max={_g(float(self.max))}, dtype={self.dtype})"

    def __eq__(self, other):
        return isinstance(other, iinfo) and other.dtype == self.dtype

    __hash__ = None


@published("jitgrad")
def is_tensor(obj, /) -> bool:
    """Whether ``obj`` is a jitgrad Tensor (``isinstance(obj, Tensor)``)."""
    return isinstance(obj, Tensor)


@published("jitgrad")
def is_storage(obj, /) -> bool:
    """Whether ``obj`` is a storage object: always False (jitgrad tensors expose no separate storage type)."""
    return False


@published("jitgrad")
def broadcast_shapes(*shapes) -> Size:
    """The shape that tensors of ``shapes`` broadcast to (an int stands for a 1-d shape); torch's errors."""
    shapes = tuple((int(x),) if isinstance(x, (int, np.integer)) else x for x in shapes if x is not None)
    if not shapes:
        return Size([])
    for shape in shapes:
        if not isinstance(shape, Sequence):
            raise RuntimeError(f"Input shapes should be of type ints, a tuple of ints, or a list of ints, got "
                               f"{shape}")
    common = [1] * max(len(s) for s in shapes)
    for arg_idx, shape in enumerate(shapes):
        for idx in range(-1, -1 - len(shape), -1):
            if shape[idx] == common[idx]:
                continue
            if common[idx] == 1:
                if shape[idx] < 0:
                    raise ValueError("Attempting to broadcast a dimension with negative length!")
                common[idx] = shape[idx]
            if shape[idx] == 1:
                continue
            if common[idx] != shape[idx]:
                raise RuntimeError(f"Attempting to broadcast a dimension of length {shape[idx]} at {idx}! "
                                   f"Mismatching argument at index {arg_idx} had {shape}; but expected shape "
                                   f"should be broadcastable to {common}")
    return Size(common)


@published("jitgrad")
def promote_types(type1, type2, /) -> dt.DType:
    """The dtype both ``type1`` and ``type2`` promote to (a float beats an integer, a wider type a narrower)."""
    return dt._promote2(dt.as_dtype(type1), dt.as_dtype(type2))
