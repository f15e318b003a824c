"""``tensorfile``: inspect, identify, diff and edit tensor files from the command line.

The composition root: it parses arguments, runs one command, and maps every error to one
line on stderr and an exit status. Exit status: 0 success, 1 differences found (``diff
--fail-on-diff``) or verification failed (``verify``), 2 bad usage or unreadable input (with
several paths: any of them, after the others were processed), 130 interrupted. The parser is
:mod:`._parser`'s, one module per command renders its results (:mod:`._inspect`,
:mod:`._ident`, :mod:`._diff`, :mod:`._meta`), and :mod:`._each` runs a command on several
files.

Example:
    >>> main(["summary", "/nonexistent.safetensors"])
    2
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from ..core.errors import TensorFileError
from ._errors import describe
from ._output import Output
from ._parser import UsageError, build_parser

__all__ = ["EXIT_DIFFERENT", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _unique(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    seen: set[str] = set()
    out = []
    for w in caught:
        if str(w.message) not in seen:
            seen.add(str(w.message))
            out.append(w)
    return out


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; paths given after an option (``inspect a.zt --json b.zt``) join the
    others, anything else left over is a usage error of the command it was given to."""
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "path", None), list):
        paths = [e for e in extra if not e.startswith("-")]
        if len(paths) == len(extra):
            args.path += paths
            return args
    if extra:
        where: argparse.ArgumentParser = getattr(args, "parser", parser)
        more = f" and {len(extra) - 5:,} more" if len(extra) > 5 else ""
        where.error(f"unrecognized arguments: {' '.join(extra[:5])}{more}")
    check = getattr(args, "check", None)  # a command's rule over its options together
    problem = check(args) if check is not None else None
    if problem:
        getattr(args, "parser", parser).error(problem)
    return args


def _lenient_streams() -> None:
    """Text a terminal's legacy encoding (Latin-1...) cannot show is written as escapes,
    not a crash (UTF-8 streams need nothing: every text is made printable first)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = str(getattr(stream, "encoding", "utf-8") or "").lower().replace("-", "")
        if reconfigure is not None and encoding != "utf8" and stream.errors == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (OSError, ValueError):  # pragma: no cover - a closed or odd stream
                pass


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush has nowhere to fail."""
    try:
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # not a real file (captured, closed)
        return
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Bad input and bad arguments end with one ``tensorfile: error:`` line on stderr and
    status 2, never a traceback (an unexpected exception too: it is reported as an internal
    error on one line).
    """
    _lenient_streams()
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # --help or --version (already printed)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    except UsageError as exc:
        Output(json_mode=False).error(f"{exc} ({exc.usage}; --help for more)")
        return EXIT_USAGE
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status: int = args.run(args, out)
        for w in _unique(caught):
            out.warning(str(w.message))
        return status
    except KeyboardInterrupt:
        out.error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `tensorfile inspect ... | head`: the reader has enough
        _drop_stdout()
        return EXIT_OK
    except (TensorFileError, OSError) as exc:
        out.error(describe(exc))
        return EXIT_USAGE
    except Exception as exc:  # a bug: still one line, never a traceback
        out.error(f"internal error ({type(exc).__name__}): {describe(exc)}; please report it")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
