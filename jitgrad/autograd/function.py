"""``jitgrad.autograd.function``: where torch keeps ``Function``, ``FunctionCtx`` and ``once_differentiable``."""
from ..runtime.function import (Function, FunctionCtx, once_differentiable, InplaceFunction,  # noqa: F401
                                NestedIOFunction, BackwardCFunction)

_ContextMethodMixin = FunctionCtx   # the seed's name for the ctx methods

__all__ = ["Function", "FunctionCtx", "once_differentiable", "InplaceFunction", "NestedIOFunction"]
