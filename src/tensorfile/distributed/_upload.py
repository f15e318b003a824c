"""Saving a checkpoint to an object store (``s3://``): every file one multipart upload.

The coordinator plans each file's parts (:mod:`~tensorfile.distributed._parts`) from who
holds which bytes and starts one multipart upload per file; each rank uploads the parts
whose bytes are all its own, straight from its shards, and sends the coordinator the few
bytes it has in mixed parts (through DCP's own gathering of results); the coordinator
uploads the mixed parts (the header's among them), then publishes: the objects file, each
file's upload completed, the index last with a conditional put. An upload is invisible
until it is completed, so a save that fails or loses a rank before that publishes nothing
(its parts are dropped on failure; a bucket lifecycle rule removes those a killed job
leaves).

Where the new files take the names of files the old index names, the old index is removed
before the first of them is completed: a coordinator killed in that short window leaves no
index (no claim rather than a false one; object stores have no links to keep the old files
by). A job that saved to the same folder since this one planned makes this one fail with
:class:`~tensorfile.errors.ConcurrentWriteError` before anything is published.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from tensorfile.core.errors import FormatError, UnsupportedError
from tensorfile.core.parallel import in_threads
from tensorfile.formats.safetensors.hub import HubPlan, remove_stale
from tensorfile.sources import Store

from ._objects import is_sidecar
from ._parts import COORDINATOR, Part, Segment, plan_parts
from ._runs import runs

__all__ = ["Span", "finish_uploads", "plan_uploads", "rank_uploads", "uploading_store"]

TARGET_PART = 64 << 20
"""Bytes of a part one rank uploads (larger files: more, so at most 10,000 parts)."""

Span = tuple[int, int, memoryview]
"""Bytes a rank has of a file: ``(file number, absolute offset, bytes)``."""


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
    """On the coordinator: each file's parts and upload (what every rank needs of them)."""
    min_part, max_parts = store.MIN_PART, store.MAX_PARTS
    owned: dict[str, list[tuple[int, list[int], int]]] = {}
    for rank, p in enumerate(plans):
        for it in p.items:
            td = it.tensor_data
            if td is None:
                continue
            starts, length = _box(td)
            owned.setdefault(it.index.fqn, []).append((rank, starts, length))
    files = []
    for f in hub.files:
        segments = [Segment(0, len(f.header), COORDINATOR)]
        spans: list[tuple[int, int, int]] = []
        for name, (start, _) in f.regions.items():
            for rank, r_starts, length in owned.get(name, []):
                spans.extend((start + s, start + s + length, rank) for s in r_starts)
        spans.sort()
        segments.extend(Segment(a, b, r) for a, b, r in spans)
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


def _box(td: Any) -> tuple[list[int], int]:
    itemsize = td.properties.dtype.itemsize
    r = runs(tuple(td.size), tuple(td.chunk.offsets), tuple(td.chunk.sizes), itemsize)
    return r.starts.tolist(), r.length


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
    store: Any, uploads: dict[str, Any], rank: int, spans: list[Span], threads: int
) -> dict[str, Any]:
    """On every rank: upload the parts that are all this rank's; return their ETags and
    the pieces of mixed parts (for the coordinator)."""
    by_file: dict[int, list[Span]] = {}
    for s in spans:
        by_file.setdefault(s[0], []).append(s)
    for lst in by_file.values():
        lst.sort(key=lambda s: s[1])
    jobs: list[tuple[int, int, Part]] = []
    pieces: list[tuple[int, int, bytes]] = []
    for file_no, entry in enumerate(uploads["files"]):
        mine = by_file.get(file_no, [])
        if not mine:
            continue
        for number, (a, b, owner) in enumerate(entry["parts"], 1):
            if owner == rank:
                jobs.append((file_no, number, Part(a, b, owner)))
            elif owner is None:
                pieces.extend((file_no, off, bytes(data)) for off, data in _within(mine, a, b))
    etags: list[tuple[int, int, str]] = []

    def upload(job: tuple[int, int, Part]) -> None:
        file_no, number, part = job
        buf = bytearray(part.stop - part.start)
        got = 0
        for off, data in _within(by_file[file_no], part.start, part.stop):
            buf[off - part.start : off - part.start + len(data)] = data
            got += len(data)
        if got != len(buf):
            raise FormatError(
                f"part {number} of {uploads['files'][file_no]['name']}: this rank has {got} "
                f"of its {len(buf)} bytes"
            )
        entry = uploads["files"][file_no]
        etag = store.upload_part(entry["name"], entry["upload"], number, bytes(buf))
        etags.append((file_no, number, etag))

    in_threads(threads, jobs, upload)
    return {"etags": etags, "pieces": pieces}


def _within(spans: list[Span], a: int, b: int) -> list[tuple[int, memoryview]]:
    """The parts of ``spans`` (sorted by offset) inside ``[a, b)``."""
    out = []
    starts = [s[1] for s in spans]
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(spans) and spans[i][1] < b:
        _, off, data = spans[i]
        lo, hi = max(a, off), min(b, off + len(data))
        if lo < hi:
            out.append((lo, data[lo - off : hi - off]))
        i += 1
    return out


def finish_uploads(
    store: Any,
    hub: HubPlan,
    uploads: dict[str, Any],
    sent: list[dict[str, Any]],
    *,
    versions: dict[str, str | None],
    sidecar: tuple[str, bytes] | None,
    prefix: str,
    threads: int,
) -> None:
    """On the coordinator, once every rank has uploaded: the mixed parts, then the
    checkpoint published (see the module docstring)."""
    files = uploads["files"]
    try:
        for name, version in versions.items():
            store.check_version(name, version)
        etags: dict[tuple[int, int], str] = {}
        pieces: dict[int, list[tuple[int, bytes]]] = {}
        for result in sent:
            for file_no, number, etag in result["etags"]:
                etags[(file_no, number)] = etag
            for file_no, off, data in result["pieces"]:
                pieces.setdefault(file_no, []).append((off, data))
        jobs = []
        for file_no, entry in enumerate(files):
            for number, (a, b, owner) in enumerate(entry["parts"], 1):
                if owner is None:
                    jobs.append((file_no, number, a, b))
                elif (file_no, number) not in etags:
                    raise FormatError(f"{entry['name']}: part {number} was not uploaded")

        def mixed(job: tuple[int, int, int, int]) -> None:
            file_no, number, a, b = job
            buf = bytearray(b - a)
            header = hub.files[file_no].header
            got = max(0, min(b, len(header)) - a)
            buf[:got] = header[a : a + got]
            for off, data in pieces.get(file_no, []):
                lo, hi = max(a, off), min(b, off + len(data))
                if lo < hi:
                    buf[lo - a : hi - a] = data[lo - off : hi - off]
                    got += hi - lo
            if got != b - a:
                raise FormatError(
                    f"{files[file_no]['name']}: part {number} got {got} of its {b - a} bytes"
                )
            etags[(file_no, number)] = store.upload_part(
                files[file_no]["name"], files[file_no]["upload"], number, bytes(buf)
            )

        in_threads(threads, jobs, mixed)
        if sidecar is not None:
            store.write_atomic(sidecar[0], sidecar[1])
        index_name = hub.index_name
        names = {f.name for f in hub.files}
        index_version = versions.get(index_name)
        if index_version is not None and names & set(store.list_files()):
            store.remove(index_name)  # it names files about to change: until the new one, none
            index_version = None
        for file_no, entry in enumerate(files):
            count = len(entry["parts"])
            store.complete_upload(
                entry["name"], entry["upload"], [etags[(file_no, n)] for n in range(1, count + 1)]
            )
    except BaseException:
        abort(store, files)
        raise
    if hub.index is not None:
        store.write_if(index_name, hub.index, index_version)
    keep = set(hub.names) | ({sidecar[0]} if sidecar else set())
    remove_stale(store, prefix, keep)
    for name in store.list_files():
        if is_sidecar(name, prefix) and name not in keep:
            store.remove(name)


def abort(store: Any, files: list[dict[str, Any]]) -> None:
    """Drop every started upload of ``files`` (best effort)."""
    for entry in files:
        if entry.get("upload"):
            store.abort_upload(entry["name"], entry["upload"])
