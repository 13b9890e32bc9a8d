"""``jitgrad.optim``: optimisers with torch's names, defaults, update rules and state_dict format, written as
plain Python over Tensor ops so a training step that calls ``opt.step()`` compiles (see
:mod:`jitgrad.optim.optimizer` for how state and ``lr`` become graph state)."""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .rmsprop import RMSprop
from . import lr_scheduler  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
