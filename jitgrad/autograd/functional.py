"""``jitgrad.autograd.functional``: vjp, jvp, jacobian, hessian, vhp, hvp (torch signatures)."""
from ..runtime.functional import vjp, jvp, jacobian, hessian, vhp, hvp  # noqa: F401
from ..runtime.functional import _construct_standard_basis_for  # noqa: F401  (torch's helper, used by tests)

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]
