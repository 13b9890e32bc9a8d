"""torch.compile's ``backend`` / ``mode`` / ``options`` arguments, as ``jitgrad.compile`` reads them."""
from __future__ import annotations

# torch.compile's modes and backends
TORCH_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
TORCH_BACKENDS = {"inductor": None, "cudagraphs": None, "eager": "interpret", "aot_eager": "interpret"}


def torch_options(backend, mode, options):
    """torch.compile's ``backend``/``mode``/``options`` mapped to jitgrad's backend, with torch's errors: its
    compiling backends ("inductor", "cudagraphs") are jitgrad's default; "eager"/"aot_eager", which run the
    captured graph without generating code, are the reference interpreter.  ``mode`` and ``options`` tune
    inductor; they change nothing here."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and mode not in TORCH_MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(TORCH_MODES)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    return TORCH_BACKENDS.get(backend, backend)


__all__ = ["TORCH_BACKENDS", "TORCH_MODES", "torch_options"]
