"""``tensorfile.open``: detect a file's format and return a reader for it."""

from __future__ import annotations

import os

from .errors import InvalidArgumentError
from .reader import Reader
from .sources import MemorySource, open_path
from .sources.base import Source

__all__ = ["detect_format", "open"]

_FORMATS = ("safetensors", "ztensor")
ZTENSOR_MAGIC = b"ZTEN"


def detect_format(source: Source) -> str:
    """``"safetensors"`` or ``"ztensor"``, from the first bytes of ``source``."""
    head = source.read(0, min(8, source.size))
    if head.startswith(ZTENSOR_MAGIC):
        return "ztensor"
    return "safetensors"


def open(
    path_or_data: str | os.PathLike[str] | bytes | bytearray | memoryview,
    *,
    format: str | None = None,
) -> Reader:
    """Open a tensor file (a path, an ``http(s)://`` or fsspec URL, or its bytes) and return
    a :class:`~tensorfile.reader.Reader`. Over HTTP, the header costs one range request when
    it fits in the first 100,000 bytes, and each tensor one more.

    The format is detected from the first bytes unless ``format`` names it. The reader has
    ``keys()``, ``metadata``, ``info(name)``, ``view(name)`` (zero-copy, read-only),
    ``get_tensor(name)`` (an owned copy) and ``read_slice(name, index)``, and is a context
    manager.

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> with tensorfile.open(save({"w": np.ones((2, 2), np.float32)})) as f:
        ...     f.format, f.info("w").shape, f.view("w").sum()
        ('safetensors', (2, 2), np.float32(4.0))
    """
    if format is not None and format not in _FORMATS:
        raise InvalidArgumentError(f"unknown format {format!r}; known: {', '.join(_FORMATS)}")
    source: Source
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        source = MemorySource(path_or_data)
    else:
        text = os.fspath(path_or_data)
        tail = format == "ztensor" or (format is None and text.endswith(".zt"))
        source = open_path(text, tail_first=tail)
    try:
        fmt = format or detect_format(source)
        if fmt == "safetensors":
            from .safetensors._reader import SafetensorsReader

            return SafetensorsReader(source)
        from .ztensor._reader import ZTensorReader

        return ZTensorReader(source)
    except BaseException:
        source.close()
        raise
