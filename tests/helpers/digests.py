"""Digests computed the way other tools would: with each algorithm's own package, not
tensorfile's, as independent oracles for the digest and content id tests."""

from __future__ import annotations

import hashlib


def digest_text(algorithm: str, data: bytes) -> str:
    """``algorithm:hex`` of ``data`` (``sha256``, ``xxh3`` or ``crc32c``), lower-case."""
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(data).hexdigest()
    if algorithm == "xxh3":
        import xxhash

        return f"xxh3:{xxhash.xxh3_64_intdigest(data):016x}"
    import crc32c

    return f"crc32c:{crc32c.crc32c(data):08x}"
