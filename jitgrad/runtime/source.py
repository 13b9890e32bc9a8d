"""Finding the user's line: the first frame outside jitgrad's own code (the package, and the generated texts' files:
``ir/own_code.py``)."""
from __future__ import annotations

import sys
import traceback

from ..ir.graph import SourceLoc, cell_label
from ..ir.own_code import PKG, own_file

# modules of the package that are *user code* (they call jitgrad like a user would)
_USER_MODULES = (PKG + "demo.py", PKG + "bench.py")


# a code object's file name -> is it jitgrad's own code.  Keyed by the name (whose hash a str caches) because every
# recorded op looks up the frames above it, and a code object's own hash is not cached: it walks the code's
# constants, nested functions included (microseconds for a script's module or a long function).
_INTERNAL: dict = {}


def _internal(code) -> bool:
    fn = code.co_filename
    r = _INTERNAL.get(fn)
    if r is None:
        r = _INTERNAL[fn] = own_file(fn) and not fn.startswith(_USER_MODULES)
    return r


def user_frame(depth: int = 2):
    f = sys._getframe(depth)
    while f is not None and _internal(f.f_code):
        f = f.f_back
    return f


def line_at(code, lasti: int) -> int | None:
    """The source line of the instruction at byte offset ``lasti`` of ``code`` (a frame's ``f_lineno`` computed
    later: eager recording keeps ``f_lasti``, as reading ``f_lineno`` walks the line table on every op)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line
    return None


def user_loc(depth: int = 2) -> SourceLoc | None:
    f = user_frame(depth + 1)
    if f is None:
        return None
    return SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


# Modules of an interactive kernel (Jupyter/IPython) and its event loop: the frames they add outside the user's
# cell are machinery, not the user's program, and are dropped from forward tracebacks.
_KERNEL_MODULES = ("IPython", "ipykernel", "ipykernel_launcher", "tornado", "asyncio", "zmq", "jupyter_client",
                   "traitlets", "runpy", "anyio", "nest_asyncio")
# id(code object) -> is it kernel machinery (by id: see _INTERNAL; _CODES keeps each code alive while its id is a
# key, so no other code can take the id)
_KERNEL: dict = {}
_CODES: dict = {}


def _kernel_frame(f) -> bool:
    code = f.f_code
    k = id(code)
    r = _KERNEL.get(k)
    if r is None:
        mod = f.f_globals.get("__name__") or ""
        _CODES[k] = code
        r = _KERNEL[k] = (mod.split(".", 1)[0] in _KERNEL_MODULES
                             or code.co_filename.endswith(("ipykernel_launcher.py", "<frozen runpy>")))
    return r


def user_stack(depth: int = 2) -> list:
    """The forward traceback (outermost first) up to the user's call, jitgrad frames dropped (also those
    between user frames, e.g. a compiled function calling the user's step function), and so are the frames of
    an interactive kernel (ipykernel, IPython, tornado, asyncio) around a notebook cell."""
    f = user_frame(depth + 1)
    if f is None:
        return []
    frames = []
    while f is not None:
        if not _internal(f.f_code) and not _kernel_frame(f):
            frames.append((f, f.f_lineno))
        f = f.f_back
    frames.reverse()
    return traceback.StackSummary.extract(frames)


def frame_file(filename: str) -> str:
    """A frame's file as a traceback shows it: a notebook cell reads ``Cell In[3]`` (as IPython says)."""
    return cell_label(filename) or filename


def format_stack(stack) -> str:
    """Like ``traceback.format_list``, with notebook cells named as IPython names them
    (``Cell In[3], line 4, in step``)."""
    out = []
    for fs in stack:
        cell = cell_label(fs.filename)
        if cell is None:
            out.extend(traceback.format_list([fs]))
            continue
        text = f"  {cell}, line {fs.lineno}, in {fs.name}\n"
        if fs.line:
            text += f"    {fs.line.strip()}\n"
        out.append(text)
    return "".join(out)
