"""``jitgrad.nn``: modules with torch's names, signatures, defaults, initialisation and parameter layout, plus
``functional``, ``init`` and ``utils``.  Modules are plain Python over Tensor ops, so a training step that calls
them compiles under ``@jitgrad.compile``."""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from . import utils  # noqa: F401
from . import parallel  # noqa: F401  (DistributedDataParallel; imports no MPI)
from .parameter import Parameter
from . import modules as _modules
from .modules import *  # noqa: F401,F403  (every Module class, as torch.nn has them)
from .parallel import DataParallel

__all__ = ["Parameter", *_modules.__all__, "DataParallel"]
