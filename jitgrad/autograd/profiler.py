"""``jitgrad.autograd.profiler``: profile, record_function, emit_nvtx, load_nvprof."""
from ..runtime.profiler import profile, record_function, emit_nvtx, load_nvprof, EventList, FunctionEvent, FunctionEventAvg  # noqa: F401

__all__ = ["profile", "record_function", "emit_nvtx", "load_nvprof", "EventList", "FunctionEvent", "FunctionEventAvg"]
