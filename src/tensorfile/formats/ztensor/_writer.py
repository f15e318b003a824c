"""Which zTensor writer a ``version`` asks for, chosen here and only here, above both
containers: :class:`Writer` is the v1.0 writer (:class:`.v1._writer.Writer1`) unless
``version=2``, when it makes a :class:`.v2._writer.Writer2`; :func:`save_file` writes
through it. Neither version's writer imports the other.

Example:
    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> type(Writer(path, version=2)).__name__, type(Writer(path)).__name__
    ('Writer2', 'Writer')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tensorfile.core.errors import InvalidArgumentError
from tensorfile.formats.ztensor._inputs import check_version
from tensorfile.formats.ztensor.v1._writer import Writer1
from tensorfile.formats.ztensor.v2._writer import Writer2

__all__ = ["Writer", "save_file"]


class Writer(Writer1):
    """Append tensors to a new zTensor file, one at a time: zTensor v1.0 (the default), or
    v2 with ``version=2``, which makes a :class:`~tensorfile.ztensor.Writer2` (it also takes
    ``align``, and its ``checksum`` is ``"xxh3"`` or ``"sha256"``).

    Args:
        path: destination; it appears (atomically) when the writer is closed.
        attributes: file-level text attributes (recommended keys: ``license``,
            ``description``, ``framework``, ``model_name``, ``created_at``).
        compression: ``None`` (raw) or ``"zstd"``: the default for every component.
        level: zstd level (1-22; negative levels are faster still).
        checksum: ``None``, ``"crc32c"`` or ``"sha256"``: the default digest per component.
        fsync: flush the file and its folder entry to stable storage on close.
        version: 1 (zTensor v1.0, the default) or 2 (a :class:`~tensorfile.ztensor.Writer2`).
        align: v2 only (see :class:`~tensorfile.ztensor.Writer2`); refused for v1.0.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
        >>> with Writer(path, compression="zstd") as w:
        ...     w.add("w", np.zeros(4, np.float32))
        ...     w.add_stream("big", "F32", (2,), [np.ones(2, np.float32)])
        >>> open(path, "rb").read(8)
        b'ZTEN1000'
    """

    def __new__(cls, *args: Any, version: Any = 1, **kwargs: Any) -> Any:
        if check_version(version) == 2:
            return Writer2(*args, **kwargs)  # (not a Writer: __init__ is not called)
        return super().__new__(cls)


def save_file(
    tensors: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    attributes: Mapping[str, Any] | None = None,
    compression: str | None = None,
    level: int = 3,
    checksum: str | None = None,
    fsync: bool = False,
    version: int = 1,
    align: int | None = None,
) -> None:
    """Write ``tensors`` (name → array, torch tensor or sparse tensor) to a zTensor file:
    zTensor v1.0, or v2 with ``version=2`` (which also takes ``align``; there ``checksum``
    is ``"xxh3"`` or ``"sha256"``).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import ztensor
        >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
        >>> ztensor.save_file({"w": np.ones((2, 2), np.float32)}, path, checksum="crc32c")
        >>> ztensor.load_file(path)["w"].sum()
        np.float32(4.0)
    """
    if not isinstance(tensors, Mapping):
        raise InvalidArgumentError(
            f"expected a mapping of names to tensors, got {type(tensors).__name__}"
        )
    with Writer(
        path,
        attributes=attributes,
        compression=compression,
        level=level,
        checksum=checksum,
        fsync=fsync,
        version=version,
        align=align,
    ) as writer:
        writer._add_all(tensors.items())
