"""``jitgrad.autograd.graph``: the Node type of ``grad_fn`` objects."""
from ..runtime.node import Node, RemovableHandle  # noqa: F401

__all__ = ["Node"]
