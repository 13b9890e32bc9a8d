"""``jitgrad.autograd.functional``: vjp, jvp, jacobian, hessian, vhp, hvp (torch signatures)."""
from ..runtime.functional import vjp, jvp, jacobian, hessian, vhp, hvp  # noqa: F401

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]
