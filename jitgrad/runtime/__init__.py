"""The eager engine: Tensor's core, bind, graph nodes and the backward engine, grad modes, Function, saved tensors
and their hooks, views and version counters, anomaly mode, devices, generators.  Imports ir, tracer and
declarations; never the library, codegen or jit (ARCHITECTURE.md, "Layers")."""
