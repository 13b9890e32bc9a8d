"""``jitgrad.optim``: optimisers with torch's names, defaults, update rules and state_dict format, written as
plain Python over Tensor ops so a training step that calls ``opt.step()`` compiles (see
:mod:`jitgrad.optim.optimizer` for how state and ``lr`` become graph state).  ``LBFGS`` is the exception: its
step is an eager loop (its closure may be compiled)."""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .rmsprop import RMSprop
from .adagrad import Adagrad, Adadelta, Adamax
from .nadam import NAdam, RAdam
from .rprop import Rprop, ASGD
from .adafactor import Adafactor
from .lbfgs import LBFGS
from . import lr_scheduler  # noqa: F401
from . import swa_utils  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
           "Rprop", "ASGD", "Adafactor", "LBFGS", "lr_scheduler", "swa_utils"]
