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
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from tensorfile.core.digests import ALGORITHMS, METADATA_KEY, Digest
from tensorfile.core.errors import InvalidMetadataError, SafetensorChecksumError

__all__ = ["InOrder", "check", "compare", "parse_digests"]

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


class InOrder:
    """Checks recorded digests as the file's bytes stream past in file order (a copy of
    the whole file): ``spans`` are ``(name, start, stop, digest)`` in absolute offsets. Each
    tensor is compared as soon as its last byte has passed; :meth:`close` compares those
    the stream never reached (an empty tensor at the end, or a file cut short).

    Example:
        >>> c = InOrder("m", [("w", 2, 5, "crc32c:364b3fb7")])  # b"abc" at 2
        >>> c.update(0, b"xxab"); c.update(4, b"c"); c.close()
        >>> c = InOrder("m", [("w", 2, 5, "crc32c:364b3fb7")])
        >>> try:
        ...     c.update(0, b"xxabd")
        ... except SafetensorChecksumError as exc:
        ...     print(exc)  # doctest: +ELLIPSIS
        m: tensor 'w' has digest crc32c:..., the file records crc32c:364b3fb7: its bytes ...
    """

    def __init__(self, where: str, spans: Iterable[tuple[str, int, int, str]]) -> None:
        self._where = where
        self._spans = sorted(spans, key=lambda s: (s[1], s[2]))
        self._next = 0
        self._digest: Digest | None = None

    def update(self, pos: int, data: Any) -> None:
        """Feed ``data``, the file's bytes from offset ``pos`` on (after those before it)."""
        view = memoryview(data).cast("B")
        end = pos + len(view)
        while self._next < len(self._spans):
            name, start, stop, digest = self._spans[self._next]
            if start >= end and start < stop:
                return
            if self._digest is None:
                self._digest = Digest(digest.partition(":")[0])
            self._digest.update(view[max(start - pos, 0) : max(min(stop, end) - pos, 0)])
            if stop > end:
                return
            self._done(name, digest)

    def close(self) -> None:
        """Compare the tensors whose bytes did not all pass (the stream ended)."""
        while self._next < len(self._spans):
            name, _, _, digest = self._spans[self._next]
            if self._digest is None:
                self._digest = Digest(digest.partition(":")[0])
            self._done(name, digest)

    def _done(self, name: str, digest: str) -> None:
        got = self._digest.value() if self._digest is not None else ""
        self._digest = None
        self._next += 1
        compare(self._where, name, got, digest)
