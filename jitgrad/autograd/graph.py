"""``jitgrad.autograd.graph``: the Node type of ``grad_fn`` objects, gradient edges, saved-tensor hooks and
multi-tensor hooks (torch.autograd.graph)."""
from ..runtime.node import Node, RemovableHandle  # noqa: F401
from ..runtime.graph_hooks import GradientEdge, get_gradient_edge, register_multi_grad_hook  # noqa: F401
from ..runtime.saved_hooks import saved_tensors_hooks, disable_saved_tensors_hooks, save_on_cpu  # noqa: F401
from ..runtime.saved_mutation import allow_mutation_on_saved_tensors  # noqa: F401


def increment_version(tensor):
    """Bump ``tensor``'s version counter, as an in-place write would (for writes autograd cannot see)."""
    for t in (tensor if isinstance(tensor, (list, tuple)) else (tensor,)):
        t._vc[0] += 1


__all__ = ["Node", "GradientEdge", "get_gradient_edge", "register_multi_grad_hook", "saved_tensors_hooks",
           "disable_saved_tensors_hooks", "save_on_cpu", "allow_mutation_on_saved_tensors", "increment_version"]
