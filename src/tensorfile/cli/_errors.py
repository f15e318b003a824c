"""The command line's one map from an error to the line that tells it.

Example:
    >>> from tensorfile.core.errors import UnsupportedError
    >>> describe(UnsupportedError("codec lz4"))
    'unsupported: codec lz4'
"""

from __future__ import annotations

from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    UnknownFormatError,
    UnsupportedError,
)

__all__ = ["describe"]


def describe(exc: BaseException) -> str:
    """One line for an error: its kind when the message does not already say it.

    Example:
        >>> describe(OSError("disk on fire"))
        'I/O error: disk on fire'
    """
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
