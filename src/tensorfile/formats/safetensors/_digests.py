"""Per-tensor digests of a safetensors file, read from its ``tensorfile.digests`` metadata
(:mod:`tensorfile.core.digests` says how they are written) and checked as tensors are read.

Example:
    >>> parse_digests({"tensorfile.digests": '{"w": "crc32c:8c28b28a"}'}, ["w"], "m")
    {'w': 'crc32c:8c28b28a'}
    >>> check("m", "w", bytes(8), "crc32c:8c28b28a")
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from tensorfile.core.digests import ALGORITHMS, METADATA_KEY, Digest
from tensorfile.core.errors import InvalidMetadataError, SafetensorChecksumError

__all__ = ["check", "compare", "parse_digests"]

_DIGEST = re.compile(r"(xxh3):[0-9a-f]{16}|(crc32c):[0-9a-f]{8}|(sha256):[0-9a-f]{64}")


def parse_digests(
    metadata: Mapping[str, Any], names: Collection[str], where: str
) -> dict[str, str]:
    """The digests the metadata records, by tensor name (empty when it records none); a
    value that is not a JSON object of known tensor names to ``algorithm:hex`` digests is an
    :class:`~tensorfile.errors.InvalidMetadataError`."""
    text = metadata.get(METADATA_KEY)
    if text is None:
        return {}
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        found = None
    if not isinstance(found, dict):
        raise InvalidMetadataError(
            f"{where}: metadata {METADATA_KEY!r} is not a JSON object of tensor digests"
        )
    known = set(names)
    for name, digest in found.items():
        if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
            raise InvalidMetadataError(
                f"{where}: metadata {METADATA_KEY!r} gives tensor {name!r} the digest "
                f"{str(digest)[:80]!r}, not one of {', '.join(a + ':<hex>' for a in ALGORITHMS)}"
            )
        if name not in known:
            raise InvalidMetadataError(
                f"{where}: metadata {METADATA_KEY!r} has a digest for {name!r}, which the file "
                "does not hold"
            )
    return found


def check(where: str, name: str, data: Any, digest: str) -> None:
    """Compare ``data`` (the tensor's stored bytes) with its recorded ``digest``."""
    got = Digest(digest.partition(":")[0])
    got.update(data)
    compare(where, name, got.value(), digest)


def compare(where: str, name: str, got: str, digest: str) -> None:
    """A :class:`~tensorfile.errors.SafetensorChecksumError` naming the tensor unless the
    digest ``got`` of its bytes is the recorded ``digest``."""
    if got != digest:
        raise SafetensorChecksumError(
            f"{where}: tensor {name!r} has digest {got}, the file records {digest}: "
            "its bytes changed after it was written",
            tensor=name,
        )
