"""``@jg.compile``: tracing a step into a Graph, guards, functionalised state, and running it compiled.

The only package where eager tensors meet generated kernels: it imports ``runtime``, ``tracer`` and ``codegen``;
eager ``runtime`` never imports it (nor ``codegen``).
"""
