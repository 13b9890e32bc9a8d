"""Python calls -> Graph.  ``Trace`` builds a Graph as ops are bound; ``STATE.active`` is the trace in progress."""
from .trace import STATE, Trace, TraceError, TracedValueError  # noqa: F401
from .pytree import flatten, unflatten  # noqa: F401
