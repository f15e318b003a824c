"""Digests computed the way other tools would: with each algorithm's own package, not
tensorfile's, as independent oracles for the digest and content id tests."""

from __future__ import annotations

import hashlib
from pathlib import Path


def digest_text(algorithm: str, data: bytes) -> str:
    """``algorithm:hex`` of ``data`` (``sha256``, ``xxh3`` or ``crc32c``), lower-case."""
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(data).hexdigest()
    if algorithm == "xxh3":
        import xxhash

        return f"xxh3:{xxhash.xxh3_64_intdigest(data):016x}"
    import crc32c

    return f"crc32c:{crc32c.crc32c(data):08x}"


def flip_byte(path: Path, tensor: str, at: int = 0) -> None:
    """Change byte ``at`` of ``tensor``'s stored data in place (same size, header kept): the
    corruption a stored digest exists to catch."""
    import tensorfile

    with tensorfile.open(str(path), verify=False) as f:
        start = f.info(tensor).byte_range.start
    with open(path, "r+b") as out:
        out.seek(start + at)
        byte = out.read(1)[0]
        out.seek(start + at)
        out.write(bytes([byte ^ 0x01]))
