"""profiler (filled in by its work item)."""


class profile:
    pass


record_function = emit_nvtx = load_nvprof = EventList = FunctionEvent = FunctionEventAvg = profile
