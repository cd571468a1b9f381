"""A one-line progress bar for directory mode, on stderr, without a dependency.

    ndif-opt [#########...........]  212/500 files  3.4 s

Drawn with carriage returns on a terminal only: when the stream is not a TTY (piped,
redirected, captured by a test or CI) nothing is written, so logs stay clean. The line
is erased when the bar closes, before findings and the summary are printed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO


def is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _columns(stream) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
    return columns if columns > 0 else 80  # a pseudo-terminal nobody sized says 0


class Progress:
    """Files done out of ``total``, and the time since the bar was made.

    ``tty`` decides whether the bar is drawn (None: ask ``stream.isatty()``); it is
    never drawn for fewer than two files. ``advance`` redraws at most every
    ``interval`` seconds (and always on the last file); ``close`` erases the line.
    """

    def __init__(self, total: int, stream: TextIO | None = None, *, tty: bool | None = None,
                 interval: float = 0.1, columns: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.done = 0
        self.enabled = total > 1 and (is_tty(self.stream) if tty is None else tty)
        self.interval = interval
        self.columns = columns
        self.clock = clock
        self.started = clock()
        self._drawn_at: float | None = None
        self._width = 0  # characters on the line now

    def render(self) -> str:
        elapsed = self.clock() - self.started
        digits = len(str(self.total))
        counts = f"{self.done:>{digits}}/{self.total} files  {elapsed:.1f} s"
        columns = self.columns or _columns(self.stream)
        room = columns - 1 - len("ndif-opt [] ") - len(counts) - 1
        size = max(0, min(30, room))
        if size < 5:
            return f"ndif-opt {counts}"[: max(columns - 1, 0)]
        filled = size * self.done // self.total if self.total else size
        return f"ndif-opt [{'#' * filled}{'.' * (size - filled)}] {counts}"

    def draw(self) -> None:
        if not self.enabled:
            return
        line = self.render()
        pad = " " * max(self._width - len(line), 0)
        self._write("\r" + line + pad)
        self._width = len(line)
        self._drawn_at = self.clock()

    def advance(self, count: int = 1) -> None:
        self.done += count
        if not self.enabled:
            return
        now = self.clock()
        if self._drawn_at is None or self.done >= self.total or now - self._drawn_at >= self.interval:
            self.draw()

    def close(self) -> None:
        """Erase the bar (the cursor is left at the start of the empty line)."""
        if self.enabled and self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing
            self.enabled = False

    def __enter__(self) -> "Progress":
        self.draw()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
