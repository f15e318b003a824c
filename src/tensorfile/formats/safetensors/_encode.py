"""Encode safetensors headers, and check tensor names and metadata for writing.

The writing side of :mod:`tensorfile.formats.safetensors._parse`: the length prefix, then compact
JSON (metadata first, keys sorted; tensors in the order given) padded with spaces so the data
region starts on an aligned offset.

Example:
    >>> from tensorfile.core import dtypes
    >>> blob = encode_header([("w", dtypes.from_safetensors("F32"), (2,), 0, 8)], None)
    >>> blob[8:].rstrip()
    b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    >>> len(blob) % 8, check_name("w")
    (0, 'w')
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, InvalidTypeError, SafetensorError
from tensorfile.core.reader import brief
from tensorfile.formats.safetensors._parse import MAX_HEADER_SIZE, MAX_SIZE, META_KEY, N_LEN

__all__ = ["check_align", "check_metadata", "check_name", "check_shape", "encode_header"]


def _pad_to(length: int, align: int) -> int:
    return -(-length // align) * align


def encode_header(
    items: Sequence[tuple[str, DType, Sequence[int], int, int]],
    metadata: Mapping[str, str] | None,
    *,
    align: int = 8,
) -> bytes:
    """Encode the length prefix and JSON header for ``items`` in the order given.

    ``items`` are ``(name, dtype, shape, start, end)`` with data-relative offsets. Metadata
    keys are written sorted. The JSON is padded with spaces so that the data region starts
    on a multiple of ``align`` bytes (8, as the reference does, or e.g. 64 or 4096).

    Example:
        >>> encode_header([], {"a": "b"})[8:]
        b'{"__metadata__":{"a":"b"}}      '
    """
    align = check_align(align)
    header: dict[str, object] = {}
    if metadata is not None:
        header[META_KEY] = dict(sorted(check_metadata(metadata).items()))
    for name, dt, shape, start, end in items:
        header[name] = {"dtype": dt.name, "shape": list(shape), "data_offsets": [start, end]}
    try:
        body = msgspec.json.encode(header)
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"a tensor name or metadata string is not valid Unicode: {exc}"
        ) from exc
    total = _pad_to(N_LEN + len(body), align) if align > 8 else N_LEN + _pad_to(len(body), 8)
    n = total - N_LEN
    if n > MAX_HEADER_SIZE:
        raise SafetensorError(
            f"the header would be {n} bytes, over the {MAX_HEADER_SIZE}-byte limit readers accept"
        )
    return struct.pack("<Q", n) + body + b" " * (n - len(body))


def check_align(align: object) -> int:
    """Check a writer's ``align``: an integer, a positive multiple of 8.

    Example:
        >>> check_align(64)
        64
    """
    if not isinstance(align, int) or isinstance(align, bool) or align < 8 or align % 8:
        raise InvalidArgumentError(f"align must be a positive multiple of 8, got {brief(align)}")
    if align > MAX_HEADER_SIZE:
        raise InvalidArgumentError(
            f"align {brief(align)} would pad the header past the {MAX_HEADER_SIZE:,}-byte "
            "limit readers accept"
        )
    return align


def check_metadata(metadata: Mapping[str, str]) -> Mapping[str, str]:
    """Check that metadata is a map of strings to strings, all valid Unicode (for writers)."""
    if not isinstance(metadata, Mapping):
        raise InvalidTypeError(
            f"metadata must be a dict of strings to strings, got {type(metadata).__name__}"
        )
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidTypeError(
                f"metadata must map strings to strings; {brief(key)}: {brief(value)} is "
                f"{type(key).__name__} -> {type(value).__name__}"
            )
        _check_text(key, f"metadata key {brief(key)}")
        _check_text(value, f"the value of metadata key {brief(key)}")
    if any(type(k) is not str or type(v) is not str for k, v in metadata.items()):
        return {str.__str__(k): str.__str__(v) for k, v in metadata.items()}  # plain str
    return metadata


def check_name(name: object) -> str:
    """Check a tensor name for writing: a string of valid Unicode, not ``__metadata__``."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"tensor names must be strings, got {brief(name)}")
    if name == META_KEY:
        raise InvalidArgumentError(
            f"{META_KEY!r} is reserved for metadata; it cannot name a tensor"
        )
    _check_text(name, f"tensor name {brief(name)}")
    return name


def check_shape(name: str, shape: object) -> tuple[int, ...]:
    """A writer's shape as a tuple of ints: each an integer (numpy's too, never a bool, a
    float or a string) from 0 to 2**48 - 1, the largest size the format's schema allows.

    Example:
        >>> check_shape("w", [2, 3])
        (2, 3)
    """
    if isinstance(shape, str | bytes) or not hasattr(shape, "__iter__"):
        raise InvalidTypeError(
            f"tensor {name!r}: a shape is a sequence of integers, got {type(shape).__name__}"
        )
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise InvalidTypeError(
                f"tensor {name!r}: a dimension must be an integer, got {brief(d)}"
            )
        value = int(d)
        if not 0 <= value <= MAX_SIZE:
            raise InvalidArgumentError(
                f"tensor {name!r}: dimension {brief(value)} is outside 0 to {MAX_SIZE:,} "
                "(2**48 - 1, the largest size readers accept)"
            )
        dims.append(value)
    return tuple(dims)


def _check_text(text: str, what: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{what} is not valid Unicode: {exc.reason} at position {exc.start} "
            "(a lone surrogate cannot be written as UTF-8)"
        ) from None
