"""``jitgrad.autograd.gradcheck``: where torch keeps ``gradcheck`` and ``gradgradcheck``."""
from ..runtime.gradcheck import gradcheck, gradgradcheck, GradcheckError  # noqa: F401

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]
