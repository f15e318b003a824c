"""A progress bar on stderr for the steps that can take long: reading tensor data
(``id --content``, ``diff --data``) and hashing a vocabulary-sized header (``inspect``,
``id``, ``summary``).

The bar is drawn only when stderr is a terminal, and only once there is enough to do for it
to matter (``min_total`` of work, and ``delay`` seconds gone by); it vanishes when done,
leaving the output as it would be without it. The operations of :mod:`tensorfile.ops` call
``report(done, total)`` as they go; pass what :func:`progress` yields as their
``progress`` (None when no bar can be drawn).

Example:
    >>> import io
    >>> from ._output import Output
    >>> out = Output(json_mode=False, stdout=io.StringIO(), stderr=io.StringIO())
    >>> with progress(out, "hashing") as report:  # stderr is not a terminal: no bar
    ...     report is None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from ._output import Output

__all__ = ["HASH_DELAY", "MIN_BYTES", "Report", "progress"]

MIN_BYTES = 64 << 20
"""Less tensor data than this draws no bar (it would flash by)."""

HASH_DELAY = 1.0
"""Seconds a header's hash runs before a bar is drawn for it (most take a few tenths)."""

Report = Callable[[int, int], None]
"""``report(done, total)``: work done so far (bytes or items) out of ``total``."""


class _Bar:
    """Draws a rich progress bar from the first report that passes the thresholds on."""

    def __init__(self, out: Output, description: str, unit: str, min_total: int, delay: float):
        self.out = out
        self.description = description
        self.unit = unit
        self.min_total = min_total
        self.not_before = time.monotonic() + delay
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if total < self.min_total or time.monotonic() < self.not_before:
                return
            self._start(total)
        self.bar.update(self.task, completed=done, total=total)

    def _start(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        count = DownloadColumn() if self.unit == "bytes" else MofNCompleteColumn()
        columns = (TextColumn("{task.description}"), BarColumn(), count, TimeRemainingColumn())
        self.bar = Progress(*columns, console=self.out.err_console, transient=True)
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextmanager
def progress(
    out: Output,
    description: str,
    *,
    unit: Literal["bytes", "items"] = "bytes",
    min_total: int | None = None,
    delay: float = 0.0,
) -> Iterator[Report | None]:
    """A ``report(done, total)`` callable that draws a transient bar on stderr once
    ``total`` is at least ``min_total`` (:data:`MIN_BYTES` for bytes, else 0) and ``delay``
    seconds have passed; None when stderr is not a terminal."""
    if not out.err_console.is_terminal:
        yield None
        return
    least = min_total if min_total is not None else (MIN_BYTES if unit == "bytes" else 0)
    bar = _Bar(out, description, unit, least, delay)
    try:
        yield bar
    finally:
        bar.close()
