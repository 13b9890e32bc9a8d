"""Eager runtime: Tensor, bind, the autograd engine, grad modes, Function, anomaly mode, profiler, gradcheck."""
