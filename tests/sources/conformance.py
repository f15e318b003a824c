"""One conformance suite for the Source protocol (``tensorfile.sources``), in the style of
zarr-python's ``zarr.testing.store.StoreTests``: every kind of source subclasses
:class:`SourceConformance` and provides :meth:`SourceConformance.make`, which returns a
source over exactly the given bytes. Every test below then runs against that kind.

What every source does alike, asserted below: after ``close()`` every method but ``close``
raises SourceError (``buffer()`` included); a ``readinto`` of zero bytes counts nothing;
``readinto`` takes any writable C-contiguous buffers (float32, 2-D) and refuses read-only
ones with InvalidArgumentError. What differs by design: remote sources count their
speculative first read when they open, and serve reads inside it without a request.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile.errors import InvalidArgumentError, SourceError
from tensorfile.sources import ReadStats, Source

# Large enough that a read near the end is outside any speculative first read (100,000 bytes).
BIG = 3 * 1024 * 1024
# An offset in a BIG file that no remote source's first read (its head or tail) covers.
FAR = 1_500_000


def content(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


class SourceConformance:
    """The Source protocol, for one kind of source: subclasses implement :meth:`make`."""

    #: the class :meth:`make` returns (None: not checked)
    source_cls: ClassVar[type | None] = None

    def make(self, data: bytes) -> Source:
        """A new source whose content is ``data``."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------

    def source(self, data: bytes) -> Source:
        """A source from :meth:`make`, closed after the test."""
        src = self.make(data)
        self._opened.append(src)
        return src

    @pytest.fixture(autouse=True)
    def _close_sources(self) -> Iterator[None]:
        self._opened: list[Source] = []
        yield
        for src in self._opened:
            src.close()

    # -- the protocol ------------------------------------------------------------------------

    def test_is_a_source(self) -> None:
        src = self.source(b"abc")
        assert isinstance(src, Source)
        if self.source_cls is not None:
            assert type(src) is self.source_cls
        assert isinstance(src.name, str) and src.name
        assert isinstance(src.stats, ReadStats)
        assert isinstance(src.coalesce_gap, int) and src.coalesce_gap >= 0

    @pytest.mark.parametrize("size", [0, 1, 7, 4096, 100_001])
    def test_size(self, size: int) -> None:
        assert self.source(content(size)).size == size

    def test_read_returns_exactly_the_bytes_asked_for(self) -> None:
        data = content(1000)
        src = self.source(data)
        for offset, length in [(0, 10), (0, 1000), (123, 456), (990, 10), (999, 1), (500, 1)]:
            got = src.read(offset, length)
            assert isinstance(got, bytes)
            assert got == data[offset : offset + length], (offset, length)

    @pytest.mark.parametrize("offset", [0, 1, 500, 1000])
    def test_zero_length_reads_are_empty(self, offset: int) -> None:
        src = self.source(content(1000))
        assert src.read(offset, 0) == b""

    @pytest.mark.parametrize(
        ("offset", "length"),
        [
            (0, 1001),  # one byte too many
            (999, 2),
            (1000, 1),  # starts at the end
            (1001, 0),  # starts past the end
            (5000, 10),
            (-1, 1),  # negative offset
            (-1, 0),
            (-1000, 10),
            (0, -1),  # negative length
            (10, -5),
        ],
    )
    def test_out_of_bounds_reads_are_source_errors(self, offset: int, length: int) -> None:
        src = self.source(content(1000))
        with pytest.raises(SourceError):
            src.read(offset, length)
        assert src.read(0, 4) == content(1000)[:4]  # the source is still usable

    @pytest.mark.parametrize(("offset", "length"), [(0, 1001), (999, 2), (-1, 1), (1001, 0)])
    def test_out_of_bounds_readinto_is_a_source_error(self, offset: int, length: int) -> None:
        src = self.source(content(1000))
        with pytest.raises(SourceError):
            src.readinto(offset, [memoryview(bytearray(max(length, 0)))])

    def test_readinto_scatters_consecutive_bytes(self) -> None:
        data = content(1000)
        src = self.source(data)
        sizes = [3, 0, 10, 1, 200]
        bufs = [bytearray(n) for n in sizes]
        src.readinto(17, [memoryview(b) for b in bufs])
        pos = 17
        for b, n in zip(bufs, sizes, strict=True):
            assert bytes(b) == data[pos : pos + n]
            pos += n

    def test_readinto_one_buffer_up_to_the_end(self) -> None:
        data = content(1000)
        src = self.source(data)
        buf = bytearray(100)
        src.readinto(900, [memoryview(buf)])
        assert bytes(buf) == data[900:]

    def test_readinto_slices_of_one_buffer(self) -> None:
        data = content(1000)
        src = self.source(data)
        out = bytearray(30)
        view = memoryview(out)
        src.readinto(500, [view[20:], view[:20]])  # any writable byte views, in any order
        assert bytes(out[20:]) == data[500:510]
        assert bytes(out[:20]) == data[510:530]

    def test_stats_grow_by_what_was_read(self) -> None:
        data = content(BIG)
        src = self.source(data)
        before = (src.stats.requests, src.stats.bytes_read)
        assert src.read(FAR, 1000) == data[FAR : FAR + 1000]
        assert src.stats.requests == before[0] + 1
        assert src.stats.bytes_read == before[1] + 1000
        buf = bytearray(5000)
        src.readinto(FAR + 100_000, [memoryview(buf)[:2000], memoryview(buf)[2000:]])
        assert bytes(buf) == data[FAR + 100_000 : FAR + 105_000]
        assert src.stats.requests == before[0] + 2
        assert src.stats.bytes_read == before[1] + 6000

    def test_stats_never_shrink(self) -> None:
        data = content(4096)
        src = self.source(data)
        seen = (src.stats.requests, src.stats.bytes_read)
        for offset, length in [(0, 10), (100, 0), (4000, 96), (0, 4096)]:
            src.read(offset, length)
            now = (src.stats.requests, src.stats.bytes_read)
            assert now[0] >= seen[0] and now[1] >= seen[1]
            seen = now

    def test_buffer_is_none_or_the_whole_content(self) -> None:
        data = content(5000)
        src = self.source(data)
        buf = src.buffer()
        assert buf is None or (isinstance(buf, memoryview) and bytes(buf) == data)

    def test_close_is_idempotent(self) -> None:
        src = self.make(content(100))
        src.close()
        src.close()

    def test_reads_after_close_are_source_errors(self) -> None:
        src = self.make(content(200_000))
        src.close()
        with pytest.raises(SourceError):
            src.read(150_000, 10)
        with pytest.raises(SourceError):
            src.readinto(150_000, [memoryview(bytearray(10))])
        with pytest.raises(SourceError):
            src.read(0, 4)  # even bytes a remote source had already fetched

    def test_is_a_context_manager_that_closes(self) -> None:
        data = content(1000)
        with self.make(data) as src:  # type: ignore[attr-defined]
            assert src.read(10, 20) == data[10:30]
        with pytest.raises(SourceError):
            src.read(10, 20)

    def test_buffer_after_close_is_a_source_error(self) -> None:
        src = self.make(content(100))
        src.close()
        with pytest.raises(SourceError):
            src.buffer()

    def test_zero_byte_readinto_counts_nothing(self) -> None:
        src = self.source(content(BIG))
        before = (src.stats.requests, src.stats.bytes_read)
        src.readinto(FAR, [])
        src.readinto(FAR, [memoryview(bytearray(0)), memoryview(bytearray(0))])
        assert (src.stats.requests, src.stats.bytes_read) == before

    def test_readinto_any_contiguous_buffer(self) -> None:
        data = content(BIG)
        src = self.source(data)
        floats = np.empty(16, np.float32)
        grid = np.empty((4, 8), np.uint8)
        src.readinto(FAR, [memoryview(floats), memoryview(grid)])
        assert floats.tobytes() + grid.tobytes() == data[FAR : FAR + 64 + 32]

    def test_readinto_a_read_only_buffer_is_refused(self) -> None:
        src = self.source(content(BIG))
        with pytest.raises(InvalidArgumentError):
            src.readinto(FAR, [memoryview(bytes(10))])

    def test_views_handed_out_outlive_close(self) -> None:
        data = content(5000)
        src = self.make(data)
        buf = src.buffer()
        src.close()
        if buf is not None:
            assert bytes(buf) == data

    def test_empty_file(self) -> None:
        src = self.source(b"")
        assert src.size == 0
        assert src.read(0, 0) == b""
        src.readinto(0, [memoryview(bytearray(0))])
        with pytest.raises(SourceError):
            src.read(0, 1)
        buf = src.buffer()
        assert buf is None or bytes(buf) == b""

    def test_large_file_reads_back_identically(self) -> None:
        data = content(BIG, seed=1)
        src = self.source(data)
        assert src.size == BIG
        assert src.read(0, BIG) == data
        assert src.read(BIG - 10, 10) == data[-10:]
        buf = bytearray(BIG)
        view = memoryview(buf)
        src.readinto(0, [view[: BIG // 3], view[BIG // 3 : BIG // 2], view[BIG // 2 :]])
        assert buf == data

    def test_large_file_random_reads(self) -> None:
        data = content(BIG, seed=2)
        src = self.source(data)

        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(st.data())
        def check(draw: st.DataObject) -> None:
            offset = draw.draw(st.integers(0, BIG), label="offset")
            length = draw.draw(st.integers(0, min(BIG - offset, 300_000)), label="length")
            assert src.read(offset, length) == data[offset : offset + length]
            split = draw.draw(st.integers(0, length), label="split")
            a, b = bytearray(split), bytearray(length - split)
            src.readinto(offset, [memoryview(a), memoryview(b)])
            assert bytes(a) + bytes(b) == data[offset : offset + length]
            past = draw.draw(st.integers(1, 1000), label="past")
            with pytest.raises(SourceError):
                src.read(BIG - length + past, length or 1)

        check()
