"""The bounce-buffer pipeline that carries tensors to an accelerator (issue 25): tensors read
through a small ring of reused host buffers, copied out into destination tensors made on
the device. Here (no GPU) it runs with ``device="cpu"``; the CUDA cases run where a GPU is.
The reference's ``safetensors.torch.load_file`` is the oracle of values."""

from __future__ import annotations

import math
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as hs  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import tensorfile  # noqa: E402
from tensorfile.errors import (  # noqa: E402
    SafetensorArgumentError,
    SafetensorChecksumError,
    SafetensorUnsupportedError,
    SourceError,
)
from tensorfile.frameworks import get_framework  # noqa: E402
from tensorfile.frameworks.torch_stream import StreamStats, plan_chunks, stream_read  # noqa: E402
from tensorfile.safetensors import safe_open  # noqa: E402
from tensorfile.safetensors.torch import load_file, save_file  # noqa: E402
from tests.helpers.hostile_http import HostileServer, parse_range, reply  # noqa: E402

CUDA = torch.cuda.is_available()


def _stream_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tensorfile-stream")]


def _tensors() -> dict[str, Any]:
    """Many dtypes and shapes: empty, 0-d, one byte, odd sizes, a tensor of ~300 KiB."""
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    return {
        "f64": rnd(3, 5).double(),
        "f32": rnd(7, 11),
        "f16": rnd(13).half(),
        "bf16": rnd(5, 3).bfloat16(),
        "f8e4": rnd(17).to(torch.float8_e4m3fn),
        "f8e5": rnd(9).to(torch.float8_e5m2),
        "i64": torch.arange(-5, 6, dtype=torch.int64),
        "i32": torch.randint(-(2**31), 2**31 - 1, (6,), generator=g, dtype=torch.int32),
        "i16": torch.arange(-300, 300, 37, dtype=torch.int16),
        "i8": torch.arange(-128, 128, 3, dtype=torch.int8),
        "u8": torch.arange(0, 255, 2, dtype=torch.uint8),
        "u16": torch.arange(0, 60000, 999).to(torch.uint16),
        "u32": torch.arange(0, 5).to(torch.uint32),
        "u64": torch.arange(0, 3).to(torch.uint64),
        "bool": torch.tensor([True, False, True, True, False]),
        "c64": torch.complex(rnd(4), rnd(4)),
        "scalar": torch.tensor(3.5),
        "scalar_i8": torch.tensor(-7, dtype=torch.int8),
        "empty": torch.zeros(0, 4),
        "empty_bf16": torch.zeros(3, 0, dtype=torch.bfloat16),
        "one_byte": torch.tensor([200], dtype=torch.uint8),
        "big": rnd(300, 256),  # 300 KiB: larger than every small ring's buffer
    }


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "many.safetensors"
    st.save_file(_tensors(), str(path))
    return path


def _equal(a: Any, b: Any) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


@pytest.mark.parametrize(
    ("chunk", "buffers", "threads"),
    [
        (None, None, None),  # the defaults: one chunk holds the whole file
        (4096, 2, 1),  # tensors straddle buffers; one reader thread
        (1000, 3, 3),  # chunks that split elements; a ring as large as the readers + 0
        (7, 5, 4),  # tiny chunks: thousands of them, every element split
        (300 * 1024, 4, 2),
    ],
)
def test_values_equal_the_references(
    reference_file: Path, chunk: int | None, buffers: int | None, threads: int | None
) -> None:
    want = st.load_file(str(reference_file))
    stats = StreamStats()
    with tensorfile.open(str(reference_file)) as r:
        names = r.keys()
        got = stream_read(
            r, names, "cpu", chunk_bytes=chunk, buffers=buffers, threads=threads, stats=stats
        )
    assert {n: _equal(want[n], t) for n, t in zip(names, got, strict=True)} == dict.fromkeys(
        names, True
    )
    assert stats.streamed == len(names)
    data = sum(t.numel() * t.element_size() for t in want.values())
    assert stats.bytes_read >= data
    if chunk is not None:
        assert stats.chunks >= math.ceil(data / chunk)
        assert stats.host_bytes <= stats.host_buffers * chunk
    assert _stream_threads() == []


def test_tensors_are_owned_writable_and_independent(reference_file: Path) -> None:
    with tensorfile.open(str(reference_file)) as r:
        a, b = stream_read(r, ["f32", "big"], "cpu", chunk_bytes=4096, buffers=2)
    a += 1
    assert a.is_contiguous() and b.is_contiguous()
    assert torch.equal(a, st.load_file(str(reference_file))["f32"] + 1)
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()


def test_a_subset_in_any_order_and_twice(reference_file: Path) -> None:
    want = st.load_file(str(reference_file))
    names = ["big", "u8", "big", "scalar", "empty", "f8e4"]
    with tensorfile.open(str(reference_file)) as r:
        got = stream_read(r, names, "cpu", chunk_bytes=5000, buffers=3, threads=2)
    assert all(_equal(want[n], t) for n, t in zip(names, got, strict=True))
    assert got[0].data_ptr() != got[2].data_ptr()


def test_subbyte_and_torch_only_dtypes_match_the_plain_path(tmp_path: Path) -> None:
    """F4 (torch's float4_e2m1fn_x2, two values a byte) and F8_E8M0: bytes as stored, in
    the shapes torch gives them (the reference cannot read these; the plain path is the
    oracle)."""
    raw = torch.arange(0, 64, dtype=torch.uint8)
    tensors = {"f4": raw.view(torch.float4_e2m1fn_x2).reshape(4, 16)}
    if hasattr(torch, "float8_e8m0fnu"):
        tensors["e8m0"] = raw.clone().view(torch.float8_e8m0fnu)
    path = tmp_path / "f4.safetensors"
    save_file(tensors, path)
    with tensorfile.open(str(path)) as r:
        names = r.keys()
        got = stream_read(r, names, "cpu", chunk_bytes=5, buffers=2)
        plain = get_framework("pt", "cpu").read(r, names)
    assert all(_equal(p, g) for p, g in zip(plain, got, strict=True))


class _Allocations(TorchDispatchMode):
    """Records every tensor torch allocates (factory calls), with its bytes and device."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[int, str]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.empty, torch.ops.aten.empty_strided):
            self.made.append((out.numel() * out.element_size(), str(out.device)))
        return out


def test_extra_host_memory_is_the_ring_not_the_model(tmp_path: Path) -> None:
    """Beyond the destination tensors themselves, the load allocates its ring and nothing
    else: ``buffers`` buffers of one chunk, whatever the file's size (counted by torch's
    dispatcher, not by the pipeline's own statistics)."""
    tensors = {f"w{i}": torch.full((64, 1024), float(i)) for i in range(24)}  # 6 MiB
    path = tmp_path / "six.safetensors"
    st.save_file(tensors, str(path))
    chunk, buffers = 256 << 10, 3
    seen = _Allocations()
    stats = StreamStats()
    with tensorfile.open(str(path)) as r, seen:
        got = stream_read(
            r, r.keys(), "cpu", chunk_bytes=chunk, buffers=buffers, threads=2, stats=stats
        )
    destinations = sorted(t.numel() * t.element_size() for t in got)
    made = sorted(n for n, _ in seen.made)
    for n in destinations:
        made.remove(n)
    assert made == [chunk] * buffers  # the ring: allocated once, reused for 24 chunks
    assert stats.chunks == 24 and stats.host_bytes == chunk * buffers == sum(made)
    assert all(torch.equal(tensors[n], t) for n, t in zip(r.keys(), got, strict=True))


def test_a_small_load_gets_a_small_ring(reference_file: Path) -> None:
    stats = StreamStats()
    with tensorfile.open(str(reference_file)) as r:
        stream_read(r, ["u8"], "cpu", stats=stats)
    assert (stats.host_buffers, stats.host_bytes, stats.chunks) == (1, 128, 1)
    with tensorfile.open(str(reference_file)) as r:
        stream_read(r, ["empty", "empty_bf16"], "cpu", stats=stats)
    assert stats.chunks == 1  # nothing to read: no ring at all (the counts stay)


def test_a_file_truncated_after_open_is_a_source_error_and_no_thread_is_left(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cut.safetensors"
    st.save_file({f"w{i}": torch.full((256, 256), float(i)) for i in range(8)}, str(path))
    with tensorfile.open(str(path)) as r:
        os.truncate(path, path.stat().st_size // 2)
        with pytest.raises(SourceError, match="truncated"):
            stream_read(r, r.keys(), "cpu", chunk_bytes=32 << 10, buffers=4, threads=3)
    assert _stream_threads() == []


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, bytes, HostileServer]]:
    """A file served over HTTP with ranges; requests past half the file are answered with
    half their bytes and a closed connection when the path says ``/cut``."""
    data = st.save({f"w{i}": torch.arange(i, i + 20_000, dtype=torch.float32) for i in range(6)})

    def respond(request: Any, conn: socket.socket) -> bool:
        rng = parse_range(request.headers.get("range"), len(data)) or (0, len(data))
        start, stop = rng
        headers = {
            "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
            "Content-Length": str(stop - start),
            "ETag": '"v1"',
        }
        body = data[start:stop]
        if request.target.startswith("/cut") and start > len(data) // 2:
            conn.sendall(reply(206, headers, body[: len(body) // 2]))
            return False  # a body shorter than its Content-Length, then the end
        conn.sendall(reply(206, headers, body))
        return True

    with HostileServer(respond) as server:
        yield server.url, data, server


def test_a_remote_file_streams_through_its_source(served: tuple[str, bytes, Any]) -> None:
    url, data, _ = served
    want = st.load(data)
    with tensorfile.open(f"{url}/m.safetensors") as r:
        got = stream_read(r, r.keys(), "cpu", chunk_bytes=20_000, buffers=3, threads=3)
        assert r.source.stats.requests >= 5
    assert all(torch.equal(want[n], t) for n, t in zip(sorted(want), got, strict=True))


def test_a_server_cutting_replies_short_is_a_source_error(served: tuple[str, bytes, Any]) -> None:
    url, _, _ = served
    with tensorfile.open(f"{url}/cut.safetensors") as r:
        with pytest.raises(SourceError):
            stream_read(r, r.keys(), "cpu", chunk_bytes=20_000, buffers=3, threads=3)
    assert _stream_threads() == []


def test_a_sharded_checkpoint_streams_every_shard_through_one_ring(tmp_path: Path) -> None:
    from tensorfile.safetensors.torch import save_sharded

    tensors = {f"w{i}": torch.arange(i, i + 3000, dtype=torch.float32) for i in range(7)}
    files = save_sharded(tensors, tmp_path, max_shard_size=30_000)
    assert len(files) >= 4  # shards and the index
    stats = StreamStats()
    with tensorfile.open(str(tmp_path)) as r:
        names = r.keys()
        got = stream_read(r, names, "cpu", chunk_bytes=5000, buffers=3, threads=2, stats=stats)
    assert stats.streamed == 7 and stats.host_bytes <= 3 * 5000
    assert all(torch.equal(tensors[n], t) for n, t in zip(names, got, strict=True))
    assert _stream_threads() == []


@pytest.mark.parametrize("checksum", ["xxh3", "crc32c", "sha256"])
def test_recorded_digests_are_checked_inside_the_ring(tmp_path: Path, checksum: str) -> None:
    """With ``verify=True``, tensors whose digest the file records go through the ring too,
    their digests computed as their bytes pass (chunks smaller than a tensor, several
    threads: the chunks are copied out in order), so a changed byte is found whatever the
    device, without a second read."""
    path = tmp_path / "sums.safetensors"
    tensors = {"a": torch.ones(1000), "b": torch.arange(10), "e": torch.zeros(0)}
    save_file(tensors, path, checksum=checksum)
    with safe_open(path, "pt", verify=True) as f:
        stats = StreamStats()
        got = stream_read(f.reader, ["a", "b", "e"], "cpu", chunk_bytes=512, threads=3,
                          stats=stats)  # fmt: skip
        assert stats.streamed == 3 and torch.equal(got[1], torch.arange(10))
        assert stats.bytes_read == 4000 + 80  # each byte once
    with safe_open(path, "pt", verify=False) as f:
        stats = StreamStats()
        stream_read(f.reader, ["a", "b"], "cpu", stats=stats)
        assert stats.streamed == 2
    with safe_open(path, "pt") as f:
        starts = {n: f.reader.info(n).byte_range.start for n in ("a", "b")}
    blob = bytearray(path.read_bytes())
    blob[starts["b"] + 79] ^= 1  # b's last byte
    blob[starts["a"] + 2500] ^= 1  # a byte in the middle of "a", in its fifth chunk
    path.write_bytes(bytes(blob))
    first_of_both = min(starts, key=starts.__getitem__)
    for names, first in ((["a", "b"], first_of_both), (["b"], "b"), (["a"], "a")):
        with safe_open(path, "pt", verify=True) as f:
            with pytest.raises(SafetensorChecksumError, match=f"tensor '{first}'"):
                stream_read(f.reader, names, "cpu", chunk_bytes=512, threads=3)


def test_readers_that_decode_go_the_plain_way(tmp_path: Path) -> None:
    """zTensor's compressed tensors are decoded by their reader: the ring is not used."""
    tz = pytest.importorskip("tensorfile.ztensor")
    import numpy as np

    path = tmp_path / "z.zt"
    tz.save_file({"w": np.arange(5000, dtype=np.float32)}, str(path), compression="zstd")
    stats = StreamStats()
    with tensorfile.open(str(path)) as r:
        (got,) = stream_read(r, ["w"], "cpu", chunk_bytes=64, buffers=2, stats=stats)
    assert torch.equal(got, torch.arange(5000, dtype=torch.float32))
    assert stats.streamed == 0 and stats.host_bytes == 0


def test_the_framework_streams_off_the_cpu_only_unless_asked(reference_file: Path) -> None:
    assert get_framework("pt", "cpu").streams() is False
    assert get_framework("pt", "meta").streams() is False
    fw = type(get_framework("pt"))("cpu", stream=True)
    want = st.load_file(str(reference_file))
    with tensorfile.open(str(reference_file)) as r:
        got = dict(zip(r.keys(), fw.read(r, r.keys()), strict=True))
    assert all(_equal(want[n], got[n]) for n in want)


def test_meta_and_unknown_devices_keep_their_behaviour(reference_file: Path) -> None:
    meta = load_file(reference_file, device="meta")
    want = st.load_file(str(reference_file))
    assert {n: (t.device.type, t.dtype, t.shape) for n, t in meta.items()} == {
        n: ("meta", t.dtype, t.shape) for n, t in want.items()
    }
    with tensorfile.open(str(reference_file)) as r:
        (m,) = stream_read(r, ["f32"], "meta")
    assert m.device.type == "meta"
    with pytest.raises(SafetensorArgumentError):
        load_file(reference_file, device="nonsense")
    if not CUDA:
        with pytest.raises(SafetensorUnsupportedError):
            load_file(reference_file, device="cuda:0")


@settings(max_examples=200, deadline=None)
@given(
    sizes=hs.lists(hs.tuples(hs.integers(0, 40), hs.integers(0, 50)), max_size=12),
    chunk=hs.integers(1, 64),
    gap=hs.integers(0, 100),
)
def test_chunks_cover_every_wanted_byte_once_and_stay_bounded(
    sizes: list[tuple[int, int]], chunk: int, gap: int
) -> None:
    ranges, pos = [], 0
    for i, (skip, length) in enumerate(sizes):
        pos += skip * 500  # gaps of 0 to 20,000 bytes, past the page that is always read
        ranges.append((i, pos, pos + length))
        pos += length
    chunks = plan_chunks(ranges, chunk, gap)
    got: dict[int, list[tuple[int, int]]] = {}
    for c in chunks:
        assert 0 < c.length <= chunk
        for p in c.pieces:
            assert p.at >= 0 and p.at + p.length <= c.length
            got.setdefault(p.dest, []).append((c.start + p.at, p.dest_at))
            _, begin, _ = ranges[p.dest]
            assert c.start + p.at == begin + p.dest_at  # the piece's bytes are the tensor's
        assert c.length <= sum(p.length for p in c.pieces) + 4096 + min(gap, c.length)
    for i, begin, end in ranges:
        offsets = sorted(at for _, at in got.get(i, []))
        lengths = {p.dest_at: p.length for c in chunks for p in c.pieces if p.dest == i}
        covered = 0
        for at in offsets:
            assert at == covered
            covered += lengths[at]
        assert covered == end - begin


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
class TestCuda:
    def test_load_file_to_cuda_equals_the_reference(self, reference_file: Path) -> None:
        want = st.load_file(str(reference_file), device="cuda:0")
        got = load_file(reference_file, device="cuda:0")
        assert got.keys() == want.keys()
        assert all(t.device.type == "cuda" for t in got.values())
        assert all(_equal(want[n].cpu(), got[n].cpu()) for n in want)

    def test_small_pinned_ring_with_many_chunks(self, reference_file: Path) -> None:
        want = st.load_file(str(reference_file))
        stats = StreamStats()
        with tensorfile.open(str(reference_file)) as r:
            got = stream_read(r, r.keys(), "cuda:0", chunk_bytes=1000, buffers=3, stats=stats)
            names = r.keys()
        assert stats.pinned and stats.host_bytes == 3000
        assert all(_equal(want[n], t.cpu()) for n, t in zip(names, got, strict=True))
        assert _stream_threads() == []

    def test_truncated_file_on_cuda(self, tmp_path: Path) -> None:
        path = tmp_path / "cut.safetensors"
        st.save_file({f"w{i}": torch.ones(256, 256) for i in range(8)}, str(path))
        with tensorfile.open(str(path)) as r:
            os.truncate(path, path.stat().st_size // 2)
            with pytest.raises(SourceError):
                stream_read(r, r.keys(), "cuda:0", chunk_bytes=32 << 10, buffers=4, threads=3)
        assert _stream_threads() == []
