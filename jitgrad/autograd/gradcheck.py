"""``jitgrad.autograd.gradcheck``: where torch keeps ``gradcheck`` and ``gradgradcheck``."""
from ..runtime.gradcheck import gradcheck, gradgradcheck, GradcheckError, get_numerical_jacobian, \
    get_analytical_jacobian  # noqa: F401

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError", "get_numerical_jacobian", "get_analytical_jacobian"]
