"""glibc heap settings for eager mode's short-lived arrays.

Eager mode allocates a fresh NumPy array per op result and frees it soon after (activations, gradients,
temporaries: megabytes each in a transformer step).  glibc serves blocks above its mmap threshold with fresh
``mmap`` pages and trims freed heap top back to the OS, so the next step's arrays touch new pages again: one
B9 eager step took ~12,000 page faults (2-9 us each on a VM), a fifth of the step.  Raising both thresholds
keeps freed blocks in the process for reuse (what torch's and JAX's caching allocators do); peak RSS is
unchanged (the memory was in use at the peak anyway), only returning it to the OS between peaks stops.

``JITGRAD_MALLOC=keep`` leaves glibc's defaults (and a non-glibc libc is left alone).
"""
from __future__ import annotations

import os

# M_TRIM_THRESHOLD and M_MMAP_THRESHOLD (malloc.h).  Setting either turns glibc's dynamic threshold off, so set
# both: blocks up to 32 MiB come from the heap, and up to 64 MiB of free heap top is kept.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (above); True when set."""
    if os.environ.get("JITGRAD_MALLOC", "") == "keep":
        return False
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version       # glibc only: another libc's mallopt takes other codes
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
