"""The ``zt.zstd-seekable/1`` encoding profile: independent zstd frames and a seek table.

A part so encoded is a sequence of zstd frames, each with a content checksum and at most
16 MiB of content, all but the last of the same content size, followed by the zstd
seekable format's seek table (a skippable frame ``0x184D2A5E`` listing each frame's
compressed and decompressed size, ending in the frame count, a descriptor byte and the
magic ``0x8F92EAB1``).

Decoding trusts nothing it is told: the seek table must lie inside the stored bytes, its
sizes must add up to the stored bytes and to the part's ``decoded_length`` (the output
buffer is allocated by the caller at that size, which the manifest's bounds and the shape
have already vouched for), every frame's header and blocks are walked before any byte is
decompressed (a frame header claiming a content size other than its seek-table entry is
refused, so nothing is ever allocated by a claimed size), and each frame is decompressed
into its slice of the output, never past it.

Example:
    >>> enc = SeekableEncoder(level=3, frame_size=4)
    >>> stored = b"".join([*enc.feed(b"abcdefghij"), *enc.finish()])
    >>> out = bytearray(10)
    >>> decode_into(stored, memoryview(out), what="x")
    >>> bytes(out), enc.frames
    (b'abcdefghij', 3)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from tensorfile.core.errors import ZTensorError, ZTensorUnsupportedError
from tensorfile.core.parallel import workers

__all__ = [
    "FRAME_SIZE",
    "MAX_FRAME",
    "Plan",
    "SeekableEncoder",
    "decode_into",
    "decode_planned",
    "frame_table",
    "plan",
]

FRAME_SIZE = 1 << 20
"""Decoded bytes per frame that tensorfile writes (as the reference writer does)."""
MAX_FRAME = 16 << 20
"""The largest frame content the profile allows."""

_SKIPPABLE = 0x184D2A5E
_SEEKABLE = 0x8F92EAB1
_ZSTD = 0xFD2FB528
_PARALLEL_MIN = 8 << 20  # decode or encode this much on all cores
_MAX_RATIO = 1 << 15  # zstd's most: a 4-byte RLE block yields one 128 KiB block


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - zstandard is a core dependency
        raise ZTensorUnsupportedError("zstd needs the 'zstandard' package") from exc
    return zstandard


def frame_table(stored: memoryview, decoded_length: int, *, what: str) -> list[tuple[int, int]]:
    """The ``(compressed, decompressed)`` size of each frame, from the seek table at the end
    of ``stored``, checked against the stored bytes and ``decoded_length``."""
    n = stored.nbytes
    if n < 17:
        raise ZTensorError(f"{what}: {n} bytes are too few for a zstd seek table")
    if int.from_bytes(stored[n - 4 :], "little") != _SEEKABLE:
        raise ZTensorError(f"{what}: the stream does not end with the zstd seekable magic")
    descriptor = stored[n - 5]
    if descriptor & 0x7F:
        raise ZTensorError(f"{what}: the seek table's descriptor has reserved bits set")
    entry = 12 if descriptor & 0x80 else 8
    count = int.from_bytes(stored[n - 9 : n - 5], "little")
    content = count * entry + 9
    start = n - 8 - content
    if start < 0:
        raise ZTensorError(
            f"{what}: the seek table lists {count:,} frames, more than {n:,} bytes can hold"
        )
    if (
        int.from_bytes(stored[start : start + 4], "little") != _SKIPPABLE
        or int.from_bytes(stored[start + 4 : start + 8], "little") != content
    ):
        raise ZTensorError(f"{what}: the seek table is not a well-formed skippable frame")
    frames: list[tuple[int, int]] = []
    total_c = total_d = 0
    for at in range(start + 8, start + 8 + count * entry, entry):
        c, d = struct.unpack_from("<II", stored, at)
        if d > MAX_FRAME:
            raise ZTensorError(f"{what}: a frame holds {d:,} bytes, over the 16 MiB limit")
        if d > _MAX_RATIO * c:
            raise ZTensorError(
                f"{what}: a {c:,}-byte zstd frame cannot hold the {d:,} bytes its seek-table "
                "entry claims"
            )
        total_c += c
        total_d += d
        frames.append((c, d))
    if total_d != decoded_length:
        raise ZTensorError(
            f"{what}: the seek table's frames hold {total_d:,} bytes, the manifest declares a "
            f"decoded_length of {decoded_length:,}"
        )
    if total_c != start:
        raise ZTensorError(
            f"{what}: the seek table's frames take {total_c:,} bytes, the stream has {start:,} "
            "before the table"
        )
    if any(d != frames[0][1] for _, d in frames[:-1]):
        raise ZTensorError(f"{what}: frames other than the last differ in size")
    return frames


def _check_frame(frame: memoryview, size: int, *, what: str) -> None:
    """Walk one zstd frame's header and block headers: it must be one whole frame with a
    content checksum, exactly the bytes the seek table gives it, and declare no content
    size other than ``size``."""
    n = frame.nbytes
    if n < 6 or int.from_bytes(frame[:4], "little") != _ZSTD:
        raise ZTensorError(f"{what}: a frame does not start with the zstd magic")
    fhd = frame[4]
    fcs_flag, single, checksum, did_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
    if fhd & 0x08:
        raise ZTensorError(f"{what}: a zstd frame header has its reserved bit set")
    if not checksum:
        raise ZTensorError(f"{what}: a frame carries no content checksum (the profile needs one)")
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    if pos + fcs_size > n:
        raise ZTensorError(f"{what}: a frame ends inside its header")
    if fcs_size:
        fcs = int.from_bytes(frame[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
        if fcs != size:
            raise ZTensorError(
                f"{what}: a frame header declares {fcs:,} bytes of content, its seek-table "
                f"entry {size:,}"
            )
    pos += fcs_size
    while True:
        if pos + 3 > n:
            raise ZTensorError(f"{what}: a frame ends inside a block")
        header = int.from_bytes(frame[pos : pos + 3], "little")
        last, kind, block = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise ZTensorError(f"{what}: a frame has a block of the reserved type")
        pos += 3 + (1 if kind == 1 else block)
        if pos > n:
            raise ZTensorError(f"{what}: a frame ends inside a block")
        if last:
            break
    if pos + 4 != n:
        raise ZTensorError(
            f"{what}: a frame takes {pos + 4:,} bytes, its seek-table entry says {n:,}"
        )


def _decode_frame(frame: memoryview, out: memoryview, *, what: str) -> None:
    zstd = _zstd()
    want = out.nbytes
    try:
        reader = zstd.ZstdDecompressor().stream_reader(frame, read_across_frames=False)
        with reader:
            got = 0
            while got < want:
                k = reader.readinto(out[got:])
                if k == 0:
                    break
                got += k
            extra = reader.read(1) if got == want else b""
    except zstd.ZstdError as exc:
        raise ZTensorError(f"{what}: a zstd frame is corrupt: {exc}") from exc
    if got != want or extra:
        raise ZTensorError(
            f"{what}: a zstd frame decodes to {'more' if extra else f'{got:,}'} bytes, its "
            f"seek-table entry says {want:,}"
        )


Plan = list[tuple[memoryview, int]]
"""Each frame's bytes and decoded size, checked: what :func:`decode_planned` decodes."""


def plan(stored: Any, decoded_length: int, *, what: str) -> Plan:
    """Check the seek table and every frame's header and blocks of ``stored`` against
    ``decoded_length``, before anything is allocated for the output."""
    view = memoryview(stored).cast("B")
    jobs: Plan = []
    pos = 0
    for c, d in frame_table(view, decoded_length, what=what):
        frame = view[pos : pos + c]
        _check_frame(frame, d, what=what)
        jobs.append((frame, d))
        pos += c
    return jobs


def decode_planned(jobs: Plan, out: memoryview, *, what: str) -> None:
    """Decode the planned frames into ``out`` (exactly their total size); large parts on
    all cores."""
    target = out.cast("B") if out.format != "B" or out.ndim != 1 else out
    work: list[tuple[memoryview, memoryview]] = []
    dpos = 0
    for frame, d in jobs:
        work.append((frame, target[dpos : dpos + d]))
        dpos += d
    if dpos != target.nbytes:
        raise ZTensorError(f"{what}: the frames hold {dpos:,} bytes, {target.nbytes:,} expected")
    threads = workers(target.nbytes) if target.nbytes >= _PARALLEL_MIN else 1
    if threads < 2 or len(work) < 2:
        for frame, dest in work:
            _decode_frame(frame, dest, what=what)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(work)), thread_name_prefix="tensorfile-zt2") as pool:
        for future in [pool.submit(_decode_frame, f, d, what=what) for f, d in work]:
            future.result()


def decode_into(stored: Any, out: memoryview, *, what: str) -> None:
    """Decode the seekable stream ``stored`` into ``out``, which it must fill exactly (the
    part's ``decoded_length``)."""
    target = out.cast("B") if out.format != "B" or out.ndim != 1 else out
    decode_planned(plan(stored, target.nbytes, what=what), target, what=what)


class SeekableEncoder:
    """Encode a part's bytes, fed in pieces of any size, as a seekable stream: frames of
    ``frame_size`` decoded bytes (the last one shorter), each with a content size and
    checksum, then the seek table. Only a batch of frames is in memory at a time."""

    def __init__(self, *, level: int, frame_size: int = FRAME_SIZE, threads: int = 0) -> None:
        if not 0 < frame_size <= MAX_FRAME:
            raise ValueError(f"frame_size must be 1 to {MAX_FRAME}, got {frame_size}")
        zstd = _zstd()
        try:
            self._cctx = zstd.ZstdCompressor(
                level=level, write_checksum=True, write_content_size=True
            )
        except zstd.ZstdError as exc:
            raise ZTensorError(f"zstd level {level} is not usable: {exc}") from exc
        self._level = level
        self._frame_size = frame_size
        self._threads = threads
        self._pending = bytearray()
        self._entries: list[tuple[int, int]] = []

    @property
    def frames(self) -> int:
        """Frames written so far."""
        return len(self._entries)

    def _compress(self, pieces: list[memoryview]) -> Iterator[bytes]:
        """Compress ``pieces`` in order, a batch at a time (on several threads when asked)."""
        batch = max(1, 2 * self._threads)
        for first in range(0, len(pieces), batch):
            group = pieces[first : first + batch]
            if self._threads > 1 and len(group) > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(
                    min(self._threads, len(group)), thread_name_prefix="tensorfile-zt2"
                ) as pool:
                    packed = list(pool.map(self._one, group))
            else:
                packed = [self._cctx.compress(p) for p in group]
            for piece, frame in zip(group, packed, strict=True):
                self._entries.append((len(frame), piece.nbytes))
                yield frame

    def _one(self, piece: memoryview) -> bytes:
        # one compressor per call: a ZstdCompressor must not be shared between threads
        cctx = _zstd().ZstdCompressor(
            level=self._level, write_checksum=True, write_content_size=True
        )
        out: bytes = cctx.compress(piece)
        return out

    def feed(self, data: Any) -> Iterator[bytes]:
        """Add bytes; yield the frames they complete, in order (consume them all before the
        next call)."""
        view = memoryview(data).cast("B")
        size = self._frame_size
        pieces: list[memoryview] = []
        if self._pending:
            take = min(size - len(self._pending), view.nbytes)
            self._pending += view[:take]
            view = view[take:]
            if len(self._pending) == size:
                pieces.append(memoryview(bytes(self._pending)))
                self._pending.clear()
        whole = view.nbytes // size * size
        pieces += [view[i : i + size] for i in range(0, whole, size)]
        if whole < view.nbytes:
            self._pending += view[whole:]
        return self._compress(pieces)

    def finish(self) -> list[bytes]:
        """The last frame (if any bytes are pending) and the seek table."""
        out = list(self._compress([memoryview(bytes(self._pending))])) if self._pending else []
        self._pending.clear()
        table = b"".join(struct.pack("<II", c, d) for c, d in self._entries)
        content = len(table) + 9
        out.append(
            struct.pack("<II", _SKIPPABLE, content)
            + table
            + struct.pack("<IBI", len(self._entries), 0, _SEEKABLE)
        )
        return out
