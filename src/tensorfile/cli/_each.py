"""Several files for one command: every command that reads one file takes several (a shell
expands ``*.zt`` into many paths), and runs on each in turn.

* One path: the command's own output (one JSON object with ``--json``); an unreadable file
  ends the command with one error line and status 2.
* Several paths: each file's output under a heading (``==> path <==``; the one-line
  commands ``id`` and ``summary`` name the file on the line instead), or with ``--json`` one
  JSON **list** holding each file's object (each exactly what the command prints for that
  file alone, ``schema`` included), in the order given. A file that cannot be read is
  reported on stderr (one line naming it) and skipped, the others are still processed, and
  the status is 2 (after a last line listing the files that failed), else 0.

Example:
    >>> import io
    >>> from ._output import Output
    >>> out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())
    >>> for_each(["a", "b"], out, str.upper, lambda r: {"name": r}, lambda r, label: None)
    0
    >>> out.stdout.getvalue()
    '[{"name": "A"}, {"name": "B"}]\\n'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..core.errors import TensorFileError
from ..sources import redact
from ._errors import describe
from ._output import Output
from ._text import plural

__all__ = ["EXIT_OK", "EXIT_UNREADABLE", "for_each", "named"]

T = TypeVar("T")

EXIT_OK = 0
EXIT_UNREADABLE = 2

FAILED_NAMES_SHOWN = 5
"""How many of the files that failed the closing error line names."""


def named(path: str, exc: BaseException) -> str:
    """:func:`~._errors.describe` of ``exc``, prefixed with ``path`` (a URL without its
    credentials) when the message does not name it already, as given or as the file the
    error says it concerns (``exc.path``: a ``file://`` URL's local path).

    Example:
        >>> named("a.zt", OSError("gone")), named("a.zt", OSError("a.zt: gone"))
        ('a.zt: I/O error: gone', 'I/O error: a.zt: gone')
    """
    shown = redact(path)
    message = describe(exc)
    own = getattr(exc, "path", None)
    if shown in message or (isinstance(own, str) and own and own in message):
        return message
    return f"{shown}: {message}"


def for_each(
    paths: Sequence[str],
    out: Output,
    read: Callable[[str], T],
    to_json: Callable[[T], Any],
    show: Callable[[T, str | None], None],
    *,
    headings: bool = True,
    failure: str = "could not be read",
) -> int:
    """Run ``read`` on each path and print what it returned: ``to_json(result)`` with
    ``--json``, else ``show(result, label)``, where ``label`` is None for a single path and
    the path (a URL without its credentials) for several; with ``headings`` each file's
    output then comes under an ``==> path <==`` line; ``failure`` says what happened to
    the files that failed, in the closing error line. Returns the exit status: 2 when some
    file could not be read, else 0.

    Errors of tensorfile's and the operating system's are reported per file when there are
    several (anything else, and every error of a single path, reaches the caller).
    """
    if len(paths) == 1:
        result = read(paths[0])
        if out.json_mode:
            out.json(to_json(result))
        else:
            show(result, None)
        return EXIT_OK
    docs: list[Any] = []
    failed: list[str] = []
    shown = 0
    for path in paths:
        try:
            result = read(path)
        except (TensorFileError, OSError) as exc:
            out.error(named(path, exc))
            failed.append(redact(path) or "''")  # an empty path, shown as such
            continue
        if out.json_mode:
            docs.append(to_json(result))
            continue
        label = redact(path)
        if headings:
            if shown:
                out.line()
            out.line(f"==> {label} <==")
        show(result, label)
        shown += 1
    if out.json_mode:
        out.json(docs)
    if not failed:
        return EXIT_OK
    names = ", ".join(failed[:FAILED_NAMES_SHOWN])
    unnamed = len(failed) - FAILED_NAMES_SHOWN
    more = f" and {unnamed:,} more" if unnamed > 0 else ""
    out.error(f"{len(failed):,} of {plural(len(paths), 'file')} {failure}: {names}{more}")
    return EXIT_UNREADABLE
