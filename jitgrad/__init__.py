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
# between steps; read when OpenBLAS loads (on jitgrad's first matmul).  See codegen/native/threads.py.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

# torch gives inf/nan silently for log(0), 0/0, ...; NumPy's floating-point warnings from our own kernels would
# only be noise (anomaly mode is the tool for finding them)
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"jitgrad\.")

from .import_alias import install as _install_alias_finder
_install_alias_finder()     # `sys.modules["torch"] = jitgrad`, then `import torch.nn.utils.rnn`: one copy (import_alias.py)

from .runtime.heap import keep_freed_memory as _keep_freed_memory
_keep_freed_memory()        # eager arrays reuse freed heap, not fresh pages (runtime/heap.py)

from .ir.dtypes import DType as dtype, float32, float64, int32, int64, bool_ as bool  # noqa: A001
from .ir.dtypes import uint8, float16, bfloat16, UnsupportedError
from .runtime.tensor import Tensor, Device as device
from .runtime.size import Size
from .runtime.grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled, \
    is_inference_mode_enabled
from .runtime.anomaly import is_anomaly_enabled, is_anomaly_check_nan_enabled, set_anomaly_enabled
from .runtime.generator import Generator, default_generator, initial_seed, get_rng_state, set_rng_state
half = float16
from .jit.compile import compile  # noqa: E402,A004
from . import autograd, nn, optim, cuda  # noqa: E402
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

# every library function (jg.logcumsumexp) and Tensor method beyond its class body (x.logcumsumexp), from the
# declarations beside their definitions, in one pass (publisher.py)
from .publisher import publish as _publish  # noqa: E402
_publish(globals())
del _publish

# torch.distributions, torch.special, torch.func, torch.testing and torch._dynamo load on first use (PEP 562): `import jitgrad`
# does not pay for them
def __getattr__(name):
    if name in ("distributions", "special", "func", "testing", "_dynamo"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    # a name torch has and jitgrad lacks: "not supported yet" (library/torch_surface.py), else AttributeError
    from .library.torch_names import TORCH_FUNCTIONS
    from .library.torch_surface import unsupported_attribute
    raise unsupported_attribute("jitgrad", name, TORCH_FUNCTIONS)
