"""Where the command line's output goes: data on stdout (a rich rendering or JSON), messages
on stderr. Commands build dataclasses or dicts and hand them here; only the output mode
decides how they look.

Example:
    >>> import io
    >>> out = Output(json_mode=True, stdout=io.StringIO())
    >>> out.json({"a": 1}); out.stdout.getvalue()
    '{"a": 1}\\n'
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from rich.console import Console

__all__ = ["Output", "human_bytes"]


def human_bytes(n: int) -> str:
    """``1.5 MB``-style sizes (powers of 1000, as file managers and hubs show them).

    Example:
        >>> human_bytes(999), human_bytes(999_999), human_bytes(1_500_000)
        ('999 B', '1.0 MB', '1.5 MB')
    """
    if n < 1000:
        return f"{n} B"
    size = float(n)
    for unit in ("kB", "MB", "GB", "TB"):
        size /= 1000
        if round(size, 1) < 1000 or unit == "TB":
            return f"{size:.1f} {unit}"
    return f"{n} B"  # pragma: no cover


class Output:
    """The command's two streams.

    Args:
        json_mode: print data as one JSON document instead of tables.
        stdout, stderr: where to write (the process's streams by default).
    """

    def __init__(
        self, *, json_mode: bool, stdout: IO[str] | None = None, stderr: IO[str] | None = None
    ) -> None:
        self.json_mode = json_mode
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.console = Console(file=self.stdout, highlight=False, soft_wrap=True)
        if not self.console.is_terminal:  # piped or captured: do not cut names at 80 columns
            self.console = Console(file=self.stdout, highlight=False, soft_wrap=True, width=240)
        self.err_console = Console(file=self.stderr, highlight=False, soft_wrap=True)

    def json(self, doc: Any) -> None:
        """Print ``doc`` as JSON (the only thing a ``--json`` command prints on stdout)."""
        self.stdout.write(json.dumps(doc, ensure_ascii=False, indent=None) + "\n")

    def line(self, text: str = "") -> None:
        """Print plain text (no markup interpretation)."""
        self.console.print(text, markup=False)

    def render(self, renderable: Any) -> None:
        """Print a rich renderable (table, tree...)."""
        self.console.print(renderable)

    def warning(self, message: str) -> None:
        """One line on stderr."""
        self.stderr.write(f"tensorfile: warning: {' '.join(message.split())}\n")
        self.stderr.flush()

    def error(self, message: str) -> None:
        """One line on stderr."""
        self.stderr.write(f"tensorfile: error: {message}\n")
        self.stderr.flush()
