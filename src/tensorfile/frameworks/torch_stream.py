"""Tensors onto an accelerator through a small ring of reused (pinned) host buffers.

Reading a checkpoint to ``cuda:0`` by first making every tensor a CPU tensor needs the
whole model in host memory. :func:`stream_read` does not: it allocates the destination
tensors on the device, cuts the file's byte ranges (in file order) into chunks of at most
``chunk_bytes``, and moves each chunk through one of ``buffers`` host buffers. Reader
threads fill free buffers (``reader``'s own positional reads, so local files and remote
sources alike); the calling thread copies each filled buffer's tensor pieces into the
destinations with ``copy_(non_blocking=True)`` on a side CUDA stream and records an event;
a buffer is read into again only once its event has passed. Reads of later chunks
therefore overlap the host-to-device copies of earlier ones, and **peak host memory is the
ring: buffers x chunk_bytes** (by default ``(threads + 2)`` buffers of the source's
``io_chunk``: 8 MiB for local files and URLs, so 80 MiB with 8 reader threads; 16 MiB where a
source sets none), whatever the model's size. On CUDA the buffers are pinned (page-locked), so the
copies are true asynchronous DMA; where pinning fails, and on other devices, they are
plain buffers and copies are synchronous. With ``device="cpu"`` the same pipeline runs
with plain copies, which is how it is tested on machines without an accelerator.

A sharded checkpoint's reader (one with ``reader_of(name)``) streams every shard through
the same ring, one load. What the ring cannot do goes the plain way (each tensor read into
a CPU tensor, then moved): tensors a reader decodes (zTensor's compressed or external
parts: any reader that plans its own reads, overriding ``start_read``). With
``verify=True`` a tensor whose digest the file records is streamed too, its digest computed
over its bytes as they pass through the ring (the chunks are then copied out in file order)
and compared once its last byte has passed: a changed byte fails the load with the
format's checksum error, without a second read.

Example:
    >>> import torch, tensorfile
    >>> from tensorfile.safetensors.torch import save
    >>> data = save({"a": torch.arange(6, dtype=torch.int16), "b": torch.ones(2, 2)})
    >>> stats = StreamStats()
    >>> with tensorfile.open(data) as r:
    ...     a, b = stream_read(r, ["a", "b"], "cpu", chunk_bytes=8, buffers=2, stats=stats)
    >>> a.tolist(), b.tolist(), stats.chunks, stats.host_bytes
    ([0, 1, 2, 3, 4, 5], [[1.0, 1.0], [1.0, 1.0]], 4, 16)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..core import progress
from ..core.catalog import TensorInfo
from ..core.digests import Digest
from ..core.errors import TensorFileError, UnsupportedError
from ..core.reader import Reader, bytes_view
from ._f4 import f4_shape
from .torch import torch_allocator, torch_dtype

__all__ = ["CHUNK_BYTES", "READ_THREADS", "StreamStats", "plan_chunks", "stream_read"]

CHUNK_BYTES = 16 << 20
"""Bytes of one chunk, when the source does not say (its ``io_chunk``)."""

READ_THREADS = 4
"""Reader threads, when the source does not say (its ``io_threads``)."""

_MAX_CHUNK = 256 << 20
_MAX_THREADS = 32
_SMALL_GAP = 4096  # unwanted bytes between two tensors that are read rather than skipped


@dataclass
class StreamStats:
    """What one :func:`stream_read` did (pass one in to have it filled)."""

    chunks: int = 0
    """Chunks read (each one ``readinto`` of the reader)."""
    host_buffers: int = 0
    """Host buffers in the ring."""
    host_bytes: int = 0
    """Bytes of host memory the ring held: the extra host memory of the load."""
    bytes_read: int = 0
    """Bytes read from the source (tensor bytes plus small gaps read through)."""
    pinned: bool = False
    """Whether the ring was page-locked memory."""
    streamed: int = 0
    """Tensors that went through the ring (the others went the plain way)."""


class Piece(NamedTuple):
    """Bytes ``[at, at + length)`` of a chunk, which go to byte ``dest_at`` of tensor
    ``dest`` (an index into the tensors asked for)."""

    at: int
    dest: int
    dest_at: int
    length: int


class Chunk(NamedTuple):
    """One read: ``length`` bytes of the file from ``start``, and where they go
    (``reader``: which of the load's readers reads it, a sharded checkpoint's shard)."""

    start: int
    length: int
    pieces: tuple[Piece, ...]
    reader: int = 0


def plan_chunks(ranges: list[tuple[int, int, int]], chunk_bytes: int, gap: int) -> list[Chunk]:
    """Cut ``(tensor index, start, stop)`` byte ranges into chunks of at most
    ``chunk_bytes``, in file order. Neighbours share a chunk when the bytes between them are
    at most ``gap`` and at most what the chunk already wants (so it never reads more than
    about twice what is asked), or a page (:data:`_SMALL_GAP`, which costs nothing); a
    tensor larger than a chunk spans several.

    Example:
        >>> chunks = plan_chunks([(0, 0, 10), (1, 10, 25)], 8, 0)
        >>> [(c.start, c.length, len(c.pieces)) for c in chunks]
        [(0, 8, 1), (8, 8, 2), (16, 8, 1), (24, 1, 1)]
    """
    chunks: list[Chunk] = []
    pieces: list[Piece] = []
    start = stop = wanted = 0
    for index, begin, end in sorted(ranges, key=lambda r: (r[1], r[2])):
        pos = begin
        while pos < end:
            joins = (
                pieces
                and start <= pos <= stop + max(_SMALL_GAP, min(gap, wanted))
                and pos < start + chunk_bytes
            )
            if not joins:
                if pieces:
                    chunks.append(Chunk(start, stop - start, tuple(pieces)))
                start = stop = pos
                pieces, wanted = [], 0
            take = min(end, start + chunk_bytes) - pos
            pieces.append(Piece(pos - start, index, pos - begin, take))
            stop = max(stop, pos + take)
            wanted += take
            pos += take
    if pieces:
        chunks.append(Chunk(start, stop - start, tuple(pieces)))
    return chunks


def _streamable(reader: Reader, info: TensorInfo) -> bool:
    """Whether ``info``'s bytes are the tensor's bytes as they stand in ``reader``'s source:
    raw, dense, in this file, and any digest a read compares one over those bytes (checked
    as they pass through the ring)."""
    return (
        info.layout == "dense"
        and set(info.components) == {"data"}
        and info.data.encoding == "raw"
        and info.data.shard is None
        and (not reader.checks_digest(info.name) or reader.expected_digest(info.name) is not None)
    )


def stream_read(
    reader: Reader,
    names: list[str],
    device: Any,
    *,
    chunk_bytes: int | None = None,
    buffers: int | None = None,
    threads: int | None = None,
    stats: StreamStats | None = None,
) -> list[torch.Tensor]:
    """Tensors ``names`` of ``reader`` as torch tensors on ``device``, read through a ring
    of ``buffers`` host buffers of ``chunk_bytes`` each by ``threads`` reader threads
    (defaults: the source's ``io_chunk`` and ``io_threads``, else :data:`CHUNK_BYTES` and
    :data:`READ_THREADS`; ``threads + 2`` buffers). The device must be checked already
    (:func:`~tensorfile.frameworks.check_torch_device`); ``"meta"`` goes the plain way.

    A failed read raises the reader's :class:`~tensorfile.errors.SourceError` once every
    reader thread has stopped; the tensors made so far are dropped.

    Example:
        >>> import torch, tensorfile
        >>> from tensorfile.safetensors.torch import save
        >>> with tensorfile.open(save({"w": torch.eye(2, dtype=torch.bfloat16)})) as r:
        ...     stream_read(r, ["w"], "cpu")[0].tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    dev = torch.device(device)
    if dev.type == "meta":
        return reader.read_into(names, torch_allocator(device))
    subs = _readers_of(reader, names)
    infos = [sub.info(name) for sub, name in zip(subs, names, strict=True)]
    ok = [_plain(sub) and _streamable(sub, info) for sub, info in zip(subs, infos, strict=True)]
    out: list[Any] = [None] * len(names)
    plain = [i for i, yes in enumerate(ok) if not yes]
    if plain:  # a reader's own checks first: a bad digest fails before the ring is made
        got = reader.read_into([names[i] for i in plain], torch_allocator(device))
        for i, tensor in zip(plain, got, strict=True):
            out[i] = tensor
    readers: list[Reader] = []
    ranges: dict[int, list[tuple[int, int, int]]] = {}
    flats: list[torch.Tensor] = []
    checks: list[_Check | None] = []
    for i in (i for i, yes in enumerate(ok) if yes):
        at = next((k for k, r in enumerate(readers) if r is subs[i]), len(readers))
        if at == len(readers):
            readers.append(subs[i])
        out[i], flat = _allocate(subs[i], infos[i], dev)
        span = infos[i].byte_range
        ranges.setdefault(at, []).append((len(flats), span.start, span.stop))
        flats.append(flat)
        checks.append(_Check.of(subs[i], names[i], span.length))
    stats = StreamStats() if stats is None else stats
    stats.streamed = len(flats)
    if not readers:
        return out
    sources = [r.source for r in readers]
    chunk = _clamp(chunk_bytes, _most(sources, "io_chunk"), CHUNK_BYTES, _MAX_CHUNK)
    chunks = [
        c._replace(reader=at)
        for at, spans in ranges.items()
        for c in plan_chunks(spans, chunk, int(getattr(sources[at], "coalesce_gap", 0)))
    ]
    if chunks:
        nthreads = _clamp(threads, _most(sources, "io_threads"), READ_THREADS, _MAX_THREADS)
        nbuffers = max(1, buffers if buffers is not None else nthreads + 2)
        label = f"loading {_label(reader, sources)}"
        pipeline = _Pipeline(readers, dev, chunks, flats, nbuffers, min(nthreads, nbuffers), stats)
        pipeline.checks = checks
        pipeline.run(label)
    for check in checks:
        if check is not None and check.size == 0:
            check.finish()  # (an empty tensor: no chunk holds it)
    return out


class _Check:
    """The digest of one streamed tensor, fed its bytes in order as they pass the ring."""

    def __init__(self, reader: Reader, name: str, size: int, expected: str) -> None:
        self.reader, self.name, self.size = reader, name, size
        self.digest = Digest(expected.partition(":")[0])
        self.seen = 0

    @classmethod
    def of(cls, reader: Reader, name: str, size: int) -> _Check | None:
        expected = reader.expected_digest(name)
        return None if expected is None else cls(reader, name, size, expected)

    def update(self, at: int, data: Any) -> None:
        """Feed the tensor's bytes from ``at`` on (right after those fed before)."""
        assert at == self.seen, (self.name, at, self.seen)  # (chunks pass in order)
        self.digest.update(data)
        self.seen += len(data)
        if self.seen == self.size:
            self.finish()

    def finish(self) -> None:
        self.reader.compare_digest(self.name, self.digest.value())


def _readers_of(reader: Reader, names: list[str]) -> list[Reader]:
    """The reader that holds each name's bytes: ``reader`` itself, or for a sharded
    checkpoint the reader of the name's shard (its ``reader_of``)."""
    of = getattr(reader, "reader_of", None)
    if not callable(of):
        return [reader] * len(names)
    return [of(name) for name in names]


def _plain(reader: Reader) -> bool:
    """Whether ``reader`` reads raw tensors as they stand in its source (a reader that
    decodes, or spreads over several files, plans its own reads)."""
    kind = type(reader)
    return kind.start_read is Reader.start_read and kind.read_into is Reader.read_into


def _most(sources: list[Any], attribute: str) -> int | None:
    """The largest positive ``attribute`` (``io_chunk``, ``io_threads``) of ``sources``."""
    said = [v for v in (getattr(s, attribute, None) for s in sources) if isinstance(v, int)]
    return max(said) if said and max(said) > 0 else None


def _label(reader: Reader, sources: list[Any]) -> str:
    index = getattr(reader, "index", None)
    if isinstance(index, str):
        return index
    return str(sources[0].name) if len(sources) == 1 else f"{len(sources)} files"


def _clamp(asked: int | None, source_says: Any, default: int, most: int) -> int:
    if asked is not None:
        return max(1, int(asked))
    value = source_says if isinstance(source_says, int) and source_says > 0 else default
    return max(1, min(value, most))


def _allocate(reader: Reader, info: TensorInfo, dev: torch.device) -> tuple[Any, torch.Tensor]:
    """The result tensor for ``info`` on ``dev`` and a flat byte view of its storage."""
    tdt = torch_dtype(info.dtype)
    shape = f4_shape(info.dtype, info.shape, to="torch")
    nbytes = info.byte_range.length
    try:
        if nbytes == 0:
            return torch.empty(shape, dtype=tdt, device=dev), torch.empty(0, dtype=torch.uint8)
        flat = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        return flat.view(tdt).reshape(shape), flat
    except (RuntimeError, ValueError, MemoryError, OverflowError) as exc:
        raise UnsupportedError(
            f"{reader.source.name}: tensor {info.name!r} of {nbytes:,} bytes cannot be made "
            f"on {dev}: {exc}"
        ) from exc


class _Pipeline:
    """One streamed load: reader threads fill the ring, the calling thread copies out."""

    def __init__(
        self,
        readers: list[Reader],
        dev: torch.device,
        chunks: list[Chunk],
        flats: list[torch.Tensor],
        nbuffers: int,
        nthreads: int,
        stats: StreamStats,
    ) -> None:
        self.readers = readers
        self.dev = dev
        self.chunks = chunks
        self.flats = flats
        self.stats = stats
        self.cuda = dev.type == "cuda"
        size = max(c.length for c in chunks)
        count = min(nbuffers, len(chunks))
        self.ring = [self._buffer(size) for _ in range(count)]
        self.views = [bytes_view(b.numpy()) for b in self.ring]
        stats.host_buffers = count
        stats.host_bytes = count * size
        self.nthreads = nthreads if len(chunks) > 1 else 0
        self.stream: Any = torch.cuda.Stream(dev) if self.cuda else None  # type: ignore[no-untyped-call]
        self.events: list[Any] = [None] * count
        self.free: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.ready: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.next = 0
        self.lock = threading.Lock()
        self.checks: list[_Check | None] = [None] * len(flats)

    def _buffer(self, size: int) -> torch.Tensor:
        if self.cuda:
            try:
                buf = torch.empty(size, dtype=torch.uint8, pin_memory=True)
                self.stats.pinned = True
                return buf
            except RuntimeError:  # no page-locked memory to be had: plain buffers
                pass
        return torch.empty(size, dtype=torch.uint8)

    def run(self, label: str) -> None:
        for at, reader in enumerate(self.readers):
            hint: Callable[[list[tuple[int, int]]], None] | None = getattr(
                reader.source, "will_read", None
            )
            if callable(hint):
                hint([(c.start, c.start + c.length) for c in self.chunks if c.reader == at])
        if self.stream is not None:  # the destinations' memory may still be in use on the
            self.stream.wait_stream(torch.cuda.current_stream(self.dev))  # current stream
        if self.nthreads == 0:  # one chunk: no threads, no progress line
            self._read(0, 0)
            self._copy(self.chunks[0], 0)
        else:
            total = sum(c.length for c in self.chunks)
            with progress.task(total, label) as shown:
                self._run_threads(shown)
        if self.stream is not None:
            self.stream.synchronize()

    def _run_threads(self, shown: progress.Task) -> None:
        for b in range(len(self.ring)):
            self.free.put(b)
        workers = [
            threading.Thread(target=self._work, name=f"tensorfile-stream-{n}", daemon=True)
            for n in range(self.nthreads)
        ]
        for w in workers:
            w.start()
        ordered = any(c is not None for c in self.checks)  # (digests take bytes in order)
        early: dict[int, int] = {}
        turn = 0
        try:
            for _ in range(len(self.chunks)):
                item = self.ready.get()
                if isinstance(item, BaseException):
                    raise item
                index, b = item
                if not ordered:
                    self._copy(self.chunks[index], b)
                    self.free.put(b)
                    shown.advance(self.chunks[index].length)
                    continue
                early[index] = b
                while turn in early:
                    b = early.pop(turn)
                    self._copy(self.chunks[turn], b)
                    self.free.put(b)
                    shown.advance(self.chunks[turn].length)
                    turn += 1
        finally:
            self.stop.set()
            for _ in workers:
                self.free.put(None)  # wakes a thread waiting for a buffer
            for w in workers:
                w.join()

    def _work(self) -> None:
        while not self.stop.is_set():
            b = self.free.get()  # a buffer first, then the next chunk: chunk k always has
            if b is None or self.stop.is_set():  # one, so an in-order copy never waits
                return  # for a chunk that waits for a buffer
            with self.lock:
                index = self.next
                self.next += 1
            if index >= len(self.chunks):
                self.free.put(b)
                return
            try:
                self._read(index, b)
            except BaseException as exc:
                self.stop.set()
                self.ready.put(exc)
                return
            self.ready.put((index, b))

    def _read(self, index: int, b: int) -> None:
        """Fill buffer ``b`` with chunk ``index``, once the copies out of it are done."""
        event = self.events[b]
        if event is not None:
            event.synchronize()
        chunk = self.chunks[index]
        reader = self.readers[chunk.reader]
        reader.readinto(chunk.start, [self.views[b][: chunk.length]])

    def _copy(self, chunk: Chunk, b: int) -> None:
        """Copy chunk's pieces from buffer ``b`` into the destination tensors."""
        buf = self.ring[b]
        self.stats.chunks += 1
        self.stats.bytes_read += chunk.length
        for p in chunk.pieces:
            check = self.checks[p.dest]
            if check is not None:
                check.update(p.dest_at, self.views[b][p.at : p.at + p.length])
        try:
            if self.stream is None:
                for p in chunk.pieces:
                    dest = self.flats[p.dest][p.dest_at : p.dest_at + p.length]
                    dest.copy_(buf[p.at : p.at + p.length])
                return
            pinned = self.stats.pinned
            with torch.cuda.stream(self.stream):
                for p in chunk.pieces:
                    dest = self.flats[p.dest][p.dest_at : p.dest_at + p.length]
                    dest.copy_(buf[p.at : p.at + p.length], non_blocking=pinned)
                if self.events[b] is None:
                    self.events[b] = torch.cuda.Event()  # type: ignore[no-untyped-call]
                self.events[b].record(self.stream)
        except TensorFileError:
            raise
        except RuntimeError as exc:
            raise UnsupportedError(
                f"{self.readers[chunk.reader].source.name}: copying bytes {chunk.start:,}.."
                f"{chunk.start + chunk.length:,} to {self.dev} failed: {exc}"
            ) from exc
