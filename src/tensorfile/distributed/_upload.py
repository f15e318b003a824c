"""Saving a checkpoint to an object store (``s3://``): every file one multipart upload.

The coordinator plans each file's parts (:mod:`~tensorfile.distributed._parts`) from who
holds which bytes and starts one multipart upload per file; each rank uploads the parts
whose bytes are all its own, straight from its shards, and sends the coordinator the
bytes it has in mixed parts (through DCP's own gathering of results) as a few strided
pieces per shard and part (:mod:`~tensorfile.distributed._pieces`: a ``Shard(1)`` piece of a
million rows is three integers and its bytes, never an object per row); the coordinator
assembles and uploads the mixed parts (the header's among them), then publishes. An upload
is invisible until it is completed, so a save that fails or loses a rank before that
publishes nothing (its parts are dropped on failure; a bucket lifecycle rule removes those
a killed job leaves).

The publication runs under the folder's publication lock
(:mod:`~tensorfile.distributed._publishing`): of two jobs publishing to one folder, the
first to take it publishes and the other fails at once with
:class:`~tensorfile.errors.ConcurrentWriteError` and drops its uploads, so one job's
shards never land under the other's index. Under it: the versions checked (a job that
published since this one planned: a :class:`~tensorfile.errors.ConcurrentWriteError`,
nothing published), the objects file written, every upload completed at once, the index
put last with a conditional put.

A tensor split into many short runs (the rows of a ``Shard(1)`` piece) is one mixed region
of its file: its parts are assembled by the coordinator, its shards checked to tile it as
boxes.

Where the new files take the names of files the old index names, the old index is removed
just before the uploads are completed: a coordinator killed between that and the new
index (the completions, on parallel threads, and one put) leaves no index and a mix of
old and new shards, which :class:`~tensorfile.distributed.StorageReader` refuses to load
(no claim rather than a false one; object stores have no links to keep the old files by).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorfile.core.errors import FormatError, UnsupportedError
from tensorfile.core.parallel import in_threads
from tensorfile.formats.safetensors.hub import HubPlan, remove_stale
from tensorfile.sources import Store

from ._objects import is_sidecar
from ._parts import COORDINATOR, Segment, plan_parts
from ._pieces import Piece, clip, copy_into, extent
from ._publishing import publication_lock
from ._runs import overlap, runs

__all__ = ["finish_uploads", "plan_uploads", "rank_uploads", "uploading_store"]

TARGET_PART = 64 << 20
"""Bytes of a part one rank uploads (larger files: more, so at most 10,000 parts)."""


def uploading_store(store: Store) -> Any:
    """``store`` if it takes multipart uploads (an ``s3://`` folder), else an
    :class:`~tensorfile.errors.UnsupportedError`."""
    if not hasattr(store, "start_upload"):
        raise UnsupportedError(
            f"{store.url()}: StorageWriter saves to local or shared folders and to s3:// "
            "(multipart uploads); this store takes neither"
        )
    return store


def plan_uploads(store: Any, hub: HubPlan, plans: Sequence[Any]) -> dict[str, Any]:
    """On the coordinator: each file's parts and upload (what every rank needs of them).

    A tensor whose every shard is one run of bytes, or runs of a part's size at least, is
    cut into its ranks' runs; one split into many short runs (the rows of a ``Shard(1)``
    piece) is one mixed region, its shards checked to tile it as boxes (no list of its
    rows is made)."""
    min_part, max_parts = store.MIN_PART, store.MAX_PARTS
    owned: dict[str, list[tuple[int, Any]]] = {}
    for rank, p in enumerate(plans):
        for it in p.items:
            if it.tensor_data is not None:
                owned.setdefault(it.index.fqn, []).append((rank, it.tensor_data))
    files = []
    for f in hub.files:
        segments = [Segment(0, len(f.header), COORDINATOR)]
        for name, (start, stop) in f.regions.items():
            segments.extend(_segments(name, start, stop, owned.get(name, []), min_part))
        segments.sort(key=lambda s: (s.start, s.stop))
        if f.size > len(f.header):
            _check_cover(segments, f.size, f.name)
        target = max(TARGET_PART, -(-f.size // (max_parts // 2)))
        parts = plan_parts(segments, min_part=min_part, target=target, max_parts=max_parts)
        files.append({"name": f.name, "upload": "", "parts": [(p.start, p.stop, p.owner)
                                                              for p in parts]})  # fmt: skip
    try:
        for entry in files:
            entry["upload"] = store.start_upload(entry["name"])
    except BaseException:
        abort(store, files)
        raise
    return {"files": files}


def _segments(
    name: str, start: int, stop: int, shards: list[tuple[int, Any]], min_part: int
) -> list[Segment]:
    """Who has the bytes ``[start, stop)`` of tensor ``name``: each shard's runs where
    they are few (one, or each of a part's size), else the whole region for the
    coordinator to assemble (its shards checked to tile the tensor)."""
    cut: list[Segment] = []
    for rank, td in shards:
        r = runs(tuple(td.size), tuple(td.chunk.offsets), tuple(td.chunk.sizes),
                 td.properties.dtype.itemsize)  # fmt: skip
        if r.count > 1 and r.length < min_part:
            _check_boxes(name, tuple(td.size), [s for _, s in shards])
            return [Segment(start, stop, COORDINATOR)] if stop > start else []
        if r.length:
            cut.extend(Segment(start + s, start + s + r.length, rank) for s in r.starts.tolist())
    return cut


def _check_boxes(name: str, shape: tuple[int, ...], shards: list[Any]) -> None:
    """A :class:`FormatError` unless the shards' boxes tile ``shape``: their volumes add
    up to it and no two overlap."""
    boxes = [(tuple(td.chunk.offsets), tuple(td.chunk.sizes)) for td in shards]
    boxes = [(o, z) for o, z in boxes if math.prod(z) > 0]
    total = sum(math.prod(z) for _, z in boxes)
    lo = np.array([o for o, _ in boxes], np.int64).reshape(len(boxes), len(shape))
    hi = lo + np.array([z for _, z in boxes], np.int64).reshape(len(boxes), len(shape))
    inside = bool(((lo >= 0) & (hi <= np.array(shape, np.int64))).all())
    if total != math.prod(shape) or not inside or overlap(lo, hi - lo) is not None:
        raise FormatError(
            f"tensor {name!r}: the ranks' shards do not tile its shape {list(shape)} "
            "(bytes left unwritten or written twice)"
        )


def _check_cover(segments: list[Segment], size: int, name: str) -> None:
    pos = 0
    for s in segments:
        if s.start != pos:
            raise FormatError(
                f"{name}: the ranks' shards leave bytes {pos}..{s.start} unwritten or overlap"
            )
        pos = s.stop
    if pos != size:
        raise FormatError(f"{name}: the ranks' shards end at byte {pos} of {size}")


def rank_uploads(
    store: Any, uploads: dict[str, Any], rank: int, pieces: list[Piece], threads: int
) -> dict[str, Any]:
    """On every rank: upload the parts that are all this rank's; return their ETags and
    the bytes this rank has of mixed parts (for the coordinator), as pieces clipped
    to each part: a few objects per shard and part, never one per row."""
    files = uploads["files"]
    mine = _by_part(files, pieces)
    jobs: list[tuple[int, int]] = []
    mixed: list[tuple[int, int, Piece]] = []
    for (file_no, number), held in mine.items():
        a, b, owner = files[file_no]["parts"][number - 1]
        if owner == rank:
            jobs.append((file_no, number))
        elif owner is None:
            mixed.extend((file_no, number, q) for p in held for q in clip(p, a, b))
    etags: list[tuple[int, int, str]] = []

    def upload(job: tuple[int, int]) -> None:
        file_no, number = job
        entry = files[file_no]
        a, b, _ = entry["parts"][number - 1]
        buf = np.empty(b - a, np.uint8)
        got = sum(copy_into(buf, a, p) for p in mine[job])
        if got != b - a:
            raise FormatError(
                f"part {number} of {entry['name']}: this rank has {got} of its {b - a} bytes"
            )
        etags.append((file_no, number, store.upload_part(entry["name"], entry["upload"],
                                                          number, buf.tobytes())))  # fmt: skip

    in_threads(min(threads, max(1, len(jobs))), jobs, upload)
    return {"etags": etags, "pieces": mixed}


def _by_part(
    files: list[dict[str, Any]], pieces: list[Piece]
) -> dict[tuple[int, int], list[Piece]]:
    """The pieces holding bytes of each part ``(file number, part number)``."""
    starts: dict[int, list[int]] = {}
    out: dict[tuple[int, int], list[Piece]] = {}
    for p in pieces:
        lo, hi = extent(p)
        if hi <= lo:
            continue
        if p.file_no not in starts:
            starts[p.file_no] = [a for a, _, _ in files[p.file_no]["parts"]]
        first = starts[p.file_no]
        for i in range(max(0, bisect.bisect_right(first, lo) - 1), bisect.bisect_left(first, hi)):
            out.setdefault((p.file_no, i + 1), []).append(p)
    return out


def finish_uploads(
    store: Any,
    hub: HubPlan,
    uploads: dict[str, Any],
    sent: list[dict[str, Any]],
    *,
    save_id: str,
    versions: dict[str, str | None],
    sidecar: tuple[str, bytes] | None,
    prefix: str,
    threads: int,
) -> None:
    """On the coordinator, once every rank has uploaded: the mixed parts, then the
    checkpoint published under the folder's publication lock (see the module docstring)."""
    files = uploads["files"]
    try:
        etags: dict[tuple[int, int], str] = {}
        pieces: dict[tuple[int, int], list[Piece]] = {}
        for result in sent:
            for file_no, number, etag in result["etags"]:
                etags[(file_no, number)] = etag
            for file_no, number, p in result["pieces"]:
                pieces.setdefault((file_no, number), []).append(p)
        jobs = []
        for file_no, entry in enumerate(files):
            for number, (a, b, owner) in enumerate(entry["parts"], 1):
                if owner is None:
                    jobs.append((file_no, number, a, b))
                elif (file_no, number) not in etags:
                    raise FormatError(f"{entry['name']}: part {number} was not uploaded")

        def mixed(job: tuple[int, int, int, int]) -> None:
            file_no, number, a, b = job
            buf = np.empty(b - a, np.uint8)
            header = hub.files[file_no].header
            got = max(0, min(b, len(header)) - a)
            buf[:got] = np.frombuffer(header, np.uint8, got, a) if got else buf[:0]
            got += sum(copy_into(buf, a, p) for p in pieces.pop((file_no, number), []))
            if got != b - a:
                raise FormatError(
                    f"{files[file_no]['name']}: part {number} got {got} of its {b - a} bytes"
                )
            etags[(file_no, number)] = store.upload_part(
                files[file_no]["name"], files[file_no]["upload"], number, buf.tobytes()
            )

        in_threads(min(threads, max(1, len(jobs))), jobs, mixed)
        with publication_lock(store, save_id):
            for name, version in versions.items():
                store.check_version(name, version)
            _publish(store, hub, files, etags, versions, sidecar, threads)
            # (still under the lock: never another save's files, published meanwhile)
            keep = set(hub.names) | ({sidecar[0]} if sidecar else set())
            remove_stale(store, prefix, keep)
            for name in store.list_files():
                if is_sidecar(name, prefix) and name not in keep:
                    store.remove(name)
    except BaseException:
        abort(store, files)
        raise


def _publish(
    store: Any,
    hub: HubPlan,
    files: list[dict[str, Any]],
    etags: dict[tuple[int, int], str],
    versions: dict[str, str | None],
    sidecar: tuple[str, bytes] | None,
    threads: int,
) -> None:
    """Under the lock, versions checked: the objects file, the old index removed where the
    new files take the names it names, every upload completed at once, the index."""
    if sidecar is not None:
        store.write_atomic(sidecar[0], sidecar[1])
    index_name = hub.index_name
    index_version = versions.get(index_name)
    if index_version is not None and {f.name for f in hub.files} & set(store.list_files()):
        store.remove(index_name)  # it names files about to change: until the new one, none
        index_version = None

    def complete(file_no: int) -> None:
        entry = files[file_no]
        count = len(entry["parts"])
        store.complete_upload(
            entry["name"], entry["upload"], [etags[(file_no, n)] for n in range(1, count + 1)]
        )
        entry["upload"] = ""  # (completed: nothing to abort)

    in_threads(min(threads, max(1, len(files))), range(len(files)), complete)
    if hub.index is not None:
        store.write_if(index_name, hub.index, index_version)


def abort(store: Any, files: list[dict[str, Any]]) -> None:
    """Drop every started upload of ``files`` (best effort)."""
    for entry in files:
        if entry.get("upload"):
            store.abort_upload(entry["name"], entry["upload"])
