"""``tensorfile``: inspect, identify, diff and edit tensor files from the command line.

The composition root: it parses arguments, runs one command, and maps every error to one
line on stderr and an exit status. Exit status: 0 success, 1 differences found (``diff
--fail-on-diff``), 2 bad usage or unreadable input, 130 interrupted.

Example:
    >>> main(["summary", "/nonexistent.safetensors"])
    2
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from .._version import __version__
from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    TensorFileError,
    UnknownFormatError,
    UnsupportedError,
)
from ._diff import run_diff, run_meta
from ._inspect import run_id, run_inspect, run_summary
from ._output import Output

__all__ = ["EXIT_DIFFERENT", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

PATH_HELP = (
    "a safetensors, zTensor or GGUF file, a sharded checkpoint (*.safetensors.index.json or "
    "a folder holding one), or a glob"
)

Command = Callable[[argparse.Namespace, Output], int]


def _describe(exc: BaseException) -> str:
    """One line for an error: its kind when the message does not already say it."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, UnknownFormatError):  # "x is not a tensor file tensorfile knows ..."
        return message
    if isinstance(exc, FormatError):
        return f"invalid {exc.format or 'tensor'} file: {message}"
    if isinstance(exc, UnsupportedError):
        return f"unsupported: {message}"
    if isinstance(exc, SourceError):
        if message.startswith(("cannot edit", "cannot write")):  # a failed write says so
            return message
        return f"cannot read: {message}"
    if isinstance(exc, OSError):  # not tensorfile's: whether it read or wrote is unknown
        return f"I/O error: {message}"
    if isinstance(exc, InvalidArgumentError):
        return message
    return message


class _UsageError(Exception):
    """A bad command line, as argparse describes it, with the usage of the (sub)command."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = " ".join(usage.split())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error becomes one line of tensorfile's (no usage block)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message, self.format_usage())


def _unique(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    seen: set[str] = set()
    out = []
    for w in caught:
        if str(w.message) not in seen:
            seen.add(str(w.message))
            out.append(w)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="tensorfile",
        description="Inspect, identify, diff and edit tensor files, reading headers only.",
    )
    parser.add_argument("--version", action="version", version=f"tensorfile {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--json", action="store_true", help="print JSON on stdout, nothing else")
        p.set_defaults(run=run, parser=p)
        return p

    p = command("inspect", run_inspect, "format, counts, sizes, metadata and tensors")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--tree", action="store_true", help="group tensors by module prefix")
    p.add_argument("--verbose", action="store_true", help="list every tensor")

    p = command("id", run_id, "the structural hash (weight-inspect's), or --content")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument(
        "--content",
        action="store_true",
        help="hash names, dtypes, shapes and tensor bytes (the same across formats)",
    )

    p = command("summary", run_summary, "one line: format,version,tensors,metadata,hash")
    p.add_argument("path", help=PATH_HELP)

    p = command("diff", run_diff, "tensors and metadata added, removed and changed")
    p.add_argument("a", help=PATH_HELP)
    p.add_argument("b", help="the file to compare with")
    p.add_argument("--format", choices=("text", "md"), default="text", help="text or markdown")
    p.add_argument("--data", action="store_true", help="also compare the tensor bytes")
    p.add_argument(
        "--fail-on-diff", action="store_true", help="exit with status 1 when the files differ"
    )

    p = command("meta", run_meta, "print the metadata, or edit it (atomically: file + rename)")
    p.add_argument("path", help=PATH_HELP)
    p.add_argument(
        "--set", action="append", default=[], metavar="K=V", help="set a key (repeatable)"
    )
    p.add_argument(
        "--delete", action="append", default=[], metavar="K", help="delete a key (repeatable)"
    )
    p.add_argument("--clear", action="store_true", help="remove every key first")
    return parser


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
        args, extra = parser.parse_known_args(argv)
        if extra:  # told with the usage of the command they were given to
            where: argparse.ArgumentParser = getattr(args, "parser", parser)
            more = f" and {len(extra) - 5:,} more" if len(extra) > 5 else ""
            where.error(f"unrecognized arguments: {' '.join(extra[:5])}{more}")
    except SystemExit as exc:  # --help or --version (already printed)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    except _UsageError as exc:
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
        out.error(_describe(exc))
        return EXIT_USAGE
    except Exception as exc:  # a bug: still one line, never a traceback
        out.error(f"internal error ({type(exc).__name__}): {_describe(exc)}; please report it")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
