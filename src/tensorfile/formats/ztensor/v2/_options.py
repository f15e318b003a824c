"""The options of the zTensor v2 writer, checked: version, compression, level, checksum,
alignment and attributes. A v1.0 digest (crc32c) is refused by name.

Example:
    >>> check_version(2), checksum_of("xxh3"), align_of(8192)
    (2, 'xxh3', 8192)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfile.core.errors import InvalidArgumentError, TensorFileError, ZTensorUnsupportedError
from tensorfile.core.reader import brief
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor.v2._format import ALIGN_FLOOR, check_name

__all__ = [
    "ENCODING",
    "align_of",
    "attributes_of",
    "check_version",
    "checksum_of",
    "compression_of",
    "level_of",
]

ENCODING = "zt.zstd-seekable/1"
_MIN_LEVEL, _MAX_LEVEL = -(1 << 17), 22


def check_version(value: Any) -> int:
    """``value`` when it is a zTensor version tensorfile writes (1 or 2).

    Example:
        >>> check_version(2)
        2
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value not in (1, 2):
        raise InvalidArgumentError(f"version must be 1 (zTensor v1.0) or 2, got {brief(value)}")
    return int(value)


def compression_of(value: Any) -> str | None:
    if value is None or value is False or (isinstance(value, str) and value in ("raw", "none")):
        return None
    if value is True or (isinstance(value, str) and value in ("zstd", ENCODING)):
        return ENCODING
    raise ZTensorUnsupportedError(f"unknown compression {brief(value)}; use None or 'zstd'")


def checksum_of(value: Any) -> str | None:
    if value is None or value is False or (isinstance(value, str) and value == "none"):
        return None
    if isinstance(value, str) and value in ("xxh3", "sha256"):
        return value
    if isinstance(value, str) and value == "crc32c":
        raise InvalidArgumentError(
            "checksum 'crc32c' is a zTensor v1.0 digest; zTensor v2 defines 'xxh3' and 'sha256' "
            "(or write version=1)"
        )
    raise ZTensorUnsupportedError(f"unknown checksum {brief(value)}; use None, 'xxh3' or 'sha256'")


def level_of(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not _MIN_LEVEL <= int(value) <= _MAX_LEVEL
    ):
        raise InvalidArgumentError(
            f"zstd level must be an integer from {_MIN_LEVEL} to {_MAX_LEVEL}, got {brief(value)}"
        )
    return int(value)


def align_of(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or int(value) <= 0
        or int(value) % ALIGN_FLOOR
        or int(value) > 1 << 40
    ):
        raise InvalidArgumentError(
            f"align must be a positive multiple of {ALIGN_FLOOR} (65536 by default), got "
            f"{brief(value)}"
        )
    return int(value)


def attributes_of(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"attributes must be a mapping, got {type(value).__name__}")
    out = dict(value)
    for key in out:
        try:
            check_name(key, "attributes", "an attribute key")
        except TensorFileError as exc:
            raise InvalidArgumentError(str(exc)) from None
    try:
        _cbor.encode({"attributes": out}, deterministic=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"attributes cannot be written as CBOR: {exc}") from None
    return out
