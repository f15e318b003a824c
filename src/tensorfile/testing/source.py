"""``SourceConformance``: the suite every :class:`~tensorfile.sources.Source` passes, in the
style of zarr-python's ``zarr.testing.store.StoreTests``.

Subclass :class:`SourceConformance` in a test module (a class named ``Test...``) and give it
:meth:`~SourceConformance.make`, which returns a new source over exactly the given bytes
(an autouse fixture of the subclass may set up what ``make`` needs: a folder, a server);
pytest then runs every test below against that kind of source. A new source is added to
tensorfile, or to another project, by passing them. Only ``pytest`` and ``numpy`` are needed.

What every source does alike, asserted below:

* ``size`` is exact; ``read`` returns exactly the bytes asked for (head, middle, tail, the
  whole file), a zero-length read anywhere up to the end is ``b""``, and a read past the
  end, at a negative offset or of a negative length is a
  :class:`~tensorfile.errors.SourceError` after which the source is still usable;
* ``readinto`` fills any writable C-contiguous buffers (several, slices of one, float32,
  2-D) from consecutive bytes, refuses read-only ones with
  :class:`~tensorfile.errors.InvalidArgumentError` and out-of-range ones with
  :class:`~tensorfile.errors.SourceError`;
* ``stats`` count what reached the storage, never shrink, and a zero-byte ``readinto``
  counts nothing; ``name`` is a non-empty text, ``coalesce_gap`` a non-negative int;
* ``buffer()`` is None or the whole content; views handed out outlive ``close``;
* ``close`` is idempotent, a ``with`` block closes, and after ``close`` every method but
  ``close`` raises :class:`~tensorfile.errors.SourceError` (bytes already fetched included);
* reads from several threads at once each get their own bytes.

What differs by design: remote sources count their speculative first read when they open,
and serve reads inside it without a request (the reads the stats tests count lie far from
the head and the tail of the file, :data:`FAR`).

Example:
    >>> from tensorfile.sources import MemorySource
    >>> class TestMemorySource(SourceConformance):
    ...     def make(self, data: bytes) -> MemorySource:
    ...         return MemorySource(data)
    >>> suite = TestMemorySource()
    >>> suite.test_read_returns_exactly_the_bytes_asked_for()
    >>> suite.test_reads_from_several_threads_at_once()
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

from ..core.errors import InvalidArgumentError, SourceError
from ..core.source import ReadStats, Source

__all__ = ["BIG", "FAR", "SourceConformance", "content"]

BIG = 3 * 1024 * 1024
"""The size of the large test files: a read near the end is outside any remote source's
speculative first read (100,000 bytes)."""
FAR = 1_500_000
"""An offset in a :data:`BIG` file that no remote source's first read (head or tail) covers."""


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
        """A source from :meth:`make`, closed after the test (when pytest runs it)."""
        src = self.make(data)
        self.__dict__.setdefault("_opened", []).append(src)
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
        assert isinstance(src.name, str)
        assert src.name
        assert isinstance(src.stats, ReadStats)
        assert isinstance(src.coalesce_gap, int)
        assert src.coalesce_gap >= 0

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
        src.readinto(FAR + 200_000, [memoryview(buf)[:2000], memoryview(buf)[2000:]])
        assert bytes(buf) == data[FAR + 200_000 : FAR + 205_000]
        assert src.stats.requests == before[0] + 2
        assert src.stats.bytes_read == before[1] + 6000

    def test_stats_never_shrink(self) -> None:
        data = content(4096)
        src = self.source(data)
        seen = (src.stats.requests, src.stats.bytes_read)
        for offset, length in [(0, 10), (100, 0), (4000, 96), (0, 4096)]:
            src.read(offset, length)
            now = (src.stats.requests, src.stats.bytes_read)
            assert now[0] >= seen[0]
            assert now[1] >= seen[1]
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
        src.readinto(FAR, [floats.data, grid.data])
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
        rng = random.Random(BIG)
        for _ in range(25):
            offset = rng.randint(0, BIG)
            length = rng.randint(0, min(BIG - offset, 300_000))
            assert src.read(offset, length) == data[offset : offset + length], (offset, length)
            split = rng.randint(0, length)
            a, b = bytearray(split), bytearray(length - split)
            src.readinto(offset, [memoryview(a), memoryview(b)])
            assert bytes(a) + bytes(b) == data[offset : offset + length], (offset, length)
            past = rng.randint(1, 1000)
            with pytest.raises(SourceError):
                src.read(BIG - length + past, length or 1)

    # -- threads ----------------------------------------------------------------------------

    #: threads reading one source at once in :meth:`test_reads_from_several_threads_at_once`
    threads: ClassVar[int] = 8

    def test_reads_from_several_threads_at_once(self) -> None:
        """Readers of one file share its source (a load's pieces run on a thread pool): each
        thread gets its own bytes, whatever the others read at the same time."""
        data = content(BIG, seed=3)
        src = self.source(data)
        before = (src.stats.requests, src.stats.bytes_read)
        start = threading.Barrier(self.threads)
        failures: list[BaseException] = []

        def reader(seed: int) -> None:
            rng = random.Random(seed)
            try:
                start.wait(timeout=60)
                for _ in range(12):
                    offset = rng.randrange(0, BIG - 70_000)
                    length = rng.randrange(1, 70_000)
                    if rng.random() < 0.5:
                        got: Any = src.read(offset, length)
                    else:
                        got = bytearray(length)
                        cut = rng.randrange(0, length)
                        src.readinto(offset, [memoryview(got)[:cut], memoryview(got)[cut:]])
                    if bytes(got) != data[offset : offset + length]:
                        raise AssertionError(f"wrong bytes at {offset}+{length}")
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        workers = [threading.Thread(target=reader, args=(i,)) for i in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
        assert not any(w.is_alive() for w in workers), "a reader hangs"
        assert failures == []
        assert src.stats.requests >= before[0]
        assert src.stats.bytes_read >= before[1]
        assert src.read(FAR, 10) == data[FAR : FAR + 10]  # still usable
