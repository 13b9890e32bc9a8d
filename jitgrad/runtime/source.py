"""Finding the user's line: the first frame outside the jitgrad package."""
from __future__ import annotations

import os
import sys
import traceback

from ..ir.graph import SourceLoc

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# modules of the package that are *user code* (they call jitgrad like a user would)
_USER_MODULES = (_PKG + "demo.py", _PKG + "bench.py")


_INTERNAL: dict = {}   # code object -> is it jitgrad's own code


def _internal(code) -> bool:
    r = _INTERNAL.get(code)
    if r is None:
        fn = code.co_filename
        r = _INTERNAL[code] = fn.startswith(_PKG) and not fn.startswith(_USER_MODULES)
    return r


def user_frame(depth: int = 2):
    f = sys._getframe(depth)
    while f is not None and _internal(f.f_code):
        f = f.f_back
    return f


def user_code_line(depth: int = 2):
    """(code object, line) of the user's frame: the cheap form of ``user_loc`` for the eager hot path."""
    f = sys._getframe(depth)
    get = _INTERNAL.get
    while f is not None:
        code = f.f_code
        r = get(code)
        if r is None:
            r = _internal(code)
        if not r:
            return code, f.f_lineno
        f = f.f_back
    return None


def user_loc(depth: int = 2) -> SourceLoc | None:
    f = user_frame(depth + 1)
    if f is None:
        return None
    return SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def user_stack(depth: int = 2) -> list:
    """The forward traceback (outermost first) up to the user's call, jitgrad frames dropped (also those
    between user frames, e.g. a compiled function calling the user's step function)."""
    f = user_frame(depth + 1)
    if f is None:
        return []
    frames = []
    while f is not None:
        if not _internal(f.f_code):
            frames.append((f, f.f_lineno))
        f = f.f_back
    frames.reverse()
    return traceback.StackSummary.extract(frames)


def format_stack(stack) -> str:
    return "".join(traceback.format_list(stack))
