"""The backward executor: the engine that walks a graph's nodes (``engine.py``: ``backward``, ``grad``, hooks,
anomaly, ``create_graph``), the nodes and input gradients a backward toward given tensors needs
(``graph_walk.py``), the gradients it starts from (``root_grads.py``) and accumulates into leaves
(``grad_accumulation.py``), and the per-signature plans that replay an op's vjp rule on arrays
(``pullback_plans.py``).  The forward side (Tensor, bind, nodes) is the rest of ``runtime/``."""
