"""The input files of a conversion (``from_parquet``, ``from_hf``): regular files only (a FIFO
or a device is refused, never opened: reading one could wait forever), and a folder's files of
one suffix, sorted by name; a folder that holds sub-folders (a partitioned dataset, whose
partition values live in the folder names) is refused rather than read in part.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("b.parquet", "a.parquet", "_SUCCESS"):
    ...     _ = open(os.path.join(folder, name), "w").write("")
    >>> [os.path.basename(f) for f in folder_files(folder, ".parquet")]
    ['a.parquet', 'b.parquet']
"""

from __future__ import annotations

import os
import stat

from ...core.errors import InvalidArgumentError, SourceError, SourceNotFoundError

__all__ = ["checked_file", "folder_files"]


def checked_file(path: str) -> str:
    """``path``, once it is known to be a regular file (symlinks followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SourceNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None
    if not stat.S_ISREG(mode):
        raise SourceError(f"{path} is not a regular file")
    return path


def folder_files(folder: str, suffix: str) -> list[str]:
    """The ``*suffix`` files of ``folder``, sorted by name (names starting with ``.`` or
    ``_``, such as Spark's ``_SUCCESS``, are skipped)."""
    try:
        names = sorted(n for n in os.listdir(folder) if not n.startswith((".", "_")))
    except OSError as exc:
        raise SourceError(f"cannot list {folder}: {exc}") from None
    inner = [n for n in names if os.path.isdir(os.path.join(folder, n))]
    if inner:
        raise InvalidArgumentError(
            f"{folder} holds sub-folders ({', '.join(inner[:3])}): a partitioned dataset is "
            "not read in part; pass its files"
        )
    found = [os.path.join(folder, n) for n in names if n.endswith(suffix)]
    if not found:
        raise SourceNotFoundError(f"{folder}: the folder holds no *{suffix} file")
    return [checked_file(f) for f in found]
