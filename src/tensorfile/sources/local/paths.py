"""The local path rules, decided once for every local route (a plain path, a ``file://`` URL,
a :class:`~tensorfile.sources.LocalStore`): names that cannot escape, files that cannot block,
and links that cannot lead out of their folder.

A name, an index and a folder can lie: a name can be ``../x``, a FIFO, a directory or a
symlink to somewhere else. So:

* :func:`check_name` refuses a store name that could leave the store (``..``, absolute, NUL,
  backslash, empty parts); :func:`is_plain_name` says whether a name is one entry of a
  folder.
* :func:`is_inside` is the "inside the folder" rule, symlinks resolved.
* :func:`open_regular` opens with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting
  for a writer) and refuses anything but a regular file; :func:`read_bounded` reads at most
  a given number of bytes.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.symlink("/etc/hostname", os.path.join(folder, "out"))
    >>> is_inside(folder, os.path.join(folder, "out")), is_inside(folder, folder + "/x")
    (False, True)
"""

from __future__ import annotations

import os
import stat

from ...core.errors import FormatError, InvalidArgumentError, SourceError

__all__ = [
    "check_name",
    "is_inside",
    "is_plain_name",
    "open_regular",
    "read_bounded",
    "too_big",
]

_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
)


def check_name(name: object, *, folder: bool = False) -> str:
    """``name`` if it is a store name: ``/``-separated parts relative to the store's root,
    none empty, ``.`` or ``..``, without NUL, backslash or control characters; ``folder``
    allows ``""`` (the root). Anything else is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> check_name("_staging/job/part-0.safetensors")
        '_staging/job/part-0.safetensors'
        >>> try:
        ...     check_name("../x")
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        '../x' is not a name inside the store (parts must not be empty, '.' or '..')
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a store name is a str, not {type(name).__name__}")
    if folder and name == "":
        return name
    if not name.isprintable() or "\\" in name:
        raise InvalidArgumentError(
            f"{name!r} is not a name inside the store (no NUL, backslash or control characters)"
        )
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise InvalidArgumentError(
            f"{name!r} is not a name inside the store (parts must not be empty, '.' or '..')"
        )
    return name


def is_plain_name(name: object) -> bool:
    """Whether ``name`` is a plain file name: no folder part, not ``.``/``..``, no NUL or
    backslash, so that joined to a folder it names an entry of that folder.

    Example:
        >>> is_plain_name("part-1.safetensors"), is_plain_name("../x"), is_plain_name("a/b")
        (True, False, False)
    """
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\\x00")
        and name.isprintable()
    )


def is_inside(folder: str, path: str) -> bool:
    """Whether ``path`` resolves (symlinks followed) to something strictly inside
    ``folder`` (itself resolved)."""
    root = os.path.realpath(folder)
    real = os.path.realpath(path)
    return real != root and os.path.commonpath([root, real]) == root


def open_regular(path: str, what: str) -> int | None:
    """A descriptor of the regular file ``path``, or None when nothing is there.

    Opens without blocking (a FIFO has no writer to wait for) and refuses a FIFO, a
    directory or a device with :class:`~tensorfile.errors.SourceError` naming ``what``.

    Example:
        >>> import os, tempfile
        >>> fifo = os.path.join(tempfile.mkdtemp(), "dataset_manifest.json")
        >>> os.mkfifo(fifo)
        >>> try:
        ...     open_regular(fifo, "the manifest")
        ... except SourceError as exc:
        ...     print(str(exc).endswith("is a FIFO, not a regular file"))
        True
    """
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"cannot open {what} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL byte
        raise InvalidArgumentError(f"cannot open {what} {path!r}: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise SourceError(f"cannot stat {what} {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SourceError(f"{what} {path} is {_kind(mode)}, not a regular file")
    return fd


def _kind(mode: int) -> str:
    """What a node that is not a regular file is, in words."""
    for test, words in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "not a file"


def read_bounded(path: str, what: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` (None when it does not exist), refusing a file
    of more than ``limit`` bytes with :class:`~tensorfile.errors.FormatError` before reading
    past the bound.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "m.json")
        >>> _ = open(path, "wb").write(b"{}")
        >>> read_bounded(path, "the manifest", 10), read_bounded(path + "x", "the manifest", 10)
        (b'{}', None)
    """
    fd = open_regular(path, what)
    if fd is None:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SourceError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if size > limit:
        raise FormatError(too_big(what, path, limit))
    return b"".join(chunks)


def too_big(what: str, shown: str, limit: int) -> str:
    """The message of a bounded read of a file over its bound (``shown``: its path or URL).

    Example:
        >>> too_big("the index", "s3://b/ds/i.parquet", 10)
        'the index s3://b/ds/i.parquet is over 10 bytes, the most it may be'
    """
    return f"{what} {shown} is over {limit} bytes, the most it may be"
