"""Source locations carried by every recorded op (and, with the tracer, by every Eqn)."""
from __future__ import annotations

import linecache


class SourceLoc:
    """Where a user's line created an op: file, line, function and the line's text (read lazily)."""

    __slots__ = ("file", "line", "function", "_text")

    def __init__(self, file: str, line: int, function: str, text: str | None = None):
        self.file = file
        self.line = line
        self.function = function
        self._text = text

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = linecache.getline(self.file, self.line).strip()
        return self._text

    def short(self) -> str:
        import os
        return f"{os.path.basename(self.file)}:{self.line}"

    def __str__(self):
        return f'File "{self.file}", line {self.line}, in {self.function}'

    def __repr__(self):
        return f"SourceLoc({self.short()} {self.function})"

    def __eq__(self, other):
        return (isinstance(other, SourceLoc) and (self.file, self.line, self.function)
                == (other.file, other.line, other.function))

    def __hash__(self):
        return hash((self.file, self.line, self.function))
