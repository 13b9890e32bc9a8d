"""The primitive set.  Importing this package registers every OpDef in ``OPS``."""
from .opdef import OPS, Aval, OpDef, OpError, broadcast_shapes, normalize_axes, normalize_axis, register  # noqa: F401
from . import elementwise, reduce, shape, linalg, index, random, scan, sort, fused, collective, attention, normalization, diagonal  # noqa: F401  (registration side effects)
from . import scatter  # noqa: F401  (registration side effect)
from . import tiled_attention  # noqa: F401  (registration side effect)
from . import conv, pooling  # noqa: F401  (registration side effects)
from . import solvers, factorizations, matrix_functions  # noqa: F401  (registration side effects: jitgrad.linalg's primitives)
from . import pointwise_math, special, trig_bessel  # noqa: F401  (registration side effects)

__all__ = ["OPS", "Aval", "OpDef", "OpError", "broadcast_shapes", "normalize_axes", "normalize_axis", "register"]
