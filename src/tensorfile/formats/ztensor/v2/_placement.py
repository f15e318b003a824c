"""Where the zTensor v2 writer puts each blob, and whether a part is kept compressed.

Every v2 blob starts at a multiple of 4096 (the format's floor). How much more a writer
aligns is its choice:

* ``align=N`` (the user's choice): every blob and the manifest at a multiple of ``N``.
* the default, in a writer without compression: every blob at a multiple of 65536, the
  spec's canonical layout (what ztensor 2.1.2 writes; each tensor on its own 64 KiB pages).
* the default, in a writer with compression (``compression="zstd"``): blobs are *packed*:
  an encoded blob (never mapped, so page alignment buys it nothing) and a raw blob under
  64 KiB at the next multiple of 4096, a raw blob of 64 KiB or more at the next multiple of
  65536 (zero-copy on 64 KiB pages too), and the manifest at a multiple of 4096.

Alongside the file it writes, :class:`Placement` follows the file the same tensors would
make *raw* (the same ``align``, or the canonical layout for the default; identical parts
stored once) and the manifest bytes the compressed file needs beyond that file's
(``encoding`` and ``decoded_length`` of each encoded part, blob offsets and lengths of
other sizes). A part is kept encoded only when the encoded blob and the manifest fields it
adds are smaller than its raw bytes *and* the file stays no bigger than the raw one would
be at that point (:meth:`Placement.slack`); a packed file's large raw part moves to 65536
only when that leaves room to spare. So a file written with compression is never bigger
than the same tensors written raw with the same ``align`` (parts added with
:meth:`~Writer2.add`; a streamed part is written as it comes, and a duplicate of a
compressed part, stored once, costs its two manifest fields again, 45 bytes or so, which
the room left covers many times over).

:meth:`Placement.excess` gives, for an explicit ``align``, the file's size, the raw one's
and that of the same blobs packed at 4096, so the writer can warn when the choice costs
space.

Example:
    >>> p = Placement(None, packed=True)  # the raw file places a part first, then this one
    >>> p.raw_blob("small", 3000), p.raw_align(8, 3000), p.manifest_align
    (65536, 4096, 4096)
    >>> p.raw_blob("big", 1 << 20), p.raw_align(4096 + 3000, 1 << 20)
    (131072, 65536)
    >>> Placement(None, packed=False).raw_align(8, 3000), Placement(8192, packed=True).encoded_align
    (65536, 8192)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfile.formats.ztensor.v2._format import ALIGN_CANONICAL, ALIGN_FLOOR, FOOTER_SIZE, MAGIC

__all__ = ["Placement", "up"]

_KEEP = ALIGN_FLOOR
"""Slack a large raw blob must leave when it takes a 64 KiB boundary in a packed file (room
for duplicates of compressed parts, which cost manifest bytes and no blob)."""


def up(pos: int, alignment: int) -> int:
    """``pos`` rounded up to a multiple of ``alignment``.

    Example:
        >>> up(8, 4096), up(4096, 4096), up(4097, 65536)
        (4096, 4096, 65536)
    """
    return pos + (-pos % alignment)


@dataclass
class Placement:
    """The placement policy of one writer, and the raw file it is measured against.

    Args:
        align: the user's alignment, or None for the default.
        packed: whether the writer compresses by default (the packed layout applies then).
    """

    align: int | None
    packed: bool
    raw_end: int = len(MAGIC)
    """Where the raw file's last blob ends."""
    grow: int = 0
    """Manifest bytes the file needs beyond the raw file's (may be negative)."""
    stored: int = 0
    """Blob bytes written (each distinct blob once)."""
    floor_end: int = len(MAGIC)
    """Where the last blob would end if every blob written were placed at 4096."""
    _raw_blobs: dict[object, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.packed = self.packed and self.align is None
        self.raw_alignment = self.align or ALIGN_CANONICAL

    @property
    def encoded_align(self) -> int:
        """Where an encoded blob starts."""
        if self.packed:
            return ALIGN_FLOOR
        return self.raw_alignment

    @property
    def manifest_align(self) -> int:
        """Where the manifest starts."""
        return ALIGN_FLOOR if self.packed else self.raw_alignment

    def raw_blob(self, key: object, nbytes: int) -> int:
        """Place a raw part of ``nbytes`` in the raw file (once per ``key``, the part's
        content); its offset there."""
        found = self._raw_blobs.get(key)
        if found is not None:
            return found
        start = up(self.raw_end, self.raw_alignment)
        self.raw_end = start + nbytes
        self._raw_blobs[key] = start
        return start

    def slack(self, pos: int, *, grow: int = 0, raw_end: int | None = None) -> int:
        """How many bytes smaller than the raw file this file would be if it ended at
        ``pos`` (with ``grow`` more manifest bytes; ``raw_end``: the raw file's end, its
        current one by default)."""
        raw = up(self.raw_end if raw_end is None else raw_end, self.raw_alignment)
        return raw - up(pos, self.manifest_align) - self.grow - grow

    def raw_align(self, pos: int, nbytes: int) -> int:
        """Where a raw blob of ``nbytes`` goes when the file is at ``pos`` (after the raw
        file has placed the same part)."""
        if not self.packed:
            return self.raw_alignment
        if nbytes < ALIGN_CANONICAL:
            return ALIGN_FLOOR
        at = up(pos, ALIGN_CANONICAL)
        return ALIGN_CANONICAL if self.slack(at + nbytes) >= _KEEP else ALIGN_FLOOR

    def keep_encoded(self, pos: int, stored: int, decoded: int, grow: int) -> bool:
        """Whether an encoded blob of ``stored`` bytes (``decoded`` raw), ending the file at
        ``pos`` and adding ``grow`` manifest bytes, is worth keeping over the raw bytes."""
        return stored + grow < decoded and self.slack(pos, grow=grow) >= 0

    def wrote(self, nbytes: int, grow: int) -> None:
        """Count a blob written (``nbytes``, 0 for an alias) and its manifest bytes."""
        self.stored += nbytes
        self.grow += grow
        if nbytes:
            self.floor_end = up(self.floor_end, ALIGN_FLOOR) + nbytes

    def excess(self, pos: int, manifest: int) -> tuple[int, int, int]:
        """For a file whose manifest (``manifest`` bytes) goes at the next aligned offset
        after ``pos``: (its size, the raw file's size, the size of the same blobs and
        manifest placed at 4096)."""
        size = up(pos, self.manifest_align) + manifest + FOOTER_SIZE
        raw = up(self.raw_end, self.raw_alignment) + manifest - self.grow + FOOTER_SIZE
        floor = up(self.floor_end, ALIGN_FLOOR) + manifest + FOOTER_SIZE
        return size, raw, floor
