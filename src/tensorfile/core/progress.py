"""Progress of long loads on a terminal: bytes done and GB/s on stderr.

A load wraps its work in :func:`task` and reports bytes as they land with
:meth:`Task.advance`, from any thread. Nothing is shown unless stderr is a terminal (or the
environment says ``TENSORFILE_PROGRESS=1``; ``TENSORFILE_PROGRESS=0`` turns it off
everywhere), and nothing before the load has run :data:`DELAY` seconds: a load that takes
less never draws a line. Once shown, the line is redrawn every :data:`INTERVAL` seconds by a
small daemon thread (so a stalled load still shows its rate falling), and on the way out it
is replaced by a summary line (or erased, when the load failed). When progress is off,
:func:`task` returns a shared do-nothing :class:`Task`: ``advance`` costs a method call.
Tasks nested inside a shown one (a sharded checkpoint's files) stay silent: the outer line
counts for all of them.

Example:
    >>> with task(3 << 30, "loading model.safetensors") as p:  # stderr is no terminal here
    ...     p.advance(1 << 30)
    >>> type(p).__name__, p.done
    ('Task', 0)
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from types import TracebackType
from typing import Self, TextIO

__all__ = ["DELAY", "ENV", "INTERVAL", "Task", "enabled", "task"]

ENV = "TENSORFILE_PROGRESS"
"""The environment variable: ``1`` shows progress even when stderr is no terminal, ``0``
never shows it; unset, stderr being a terminal decides."""

DELAY = 2.0
"""Seconds a load runs before its progress line first appears."""

INTERVAL = 0.25
"""Seconds between two redraws of the line."""

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
_lock = threading.Lock()
_shown = 0  # tasks drawing now: only the outermost draws


def enabled(stream: TextIO | None = None) -> bool:
    """Whether progress is shown on ``stream`` (stderr by default): :data:`ENV` decides when
    set, else whether the stream is a terminal.

    Example:
        >>> import io
        >>> enabled(io.StringIO())
        False
    """
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class Task:
    """A load in progress; this base class shows nothing (progress is off).

    Example:
        >>> with Task() as p:
        ...     p.advance(10)
        >>> p.done
        0
    """

    done = 0
    """Bytes reported so far (always 0 when nothing is shown)."""

    def advance(self, nbytes: int) -> None:
        """Count ``nbytes`` more bytes done (thread-safe)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_SILENT = Task()


class _Shown(Task):
    """A task drawn on a stream by a daemon thread, from ``delay`` seconds on."""

    def __init__(self, total: int, label: str, stream: TextIO, delay: float) -> None:
        self.total = max(0, int(total))
        self.label = label
        self.stream = stream
        self.delay = delay
        self.done = 0
        self.drawn = False
        self.outer = False
        self._count = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tensorfile-progress", daemon=True)

    def advance(self, nbytes: int) -> None:
        with self._count:
            self.done += nbytes

    def __enter__(self) -> Self:
        global _shown
        with _lock:
            self.outer = _shown == 0
            _shown += self.outer
        if self.outer:
            self._started = time.monotonic()
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _shown
        if not self.outer:
            return
        self._stop.set()
        self._thread.join()
        with _lock:
            _shown -= 1
        if self.drawn:
            self._write(f"\r{self.line(final=True)}\x1b[K\n" if kind is None else "\r\x1b[K")

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while True:
            self.drawn = True
            self._write(f"\r{self.line()}\x1b[K")
            if self._stop.wait(INTERVAL):
                return

    def line(self, final: bool = False) -> str:
        """The text shown: label, bytes done (of the total), the rate so far."""
        seconds = max(time.monotonic() - self._started, 1e-9)
        done = self.done
        text = f"{self.label}: {_gb(done)}"
        if self.total and not final:
            text += f" / {_gb(self.total)} ({100 * done // self.total}%)"
        text += f", {done / seconds / 1e9:.2f} GB/s"
        if final:
            text += f" in {seconds:.1f} s"
        width = shutil.get_terminal_size((100, 24)).columns - 1
        return text if len(text) <= width else text[: max(width - 3, 0)] + "..."

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth an error
            pass


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def task(total: int, label: str = "loading", *, delay: float = DELAY) -> Task:
    """A :class:`Task` for a load of ``total`` bytes (0 when unknown), shown on stderr as
    ``label: done / total (n%), rate`` once it has run ``delay`` seconds, when
    :func:`enabled`; otherwise (or inside another shown task) the silent task.

    Example:
        >>> with task(1 << 20, "reading") as p:
        ...     for _ in range(4):
        ...         p.advance(1 << 18)
    """
    if not enabled() or _shown:
        return _SILENT
    return _Shown(total, label, sys.stderr, delay)
