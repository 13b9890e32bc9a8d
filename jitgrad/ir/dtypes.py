"""jitgrad dtypes and PyTorch's type-promotion rules.

A `DType` wraps a NumPy dtype.  Promotion follows torch, not NumPy: Python scalars and 0-dim tensors
only decide the *category* (bool < int < float) unless no dimensioned tensor reaches it, and an integer
meeting a Python float becomes the default float dtype (float32 unless ``set_default_dtype`` changed it), never
NumPy's float64.
"""
from __future__ import annotations

import numpy as np


class UnsupportedError(NotImplementedError, AttributeError):
    """A torch function, method, argument or dtype that jitgrad does not support yet."""


class DType:
    """A tensor element type, e.g. ``jitgrad.float32``."""

    __slots__ = ("name", "np", "short", "category", "is_floating_point", "itemsize")

    def __init__(self, name: str, np_dtype, short: str, category: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.short = short                  # printer form: f32, i64, ...
        self.category = category            # 0 bool, 1 integer, 2 floating
        self.is_floating_point = category == 2
        self.itemsize = self.np.itemsize

    def __repr__(self):
        return f"jitgrad.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


float32 = DType("float32", np.float32, "f32", 2)
float64 = DType("float64", np.float64, "f64", 2)
int32 = DType("int32", np.int32, "i32", 1)
int64 = DType("int64", np.int64, "i64", 1)
bool_ = DType("bool", np.bool_, "bool", 0)

ALL = (float32, float64, int32, int64, bool_)
_FROM_NP = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
DEFAULT_FLOAT = float32     # torch.get_default_dtype(); read as ``dt.DEFAULT_FLOAT`` at call time (never imported
DEFAULT_INT = int64         # by name), so ``set_default_float`` reaches every reader
_CATEGORY_DEFAULT = {0: bool_, 1: int64, 2: float32}


def set_default_float(d: "DType") -> None:
    """Make ``d`` (float32 or float64) the dtype of Python floats and of float factories (torch.set_default_dtype;
    the runtime's ``set_default_dtype`` validates and also drops its cached rules)."""
    global DEFAULT_FLOAT
    DEFAULT_FLOAT = d
    _CATEGORY_DEFAULT[2] = d
# uint8 exists for generator states (torch's ByteTensor); it is not one of the compute dtypes in ALL
uint8 = DType("uint8", np.uint8, "u8", 1)
_FROM_NP[uint8.np] = uint8
_BY_NAME[uint8.name] = uint8
# float16 (torch.half) can be named, stored and converted to and from (``t.half()``, ``dtype=jg.half``) in eager
# mode; like uint8 it is not one of the compute dtypes in ALL (NumPy computes in it slowly; codegen has no f16)
float16 = DType("float16", np.float16, "f16", 2)
_FROM_NP[float16.np] = float16
_BY_NAME[float16.name] = float16


class NameOnlyDType(DType):
    """A torch dtype jitgrad can name but not make tensors of (``bfloat16``): training scripts build tables of
    dtypes (nanoGPT's ``{'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}``) and
    pick one at run time; only making a tensor of it (``dtype=``, ``.to``) raises :class:`UnsupportedError`."""

    __slots__ = ()

    def __init__(self, name: str, short: str):
        super().__init__(name, np.void, short, 2)

    def unsupported(self) -> UnsupportedError:
        return UnsupportedError(f"jitgrad does not support {self.name} tensors (it computes in float32 and float64; "
                                f"float16 is storage only); use torch.float32")


bfloat16 = NameOnlyDType("bfloat16", "bf16")
_BY_NAME[bfloat16.name] = bfloat16
# aliases users reach for
# torch's scalar-type names, as its error texts print them ("result type Float can't be cast to ... Long")
TORCH_SCALAR_NAME = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int",
                     "bool": "Bool", "uint8": "Byte"}


def torch_scalar_name(d: DType) -> str:
    return TORCH_SCALAR_NAME.get(d.name, d.name)


# the C++ type names torch's TypeMeta prints in other messages ("but got attn_mask.dtype: long int and  query.dtype:
# double", "mask with dtype unsigned char")
TORCH_CPP_NAME = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
                  "int64": "long int", "int32": "int", "bool": "bool", "uint8": "unsigned char"}


def torch_cpp_name(d: DType) -> str:
    return TORCH_CPP_NAME.get(d.name, d.name)


_ALIASES = {"float": float32, "double": float64, "long": int64, "int": int32, "bool": bool_, "half": float16,
            "f32": float32, "f64": float64, "i64": int64, "i32": int32}


def _by_name(name):
    return _BY_NAME[name]


def from_numpy_dtype(npdt) -> DType:
    """The jitgrad dtype for a NumPy dtype, or a TypeError naming the unsupported one."""
    d = _FROM_NP.get(np.dtype(npdt))
    if d is None:
        raise TypeError(f"jitgrad: unsupported dtype {np.dtype(npdt)}; supported: "
                        + ", ".join(x.name for x in ALL))
    return d


def as_dtype(x) -> DType:
    """Accept a DType, a NumPy dtype/type, a Python type or a name."""
    if isinstance(x, DType):
        if type(x) is NameOnlyDType:
            raise x.unsupported()
        return x
    if x is float:
        return DEFAULT_FLOAT
    if x is int:
        return DEFAULT_INT
    if x is bool:
        return bool_
    if isinstance(x, str) and x in _ALIASES:
        return _ALIASES[x]
    if isinstance(x, str) and x in _BY_NAME:
        return as_dtype(_BY_NAME[x])
    if isinstance(getattr(x, "dtype", None), DType) and isinstance(x, type):
        return x.dtype          # a legacy type: torch.DoubleTensor
    try:
        return from_numpy_dtype(x)
    except TypeError:
        raise
    except Exception:
        raise TypeError(f"jitgrad: cannot interpret {x!r} as a dtype") from None


def _promote2(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    return _FROM_NP[np.promote_types(a.np, b.np)]


def scalar_category(v) -> int:
    if isinstance(v, (bool, np.bool_)):
        return 0
    if isinstance(v, (int, np.integer)):
        return 1
    if isinstance(v, (float, np.floating)):
        return 2
    raise TypeError(f"jitgrad: unsupported scalar {v!r} of type {type(v).__name__}")


def result_type(dims_dtypes, scalars=()) -> DType:
    """torch.result_type over (ndim, dtype) pairs of tensors and a list of Python scalars.

    Three priority groups: tensors with ndim > 0, 0-dim tensors, Python scalars.  A lower group only
    contributes when its category is above every higher group's.
    """
    dim_t = zero_t = None
    for nd, dt in dims_dtypes:
        if nd > 0:
            dim_t = dt if dim_t is None else _promote2(dim_t, dt)
        else:
            zero_t = dt if zero_t is None else _promote2(zero_t, dt)
    sc = -1
    for s in scalars:
        c = scalar_category(s)
        if c > sc:
            sc = c
    res = dim_t
    if zero_t is not None:
        if res is None:
            res = zero_t
        elif zero_t.category > res.category:
            res = zero_t if res.category < zero_t.category else res
    if sc >= 0:
        if res is None:
            res = _CATEGORY_DEFAULT[sc]
        elif sc > res.category:
            res = _CATEGORY_DEFAULT[sc]
    return res
