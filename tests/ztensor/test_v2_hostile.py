"""Hostile zTensor v2 files and interrupted writes: lying sizes and offsets, decompression
bombs, digest mismatches, truncation, fuzzed bytes and fuzzed manifests (hash recomputed, so
the validator is what is exercised), and a writer killed mid-file. Only tensorfile's own
errors may escape, nothing is allocated by a size the file only claims, and an existing
file is never damaged.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import ztensor
from tensorfile.core.reader import numpy_allocator
from tensorfile.errors import (
    ChecksumError,
    TensorFileError,
    ZTensorError,
    ZTensorUnsupportedError,
)
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor.v2 import _writer as _v2_writer
from tensorfile.formats.ztensor.v2._format import MAGIC, encode_footer, manifest_hash
from tensorfile.ops import content_hash
from tests.helpers.cli import run, run_json

ROOT = Path(__file__).resolve().parents[2]


def assemble(manifest: Any, blobs: dict[int, bytes], *, raw: bytes | None = None) -> bytes:
    """A file: magic, ``blobs`` at their offsets, the manifest at the next 4 KiB boundary,
    a correct footer (hash included)."""
    body = bytearray(MAGIC)
    for offset, data in sorted(blobs.items()):
        body += bytes(offset - len(body)) + data
    at = max(4096, -(-len(body) // 4096) * 4096)
    body += bytes(at - len(body))
    m = _cbor.encode(manifest, deterministic=True) if raw is None else raw
    return bytes(body) + m + encode_footer(at, len(m), manifest_hash(m))


def dense(dtype: str, shape: list[int], offset: int, length: int, **extra: Any) -> dict[str, Any]:
    part = {"dtype": dtype, "blob": [offset, length], **extra}
    return {"shape": shape, "layout": "dense", "parts": {"data": part}}


def seekable(frames: list[bytes], sizes: list[int]) -> bytes:
    table = b"".join(struct.pack("<II", len(f), d) for f, d in zip(frames, sizes, strict=True))
    return (
        b"".join(frames)
        + struct.pack("<II", 0x184D2A5E, len(table) + 9)
        + table
        + struct.pack("<IBI", len(frames), 0, 0x8F92EAB1)
    )


def read_all(data: bytes | Path, verify: bool = True) -> None:
    with ztensor.open(data, verify=verify) as f:
        for name in f.keys():
            f.get_tensor(name)


def small_peak(action: Any) -> int:
    tracemalloc.start()
    try:
        action()
    except TensorFileError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return int(peak)


def good_file() -> bytes:
    return _v2_writer.to_bytes(
        {
            "a": np.arange(20, dtype=np.float32),
            "b": np.ones((3, 3), np.bool_),
            "c": ztensor.CSRTensor.from_dense(np.eye(4, dtype=np.int16)),
            "d": ztensor.COOTensor.from_dense(np.eye(3, dtype=np.float64)),
        },
        attributes={"k": [1, "v"]},
        checksum="xxh3",
        align=4096,
    )


# -- lying sizes -------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [2**63, 2**64 - 1, 1 << 30 | 1, 10**9])
def test_a_lying_manifest_length_is_refused(length: int) -> None:
    data = bytearray(good_file())
    data[-32:-24] = struct.pack("<Q", length)
    with pytest.raises(ZTensorError, match="manifest"):
        ztensor.open(bytes(data))


@pytest.mark.parametrize("offset", [0, 4095, 4096 * 3 + 1, 2**63, 2**64 - 4096])
def test_a_lying_manifest_offset_is_refused(offset: int) -> None:
    data = bytearray(good_file())
    data[-40:-32] = struct.pack("<Q", offset)
    with pytest.raises(ZTensorError):
        ztensor.open(bytes(data))


def test_blob_offsets_past_the_end_are_refused() -> None:
    for blob in ([4096, 2**64 - 1], [2**64 - 4096, 8], [8192, 4096 * 100]):
        data = assemble({"objects": {"t": dense("u8", [blob[1]], *blob)}}, {4096: b"x" * 8})
        with pytest.raises(ZTensorError, match="data region"):
            ztensor.open(data)


@pytest.mark.parametrize("claimed", [2**60, 2**33, 17 << 20])
def test_a_lying_decoded_length_allocates_nothing(claimed: int) -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b"\x07" * 64)
    stream = seekable([frame], [64])
    data = assemble(
        {
            "objects": {
                "t": dense(
                    "u8",
                    [claimed],
                    4096,
                    len(stream),
                    encoding="zt.zstd-seekable/1",
                    decoded_length=claimed,
                )
            }
        },
        {4096: stream},
    )
    with ztensor.open(data) as f:
        assert f.info("t").data.decoded_length == claimed
        with pytest.raises(ZTensorError, match=r"seek table|decoded_length"):
            f.get_tensor("t")
        assert small_peak(lambda: f.get_tensor("t")) < 16 << 20
        with pytest.raises(ZTensorError):
            f.read_component("t", "data")


def test_a_seek_table_claiming_huge_frames_is_refused() -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b"\x07" * 64)
    for sizes, message in (
        ([16 << 20], "cannot hold"),
        ([(16 << 20) + 1], "16 MiB"),
        ([2**32 - 1], "16 MiB"),
    ):
        stream = seekable([frame], sizes)
        data = assemble(
            {
                "objects": {
                    "t": dense(
                        "u8",
                        [sizes[0]],
                        4096,
                        len(stream),
                        encoding="zt.zstd-seekable/1",
                        decoded_length=sizes[0],
                    )
                }
            },
            {4096: stream},
        )
        with ztensor.open(data) as f:
            with pytest.raises(ZTensorError, match=message):
                f.get_tensor("t")
            assert small_peak(lambda f=f: f.get_tensor("t")) < 16 << 20


def test_a_frame_header_claiming_a_huge_content_size_is_refused() -> None:
    frame = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(b"\x05" * 300))
    # rewrite the frame header: 8-byte content size of 2**40
    fhd = frame[4]
    assert fhd & 0x20  # single segment
    fcs_size = (1, 2, 4, 8)[fhd >> 6]
    head = bytes([0xC0 | (fhd & 0x3F)]) + (2**40).to_bytes(8, "little")
    forged = bytes(frame[:4]) + head + bytes(frame[5 + fcs_size :])
    stream = seekable([forged], [300])
    data = assemble(
        {
            "objects": {
                "t": dense(
                    "u8",
                    [300],
                    4096,
                    len(stream),
                    encoding="zt.zstd-seekable/1",
                    decoded_length=300,
                )
            }
        },
        {4096: stream},
    )
    with ztensor.open(data) as f, pytest.raises(ZTensorError, match="declares"):
        f.get_tensor("t")


def test_frames_that_decode_to_more_or_less_than_claimed_are_refused() -> None:
    cctx = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    frame = cctx.compress(b"\x01" * 1000)
    for claimed in (999, 1001):
        stream = seekable([frame], [claimed])
        data = assemble(
            {
                "objects": {
                    "t": dense(
                        "u8",
                        [claimed],
                        4096,
                        len(stream),
                        encoding="zt.zstd-seekable/1",
                        decoded_length=claimed,
                    )
                }
            },
            {4096: stream},
        )
        with ztensor.open(data) as f, pytest.raises(ZTensorError, match="frame decodes"):
            f.get_tensor("t")


def test_frames_without_a_checksum_are_refused() -> None:
    frame = zstandard.ZstdCompressor(write_checksum=False).compress(b"\x01" * 100)
    stream = seekable([frame], [100])
    data = assemble(
        {
            "objects": {
                "t": dense(
                    "u8",
                    [100],
                    4096,
                    len(stream),
                    encoding="zt.zstd-seekable/1",
                    decoded_length=100,
                )
            }
        },
        {4096: stream},
    )
    with ztensor.open(data) as f, pytest.raises(ZTensorError, match="checksum"):
        f.get_tensor("t")


# -- digests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("checksum", ["xxh3", "sha256"])
def test_a_digest_mismatch_names_the_tensor(tmp_path: Path, checksum: str) -> None:
    path = tmp_path / "m.zt"
    ztensor.save_file({"w": np.arange(8, dtype=np.int32)}, path, version=2, checksum=checksum)
    with ztensor.open(path) as f:
        start = f.info("w").data.range.start
    data = bytearray(path.read_bytes())
    data[start] ^= 0xFF
    path.write_bytes(bytes(data))
    for read in ("get_tensor", "view", "read_slice"):
        with ztensor.open(path) as f:
            args = ("w", slice(0, 2)) if read == "read_slice" else ("w",)
            with pytest.raises(ZTensorError) as info:
                getattr(f, read)(*args)
            assert isinstance(info.value, ChecksumError) and info.value.tensor == "w"
            assert "'w'" in str(info.value) and checksum in str(info.value)
    with ztensor.open(path, verify=False) as f:
        assert f.get_tensor("w")[0] == 255  # the flipped low byte of 0, unchecked


def test_a_corrupt_zstd_part_is_caught_by_its_frame_checksum(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    ztensor.save_file({"w": np.arange(5000, dtype=np.int64)}, path, version=2, compression="zstd")
    with ztensor.open(path) as f:
        rng = f.info("w").data.range
    data = bytearray(path.read_bytes())
    data[rng.start + 20] ^= 0x55
    with pytest.raises(ZTensorError):
        read_all(bytes(data), verify=False)


# -- names a file chooses ----------------------------------------------------------------------


def _csr_named(layout: str) -> bytes:
    """An object of layout id ``layout`` with CSR's parts, whose indptr runs past its three
    values (refused for ``zt.sparse_csr/1``)."""
    parts = {
        "values": {"dtype": "f32", "blob": [4096, 12]},
        "indices": {"dtype": "u32", "blob": [8192, 12]},
        "indptr": {"dtype": "u32", "blob": [12288, 12]},
    }
    blobs = {
        4096: np.array([1, 2, 3], np.float32).tobytes(),
        8192: np.array([0, 1, 1], np.uint32).tobytes(),
        12288: np.array([0, 5, 9], np.uint32).tobytes(),
    }
    return assemble({"objects": {"w": {"shape": [2, 2], "layout": layout, "parts": parts}}}, blobs)


def test_a_layout_id_named_as_tensorfiles_csr_is_an_extension(tmp_path: Path, capsys: Any) -> None:
    """Hostile re-review n05: an unregistered layout id ``sparse_csr`` (the profile is
    ``zt.sparse_csr/1``) was taken as tensorfile's own CSR layout: no CSR rule checked and
    a bare ``KeyError: 'data'`` from the content id. It is an extension layout on every
    path: ``ext:sparse_csr`` in the catalog and inspect's output, its parts as stored in an
    ExtensionTensor of the file's layout text, an id of its own."""
    registered, named = tmp_path / "registered.zt", tmp_path / "named.zt"
    registered.write_bytes(_csr_named("zt.sparse_csr/1"))
    named.write_bytes(_csr_named("sparse_csr"))
    with pytest.raises(ZTensorError, match="indptr ends at 9"):
        content_hash(str(registered))
    first = content_hash(str(named))
    assert first == content_hash(str(named)) and len(first) == 64
    with ztensor.open(named) as f:
        assert f.info("w").layout == "ext:sparse_csr"
        value = f.get_tensor("w")
        assert isinstance(value, ztensor.ExtensionTensor) and value.layout == "sparse_csr"
        assert value.components["indptr"].tolist() == [0, 5, 9]
        with pytest.raises(ZTensorError, match="not dense"):
            f.view("w")
    doc = run_json(capsys, "inspect", named)
    assert doc["tensors"][0]["layout"] == "ext:sparse_csr"
    assert "(ext:sparse_csr)" in run(capsys, "inspect", named).out


def test_an_encoding_id_named_raw_is_not_unencoded(tmp_path: Path) -> None:
    """An unregistered encoding id ``raw`` (ztensor 2.1.2: 'encoding profile "raw" is not
    registered') was read as an unencoded part, a short blob even filling its decoded
    length with what followed. It is an encoding tensorfile does not know: its stored
    bytes are readable, decoding it is refused."""
    data = np.arange(4, dtype=np.float32).tobytes()
    for stored in (data, data[:8]):
        part = {"dtype": "f32", "blob": [4096, len(stored)], "encoding": "raw"}
        obj = {"shape": [4], "layout": "dense", "parts": {"data": {**part, "decoded_length": 16}}}
        path = tmp_path / f"{len(stored)}.zt"
        path.write_bytes(assemble({"objects": {"w": obj}}, {4096: stored}))
        with ztensor.open(path) as f:
            for read in (f.get_tensor, f.view, lambda n: f.read_into([n], numpy_allocator)):
                with pytest.raises(ZTensorUnsupportedError, match="encoded as 'raw'"):
                    read("w")
            assert f.read_stored("w", "data").tobytes() == stored
            assert f.info("w").encoding == "ext:raw"


# -- truncation and fuzzing --------------------------------------------------------------------


def test_every_truncation_is_refused() -> None:
    data = good_file()
    for cut in [*range(0, 64), *range(64, len(data), 97), len(data) - 1]:
        with pytest.raises(ZTensorError):
            read_all(data[:cut])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_files_raise_only_tensorfile_errors(data: st.DataObject) -> None:
    raw = bytearray(good_file())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "splice", "cut"]))
        if kind == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif kind == "splice":
            chunk = data.draw(st.binary(min_size=1, max_size=16))
            raw[at : at + len(chunk)] = chunk
        else:
            del raw[at:]
            if not raw:
                break
    try:
        read_all(bytes(raw))
    except TensorFileError:
        pass


def _manifest_of(data: bytes) -> tuple[bytes, bytes]:
    at, length, _ = struct.unpack("<QQQ", data[-40:-16])
    return data[:at], data[at : at + length]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_manifests_raise_only_tensorfile_errors(data: st.DataObject) -> None:
    """Mutations of the manifest with its hash recomputed: the CBOR parser and the §3.6
    validator see them, not just the hash check."""
    head, manifest = _manifest_of(good_file())
    m = bytearray(manifest)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(m) - 1))
        if data.draw(st.booleans()):
            m[at] = data.draw(st.integers(0, 255))
        else:
            m[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    body = bytes(m)
    try:
        read_all(head + body + encode_footer(len(head), len(body), manifest_hash(body)))
    except TensorFileError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**64), 2**64 - 1)
        | st.floats()
        | st.text(max_size=5)
        | st.binary(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_deterministic_cbor_round_trips_and_rejects_every_other_encoding(value: Any) -> None:
    encoded = _cbor.encode(value, deterministic=True)
    decoded = _cbor.decode(encoded, deterministic=True)
    assert _cbor.encode(decoded, deterministic=True) == encoded
    decoded_strict, end = _cbor._Decoder(encoded, deterministic=True).item(0, 0)
    assert end == len(encoded) and _cbor.encode(decoded_strict, deterministic=True) == encoded
    import cbor2

    loose = cbor2.dumps(value)  # cbor2's default: not sorted, floats as they come
    if loose != encoded:
        with pytest.raises(_cbor.DeterministicCBORError):
            _cbor.decode(loose, deterministic=True)


# -- interrupted writes ------------------------------------------------------------------------

_CHILD = """
import sys, time, numpy as np
from tensorfile import ztensor
def chunks():
    yield np.zeros(1 << 20, np.float32)
    print("ready", flush=True)
    time.sleep(60)
    yield np.zeros(1 << 20, np.float32)
with ztensor.Writer(sys.argv[1], version=2, compression=sys.argv[2] or None) as w:
    w.add("a", np.ones(1000, np.float32))
    w.add_stream("b", "float32", [2 << 20], chunks())
"""


@pytest.mark.parametrize("compression", ["", "zstd"])
def test_a_killed_v2_writer_leaves_the_old_file_intact(tmp_path: Path, compression: str) -> None:
    dest = tmp_path / "m.zt"
    for previous in (False, True):
        if previous:
            ztensor.save_file({"old": np.arange(3, dtype=np.int8)}, dest, version=2)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(dest), compression],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGKILL)
        child.wait()
        if previous:
            assert ztensor.load_file(dest)["old"].tolist() == [0, 1, 2]
        else:
            assert not dest.exists()
    ztensor.save_file({"new": np.ones(2, np.int8)}, dest, version=2)  # the next write cleans up
    assert os.listdir(tmp_path) == ["m.zt"]
