"""The pieces of tensorfile.distributed that need no process group: byte runs, upload
parts, the objects file, and the hub layout planned before any byte (checked against
save_sharded's bytes and the reference safetensors)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.distributed._objects import decode, encode
from tensorfile.distributed._parts import COORDINATOR, Segment, plan_parts
from tensorfile.distributed._pieces import clip, copy_into, extent, piece
from tensorfile.distributed._runs import overlap, runs
from tensorfile.errors import FormatError, InvalidArgumentError
from tensorfile.formats.safetensors.hub import plan_hub
from tensorfile.safetensors.numpy import save_sharded


@st.composite
def boxes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=0, max_size=4)))
    offs = tuple(draw(st.integers(0, d)) for d in shape)
    sizes = tuple(draw(st.integers(0, d - o)) for d, o in zip(shape, offs, strict=True))
    return shape, offs, sizes


@given(boxes(), st.sampled_from([1, 2, 4, 8]))
@settings(max_examples=300, deadline=None)
def test_runs_are_the_box_in_row_major_order(
    box: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], itemsize: int
) -> None:
    shape, offs, sizes = box
    whole = np.arange(math.prod(shape) * itemsize, dtype=np.int64).reshape(*shape, itemsize)
    want = whole[tuple(slice(o, o + s) for o, s in zip(offs, sizes, strict=True))].reshape(-1)
    r = runs(shape, offs, sizes, itemsize)
    got = [b for s in r.starts.tolist() for b in range(s, s + r.length)]
    assert got == want.tolist()
    assert r.nbytes == want.size


def test_a_dim0_shard_is_one_run_and_a_column_shard_one_per_row() -> None:
    assert runs((1000, 64), (500, 0), (500, 64), 2).count == 1
    assert runs((1000, 64), (0, 32), (1000, 32), 2).count == 1000


@given(
    st.lists(
        st.tuples(st.sampled_from([0, 1, 7, 40, 100, 300, 1000]), st.integers(-1, 3)),
        min_size=1,
        max_size=15,
    )
)
@settings(max_examples=400, deadline=None)
def test_parts_cover_the_file_and_respect_the_minimum(pieces: list[tuple[int, int]]) -> None:
    segments, pos = [], 0
    for n, owner in pieces:
        segments.append(Segment(pos, pos + n, owner))
        pos += n
    if pos == 0:
        return
    parts = plan_parts(segments, min_part=64, target=256)
    assert parts[0].start == 0 and parts[-1].stop == pos
    assert all(a.stop == b.start for a, b in itertools.pairwise(parts))
    assert all(p.stop - p.start >= 64 for p in parts[:-1])
    for p in parts:
        if p.owner is not None:  # a part one rank uploads: every byte is that rank's
            assert p.owner != COORDINATOR
            for s in segments:
                if s.start < p.stop and p.start < s.stop and s.stop > s.start:
                    assert s.owner == p.owner


def test_parts_carry_few_bytes_to_the_coordinator() -> None:
    mib = 1 << 20
    segments = [Segment(0, 200, COORDINATOR), Segment(200, 200 + 64 * mib, 0),
                Segment(200 + 64 * mib, 200 + 128 * mib, 1)]  # fmt: skip
    parts = plan_parts(segments, min_part=5 * mib, target=16 * mib)
    mixed = sum(p.stop - p.start for p in parts if p.owner is None)
    assert mixed == 5 * mib  # the header's part: it takes just the minimum from rank 0


def test_parts_refuse_a_gap() -> None:
    with pytest.raises(InvalidArgumentError, match="gap"):
        plan_parts([Segment(0, 10, 0), Segment(11, 20, 1)], min_part=4, target=8)


def test_objects_round_trip_and_hostile_files() -> None:
    objs = {"step": b"\x80\x04K\x07.", "rng": bytes(range(256))}
    assert decode(encode(objs), "o.json") == objs
    for bad in (
        b"not json",
        b"[]",
        b'{"format": "other", "version": 1, "objects": {}}',
        b'{"format": "tensorfile.dcp-objects", "version": 1, "objects": []}',
        b'{"format": "tensorfile.dcp-objects", "version": 1, "objects": {"a": {"data": "@@"}}}',
        encode({"a": b"x"}).replace(b'"eA=="', b'"eQ=="'),  # data that is not its digest's
    ):
        with pytest.raises(FormatError, match=r"o\.json"):
            decode(bad, "o.json")


@pytest.mark.parametrize("max_shard_size", [10**9, 700])
def test_a_planned_layout_filled_is_save_shardeds_bytes(
    tmp_path: Path, max_shard_size: int
) -> None:
    rng = random.Random(0)
    arrays = {
        f"t{i}": np.frombuffer(rng.randbytes(n * 4), np.float32).reshape(-1)
        for i, n in enumerate([10, 200, 3, 90, 1])
    }
    arrays["z"] = np.zeros((), np.int64)
    arrays["b"] = np.array([True, False, True])
    written = save_sharded(arrays, tmp_path / "ref", max_shard_size=max_shard_size)
    entries = [(n, _st_dtype(a), a.shape) for n, a in arrays.items()]
    hub = plan_hub(entries, max_shard_size=max_shard_size)
    assert hub.names == written
    for f in hub.files:
        blob = bytearray(f.size)
        blob[: len(f.header)] = f.header
        for name, (a, b) in f.regions.items():
            blob[a:b] = arrays[name].tobytes()
        assert bytes(blob) == (tmp_path / "ref" / f.name).read_bytes()
    if hub.index is not None:
        assert hub.index == (tmp_path / "ref" / hub.index_name).read_bytes()
    else:  # the reference reads the one file
        got = safetensors.numpy.load_file(tmp_path / "ref" / "model.safetensors")
        assert sorted(got) == sorted(arrays)


def _st_dtype(a: np.ndarray) -> str:  # type: ignore[type-arg]
    return {"float32": "F32", "int64": "I64", "bool": "BOOL"}[str(a.dtype)]


def test_a_ranks_reads_skip_other_ranks_rows() -> None:
    """Rows of one rank's columns, 1 KiB apart: the planner reads over a gap only while it
    stays under coalesce_waste of the bytes wanted (the reader's rule), not up to 2x."""
    from tensorfile.core import plan as planner
    from tensorfile.core.catalog import ByteRange
    from tensorfile.core.selection.read import Frugal as _Frugal
    from tensorfile.sources import MemorySource

    src = MemorySource(bytes(64 * 3072))
    src.coalesce_gap = 1 << 20  # type: ignore[misc]  (a remote source's)
    bufs = [memoryview(bytearray(1024)) for _ in range(64)]
    jobs = [(f"r{i}", ByteRange(i * 3072, i * 3072 + 1024), b) for i, b in enumerate(bufs)]
    greedy = planner.plan(src, src.readinto, jobs)
    frugal = planner.plan(_Frugal(src), src.readinto, jobs)
    assert sum(p.nbytes for p in greedy) >= 2 * 64 * 1024  # twice what it wants
    assert sum(p.nbytes for p in frugal) == 64 * 1024  # a 2 KiB gap is 200% of a row: none
    dense = [(f"r{i}", ByteRange(i * 1100, i * 1100 + 1024), b) for i, b in enumerate(bufs)]
    read = sum(p.nbytes for p in planner.plan(_Frugal(src), src.readinto, dense))
    assert 64 * 1024 < read <= 1.1 * 64 * 1024  # small gaps: merged, within 10 %


@given(boxes(), st.sampled_from([1, 2, 4]), st.data())
@settings(max_examples=300, deadline=None)
def test_pieces_clipped_and_copied_put_every_byte_of_a_box_at_its_place(
    box: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], itemsize: int, data: Any
) -> None:
    """A shard's bytes as a Piece (a progression of runs, or an array where the box has two
    partial outer dimensions), clipped to arbitrary parts and copied into them, land
    exactly where the per-run layout puts them."""
    shape, offs, sizes = box
    base = data.draw(st.integers(0, 50))
    r = runs(shape, offs, sizes, itemsize)
    payload = np.arange(r.nbytes, dtype=np.int64).astype(np.uint8) + 1
    p = piece(0, base, r.starts, r.length, memoryview(payload))
    size = base + math.prod(shape) * itemsize + 10
    want = np.zeros(size, np.uint8)
    for i, s in enumerate(r.starts.tolist()):
        want[base + s : base + s + r.length] = payload[i * r.length : (i + 1) * r.length]
    cuts = sorted({0, size, *data.draw(st.lists(st.integers(0, size), max_size=6))})
    direct = np.zeros(size, np.uint8)
    clipped = np.zeros(size, np.uint8)
    got = 0
    for a, b in itertools.pairwise(cuts):
        got += copy_into(direct[a:b], a, p)
        for q in clip(p, a, b):
            lo, hi = extent(q)
            assert a <= lo and hi <= b
            copy_into(clipped[a:b], a, q)
    assert got == r.nbytes
    assert np.array_equal(direct, want) and np.array_equal(clipped, want)


@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize(("offsets", "lengths"), [((0, 1), (4096, 2)), ((7, 0), (4000, 4))])
def test_a_box_of_many_runs_reads_bit_for_bit(
    tmp_path: Path, where: str, offsets: tuple[int, int], lengths: tuple[int, int]
) -> None:
    """A column slab of a tall narrow matrix (4096 runs): copied out of the mapping of a
    local file, or read as one span from a remote one; a row slab: one run. Driven through
    StorageReader's own read_metadata / read_data with a planner of the test's."""
    import fsspec
    import torch
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem

    from tensorfile.distributed import StorageReader
    from tensorfile.safetensors.torch import save_file

    full = torch.arange(4096 * 4, dtype=torch.float32).reshape(4096, 4)
    (tmp_path / "ck").mkdir()
    save_file({"w": full}, tmp_path / "ck" / "model.safetensors")
    url = str(tmp_path / "ck")
    if where == "memory":
        url = f"memory://dcp-units-{tmp_path.name}"
        fsspec.filesystem("memory").pipe(
            f"{url}/model.safetensors", (tmp_path / "ck" / "model.safetensors").read_bytes()
        )
    dest = torch.zeros(lengths)

    class Planner:
        def resolve_tensor(self, ri: ReadItem) -> torch.Tensor:
            return dest

        def commit_tensor(self, ri: ReadItem, tensor: torch.Tensor) -> None:
            assert tensor.data_ptr() == dest.data_ptr()

    reader = StorageReader(url)
    meta = reader.read_metadata()
    reader.set_up_storage_reader(meta, True)
    item = ReadItem(
        type=LoadItemType.TENSOR,
        dest_index=MetadataIndex("w"),
        dest_offsets=torch.Size([0, 0]),
        storage_index=MetadataIndex("w", torch.Size([0, 0])),
        storage_offsets=torch.Size(offsets),
        lengths=torch.Size(lengths),
    )
    reader.read_data(LoadPlan([item]), Planner()).wait()  # type: ignore[arg-type]
    o, n = offsets, lengths
    assert torch.equal(dest, full[o[0] : o[0] + n[0], o[1] : o[1] + n[1]])


@given(
    st.integers(1, 3).flatmap(
        lambda nd: st.lists(
            st.tuples(st.tuples(*[st.integers(0, 300)] * nd), st.tuples(*[st.integers(0, 4)] * nd)),
            max_size=300,
        )
    )
)
@settings(max_examples=200, deadline=None)
def test_overlap_finds_a_pair_exactly_when_two_boxes_share_an_element(
    boxes: list[tuple[tuple[int, ...], tuple[int, ...]]],
) -> None:
    """The shared cover check (the writer's, the reader's, the upload's): blocked and
    sorted, it answers as box-against-box would, and the pair it names does overlap."""

    def share(a: int, b: int) -> bool:
        (ao, az), (bo, bz) = boxes[a], boxes[b]
        live = math.prod(az) > 0 and math.prod(bz) > 0
        return live and all(
            x < y + m and y < x + n for x, n, y, m in zip(ao, az, bo, bz, strict=True)
        )

    nd = len(boxes[0][0]) if boxes else 1
    starts = np.array([o for o, _ in boxes], np.int64).reshape(len(boxes), nd)
    sizes = np.array([z for _, z in boxes], np.int64).reshape(len(boxes), nd)
    found = overlap(starts, sizes)
    brute = any(share(a, b) for a, b in itertools.combinations(range(len(boxes)), 2))
    assert (found is not None) == brute
    if found is not None:
        assert found[0] < found[1] and share(*found)
