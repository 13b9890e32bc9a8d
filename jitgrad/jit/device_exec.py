"""Running a graph on a device: the CUDA backend of ``execute`` (graph_function.py).

A compiled function whose tensors live on the GPU runs its graphs (forward, residuals, backward) as CUDA
kernels: ``codegen/cuda.CudaGraph`` (``graph_code.cuda_graph``), kept on the graph like the CPU's CompiledGraph.  Inputs, outputs and state
write-backs stay on the device; only the anomaly counters are read back, once per call.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..runtime import profiler_state
from ..runtime.devices import backend_of_payload, device_of
from .graph_code import compiled_result, cuda_graph

_PROF = profiler_state.STATE


def on_device(arrays) -> bool:
    """Whether any input array lives on a device (not a NumPy array)."""
    for a in arrays:
        if type(a) is not np.ndarray and backend_of_payload(a) is not None:
            return True
    return False


def execute_on_device(graph: Graph, arrays, writes=(), stats=None, name="compiled"):
    """Run ``graph`` on device arrays; every array must be on the same device (torch's error otherwise)."""
    devs = {str(device_of(a)) for a in arrays if not (type(a) is np.ndarray and a.ndim == 0)}
    if len(devs) > 1:
        a, b = sorted(devs, key=lambda d: d == "cpu")[:2]
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and "
                           f"{b}! (when checking arguments of the compiled function {name})")
    host = {}
    if any(type(a) is np.ndarray for a in arrays):     # CPU scalar tensors (torch allows them): uploaded
        from numba import cuda
        host = {i: a for i, a in enumerate(arrays) if type(a) is np.ndarray}
        arrays = [cuda.to_device(a) if type(a) is np.ndarray else a for a in arrays]
    cg = cuda_graph(graph, writes)
    prof = _PROF.active
    run = cg.profiled_run(prof) if prof is not None else cg.run
    res = compiled_result(cg, run(*arrays), stats)
    for _, i in writes:
        if i in host:       # state on the CPU (a generator's offset): its write-back went to the uploaded copy
            host[i][...] = arrays[i].copy_to_host().reshape(host[i].shape)
    return res


__all__ = ["execute_on_device", "on_device"]
