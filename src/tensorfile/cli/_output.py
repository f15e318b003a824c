"""Where the command line's output goes: data on stdout (a rich rendering or JSON), messages
on stderr. Commands build dataclasses or dicts and hand them here; only the output mode
decides how they look.

Text from a file (tensor names, metadata, dtypes, layouts) or from the command line (paths)
reaches a terminal only through :func:`printable`: control characters, escape sequences,
bidirectional overrides and undecodable bytes are shown as escapes, never sent raw. JSON
stays exact: its strings carry the same characters, as JSON escapes.

Example:
    >>> import io
    >>> out = Output(json_mode=True, stdout=io.StringIO())
    >>> out.json({"a": 1, "b": "\\x1b[31m\\u202e"}); out.stdout.getvalue()
    '{"a": 1, "b": "\\\\u001b[31m\\\\u202e"}\\n'
"""

from __future__ import annotations

import functools
import json
import re
import sys
import unicodedata
from typing import IO, Any

from rich.console import Console

__all__ = ["Output", "human_bytes", "printable"]

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _safe(c: str) -> bool:
    # spaces (no-break, ideographic...) and private-use characters cannot move the cursor
    return c.isprintable() or unicodedata.category(c) in ("Zs", "Co")


def _escape(c: str) -> str:
    n = ord(c)
    if c in _SHORT:
        return _SHORT[c]
    if n < 0x100:
        return f"\\x{n:02x}"
    if 0xDC80 <= n <= 0xDCFF:  # a byte that is not UTF-8, as Python decodes file names
        return f"\\x{n - 0xDC00:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text: str) -> str:
    """``text`` safe for a terminal: every character that is not printable (C0 and C1
    controls, DEL, escape sequences' ESC, bidirectional overrides and other format
    characters, line and paragraph separators, unassigned code points, lone surrogates) is
    written as an escape: ``\\n``, ``\\x1b``, ``\\u202e``; an undecodable byte of a file name as
    ``\\xff``. Printable text, including non-ASCII letters and spaces, is unchanged.

    Example:
        >>> printable("w\\x1b[31m\\r\\x07\\u202egpj.exe"), printable("模型.权重")
        ('w\\\\x1b[31m\\\\r\\\\x07\\\\u202egpj.exe', '模型.权重')
    """
    if text.isprintable():
        return text
    return _OUTSIDE_ASCII.sub(_escape_match, text)


_OUTSIDE_ASCII = re.compile("[^ -~]")  # only these need a closer look


@functools.lru_cache(maxsize=4096)
def _shown(c: str) -> str:
    return c if _safe(c) else _escape(c)


@functools.lru_cache(maxsize=4096)
def _shown_json(c: str) -> str:
    return c if _safe(c) else _json_escape(c)


def _escape_match(m: re.Match[str]) -> str:
    return _shown(m[0])


def _json_match(m: re.Match[str]) -> str:
    return _shown_json(m[0])


def _json_escape(c: str) -> str:
    n = ord(c)
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}"


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


class _Console(Console):
    """rich's console, but a reader that goes away (``| head``) is the command line's to
    handle (rich would exit with status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("the reader of the output went away")


def _console(file: IO[str], width: int | None = None) -> Console:
    # no highlighting, no ":emoji:" codes: names are shown as they are
    return _Console(file=file, highlight=False, soft_wrap=True, emoji=False, width=width)


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
        self.console = _console(self.stdout)
        if not self.console.is_terminal:  # piped or captured: do not cut names at 80 columns
            self.console = _console(self.stdout, width=240)
        self.err_console = _console(self.stderr)

    def json(self, doc: Any) -> None:
        """Print ``doc`` as JSON (the only thing a ``--json`` command prints on stdout): the
        strings exact, with every character a terminal would act on (controls, bidirectional
        overrides, lone surrogates...) as a JSON ``\\uXXXX`` escape."""
        encoding = str(getattr(self.stdout, "encoding", None) or "utf-8").lower()
        ascii_only = encoding.replace("-", "") != "utf8"  # a legacy terminal: all escaped
        text = json.dumps(doc, ensure_ascii=ascii_only, indent=None)
        if not text.isprintable():  # json.dumps escapes only C0 controls, quotes, backslash
            text = _OUTSIDE_ASCII.sub(_json_match, text)
        self.stdout.write(text + "\n")

    def line(self, text: str = "") -> None:
        """Print one line of plain text (no markup, no emoji codes), made
        :func:`printable`."""
        self.console.print(printable(text), markup=False)

    def render(self, renderable: Any) -> None:
        """Print a rich renderable (table, tree...)."""
        self.console.print(renderable)

    def warning(self, message: str) -> None:
        """One :func:`printable` line on stderr."""
        self.stderr.write(f"tensorfile: warning: {printable(' '.join(message.split()))}\n")
        self.stderr.flush()

    def error(self, message: str) -> None:
        """One :func:`printable` line on stderr."""
        self.stderr.write(f"tensorfile: error: {printable(' '.join(message.split()))}\n")
        self.stderr.flush()
