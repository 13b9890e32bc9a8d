"""Which code is jitgrad's own, for the frame walks that look for the user's line (runtime/source.py, unbacked.py)
and for the compiled functions' guards on the user's functions (jit/python_values.py): the files inside the package,
and the texts jitgrad generates and compiles at run time whose file is elsewhere (runtime/generated_code.py writes
them to the cache directory, so that CPython's default traceback printer, which reads a frame's line from its file,
shows their lines)."""
from __future__ import annotations

import os

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_GENERATED: set = set()     # file names of generated texts outside the package


def add_generated(filename: str) -> None:
    """Count ``filename`` (a generated text's file, outside the package) as jitgrad's own code."""
    _GENERATED.add(filename)


def own_file(filename: str) -> bool:
    """Whether code from ``filename`` is jitgrad's own: inside the package, or a generated text's file."""
    return filename.startswith(PKG) or filename in _GENERATED


__all__ = ["PKG", "add_generated", "own_file"]
