"""jitgrad: PyTorch's autograd surface, with step functions that compile.

>>> import jitgrad as jg
>>> x = jg.tensor([1., 2., 3.], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""
import os as _os
import warnings as _warnings

# OpenBLAS's idle workers spin for 2^28 cycles (~0.1 s) after each call before they sleep: on a busy machine
# they take cores from Numba's workers and from other processes.  2^20 cycles (~0.4 ms) keeps them awake between
# the GEMMs of one step (sleeping at once, 4, cost every small GEMM ~15-20 us of wake-up: B3 +35%) and asleep
# between steps; read when OpenBLAS loads (on jitgrad's first matmul).  See codegen/threads.py.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

# torch gives inf/nan silently for log(0), 0/0, ...; NumPy's floating-point warnings from our own kernels would
# only be noise (anomaly mode is the tool for finding them)
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"jitgrad\.")

from .import_alias import install as _install_alias_finder
_install_alias_finder()     # `sys.modules["torch"] = jitgrad`, then `import torch.nn.utils.rnn`: one copy (import_alias.py)

from .runtime.heap import keep_freed_memory as _keep_freed_memory
_keep_freed_memory()        # eager arrays reuse freed heap, not fresh pages (runtime/heap.py)

from .ir.dtypes import DType as dtype, float32, float64, int32, int64, bool_ as bool  # noqa: A001
from .runtime.tensor import Tensor, Device as device
from .runtime.size import Size
from .runtime.grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled, \
    is_inference_mode_enabled
from .runtime.anomaly import is_anomaly_enabled, is_anomaly_check_nan_enabled, set_anomaly_enabled
from .library.creation.factories import (
    tensor, as_tensor, zeros, ones, full, empty, arange, linspace, logspace, eye, rand, randn, randint, randperm,
    zeros_like, ones_like, empty_like, full_like, rand_like, randn_like, from_numpy, from_dlpack, manual_seed, seed)
from .runtime.generator import Generator, default_generator, initial_seed, get_rng_state, set_rng_state
from .library.creation.sampling import normal, bernoulli, multinomial, randint_like
from .ir.dtypes import uint8, float16, bfloat16
half = float16
from .library.elementary import *  # noqa: F401,F403
from .library.elementary import where, cat, concat, stack, max, min, abs, sum, pow  # noqa: A004
from .library.creation.legacy_types import (  # noqa: E402
    FloatTensor, DoubleTensor, LongTensor, IntTensor, BoolTensor, ByteTensor, is_inference, set_warn_always,
    is_warn_always_enabled)
from .jit.compile import compile  # noqa: E402,A004
from . import autograd, nn, optim, cuda  # noqa: E402
from .nn import torch_level as _torch_level  # noqa: E402
_torch_level.install(globals())     # torch.conv2d, torch.layer_norm, torch.dropout, ... (nn/torch_level.py)
from . import profiler  # noqa: E402  (torch.profiler)
from . import amp, backends, utils  # noqa: E402,F401  (torch.amp, torch.backends, torch.utils.data)
from .amp import autocast  # noqa: E402
from .serialization import save, load  # noqa: E402
from . import linalg  # noqa: E402  (torch.linalg)

float = float32   # noqa: A001  torch aliases
double = float64
long = int64
int = int32   # noqa: A001

import math as _math  # noqa: E402
inf = _math.inf     # torch.inf, torch.nan, torch.pi, torch.e
nan = _math.nan
pi = _math.pi
e = _math.e

__version__ = "0.1.0"

from .library.torch_surface import install as _install_torch_surface  # noqa: E402
_install_torch_surface(globals())   # the extra modules' functions and methods, "not supported yet" names

from .library.shaping.triangular import install as _install_triangular  # noqa: E402
_install_triangular(globals())   # tril, triu, diagonal (functions and methods)


def _install_extras(ns):
    """atan2, nextafter; searchsorted, bucketize, isin; set_, resize_; memory formats, type_as; _foreach_*;
    lobpcg; repeat_interleave, roll, diff, meshgrid, unflatten; einsum; lerp,
    logaddexp, nan_to_num, isclose; tensordot, kron, cdist, ...; aminmax, kthvalue, quantile, cummax, ...;
    floor/round/frac/...; hypot/fmod/xlogy/fmax/frexp/addcmul/...; bitwise ops, gcd, lcm; lgamma/digamma/polygamma/
    erfinv, nansum/nanmean/logcumsumexp; asin/acos/atan/sinh/cosh/asinh/acosh/atanh (arc* aliases), i0;
    scatter/scatter_, select/slice/diagonal/as_strided_scatter;
    is_signed/get_device/nbytes/...; greater/less/..., eq_/gt_/..., swapdims, adjoint, H, nonzero_static, apply_;
    set_default_dtype/set_num_threads/set_float32_matmul_precision...; div(rounding_mode=); finfo/iinfo,
    is_tensor, is_storage, broadcast_shapes"""
    from .library.pointwise import (
        binary as pointwise_binary, composites as pointwise_composites, rounding as pointwise_rounding,
        pairs as pointwise_pairs, integer as pointwise_integer, special as special_functions, trig as trig_functions,
        division)
    from .library.sorting import searching, order_statistics, uniques
    from .runtime import storage, conversions, defaults
    from .library import foreach, aliases as tensor_aliases
    from .library.linalg import eigen, einsum, products, matrix_forms, solve as linalg_solve, norms as linalg_norms
    from .library.shaping import rearranging, stacking
    from .library.indexing import index_writes, scatter_writes
    from .library.reductions import statistics
    from .library.tensor_info import queries as tensor_queries, type_info, printing
    for m in (storage, conversions, foreach, eigen, tensor_queries):
        m.install(ns)
    # the rest declare their names: METHODS are functions and Tensor methods, FUNCTION_ONLY functions (torch's
    # Tensor has no such method), INPLACE Tensor methods (``x.lerp_``), TENSOR_ONLY Tensor methods torch has no
    # function for (``x.unfold``), TORCH_LEVEL {torch name: function} for both (``torch.det`` / ``x.det``)
    for m in (pointwise_binary, searching, rearranging, einsum, pointwise_composites, products, order_statistics,
              stacking, index_writes, uniques, matrix_forms, statistics, pointwise_rounding, pointwise_pairs,
              pointwise_integer, special_functions, trig_functions, scatter_writes,
              tensor_aliases, defaults, division, type_info, printing, linalg_solve, linalg_norms):
        for n in getattr(m, "METHODS", []) + getattr(m, "FUNCTION_ONLY", []):
            ns[n] = getattr(m, n)
        for n in getattr(m, "METHODS", []):
            setattr(Tensor, n, getattr(m, n))
        for n, f in getattr(m, "INPLACE", {}).items():
            setattr(Tensor, n, f)
        for n in getattr(m, "TENSOR_ONLY", []):
            setattr(Tensor, n, getattr(m, n))
        for n, f in getattr(m, "TORCH_LEVEL", {}).items():
            ns[n] = f
            setattr(Tensor, n, f)
    tensor_aliases.install_properties()


_install_extras(globals())
del _install_extras

# torch.distributions, torch.special, torch.func and torch.testing load on first use (PEP 562): `import jitgrad`
# does not pay for them
_unsupported_name = __getattr__      # noqa: F821  (library/torch_surface.py: torch's names jitgrad lacks)


def __getattr__(name):
    if name in ("distributions", "special", "func", "testing"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    return _unsupported_name(name)
