"""autograd.functional (filled in by its work item)."""


def vjp(*a, **k):
    raise NotImplementedError


jvp = jacobian = hessian = vhp = hvp = vjp
