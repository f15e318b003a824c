"""A compressed ``.npz`` member is inflated into memory that grows with the bytes really
inflated (issue 35): the size its zip header and its ``.npy`` header claim becomes an
allocation only once that many bytes came out of the member, and a member that inflates
to more or fewer bytes than its zip header states is an error naming it; members that
share bytes of the archive are refused, naming two. numpy's own ``np.load`` is the oracle
for the archives that tell the truth."""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import tensorfile
from tensorfile import FormatError
from tests.formats.limits import GIB, run_limited


def _npy(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return out.getvalue()


def _restate(archive: bytes, *, file_size: int, crc: int | None = None) -> bytes:
    """``archive`` (one member) with the member's uncompressed size (and CRC-32) in its
    local header and its central directory entry replaced."""
    data = bytearray(archive)
    cd = data.rfind(b"PK\x01\x02")
    for field in (22, cd + 24):
        struct.pack_into("<I", data, field, file_size)
    if crc is not None:
        for field in (14, cd + 16):
            struct.pack_into("<I", data, field, crc)
    return bytes(data)


def _deflated(body: bytes, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("w.npy", body)
    return buf.getvalue()


_METHODS = {"deflate": zipfile.ZIP_DEFLATED, "bzip2": zipfile.ZIP_BZIP2, "lzma": zipfile.ZIP_LZMA}


_CLAIM = 400_000_000  # float32s: 1.6 GB claimed ...
_REAL = 1_500_000  # ... by a member that inflates to 1.5 MB


def lying_npz(path: Path, method: int = zipfile.ZIP_DEFLATED) -> Path:
    """A compressed member whose zip headers and ``.npy`` header claim 1.6 GB (within what
    1.5 MB of deflate may expand to, so opening cannot refuse it) while it holds 1.5 MB of
    incompressible bytes; its CRC-32 is that of the bytes it holds."""
    head = _npy((_CLAIM,))
    body = _deflated(head + os.urandom(_REAL), method)
    path.write_bytes(_restate(body, file_size=len(head) + 4 * _CLAIM))
    return path


_READ_IT = """
import sys, tracemalloc
import tensorfile
tracemalloc.start()
for how in ("get_tensor", "read_slice", "get_tensors"):
    try:
        with tensorfile.open(sys.argv[1] if len(sys.argv) > 1 else {path!r}) as f:
            if how == "get_tensor":
                f.get_tensor("w")
            elif how == "read_slice":
                f.read_slice("w", slice(None))
            else:
                f.get_tensors()
        print(how, "read")
    except tensorfile.TensorFileError as exc:
        print(how, type(exc).__name__, exc)
print("TRACED", tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.parametrize("method", list(_METHODS))
def test_a_lying_member_never_becomes_an_allocation(tmp_path: Path, method: str) -> None:
    """Under an address-space limit 1.5 GiB wide (the claim does not fit in it), each way
    of reading the member (deflated, bzip2 or LZMA) says it inflates to 1.5 MB, not 1.6
    GB, naming it; the most memory Python and numpy allocated meanwhile stays a few
    megabytes, and so does the process's peak resident memory."""
    path = lying_npz(tmp_path / "lie.npz", _METHODS[method])
    printed, peak = run_limited(_READ_IT.format(path=str(path)), address_space=GIB * 3 // 2)
    *lines, traced = printed.splitlines()
    assert len(lines) == 3, printed
    for line, how in zip(lines, ("get_tensor", "read_slice", "get_tensors"), strict=True):
        assert line.startswith(f"{how} FormatError {path}: member w.npy inflates to "), line
        assert "not the 1,600,000,128 its zip header states" in line, line
    assert int(traced.split()[1]) < 64 << 20, traced  # the destination was never allocated
    assert peak < 512 << 20, peak


@pytest.mark.parametrize("crc_of", ["stated", "all"])
def test_a_member_that_inflates_past_its_stated_size_is_refused(
    tmp_path: Path, crc_of: str
) -> None:
    """A member whose deflate stream holds more than its zip header states, with the CRC-32
    of the stated bytes (which zipfile, stopping at the stated size, found right) or of all
    of them: the extra bytes are an error naming the member, never silently dropped."""
    arr = np.arange(1000, dtype=np.float32)
    stated = _npy(arr.shape) + arr.tobytes()
    body = stated + bytes(range(256)) * 40
    path = tmp_path / "more.npz"
    crc = zlib.crc32(stated if crc_of == "stated" else body)
    path.write_bytes(_restate(_deflated(body), file_size=len(stated), crc=crc))
    with tensorfile.open(path) as f, pytest.raises(FormatError) as err:
        f.get_tensor("w")
    if crc_of == "stated":  # the bytes past the stated size break the CRC-32
        assert str(err.value) == f"{path}: member w.npy: Bad CRC-32 for file 'w.npy'"
    else:
        assert str(err.value) == (
            f"{path}: member w.npy inflates to more than the {len(stated):,} bytes its zip "
            "header states"
        )


def test_a_member_that_inflates_short_of_its_array_is_refused(tmp_path: Path) -> None:
    """Fewer bytes than the zip header states (and than the array needs): the member and
    both counts are named, for every way of reading it."""
    head = _npy((1000,))
    body = head + bytes(1000)
    path = tmp_path / "short.npz"
    path.write_bytes(_restate(_deflated(body), file_size=len(head) + 4000))
    with tensorfile.open(path) as f:
        for read in (lambda: f.get_tensor("w"), lambda: f.get_tensors(), lambda: f.view("w")):
            with pytest.raises(FormatError) as err:
                read()
            assert str(err.value) == (
                f"{path}: member w.npy inflates to {len(body):,} bytes, not the "
                f"{len(head) + 4000:,} its zip header states (1,000 of its 4,000 bytes of "
                "array data)"
            )


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(35)
    return {
        "f32": rng.standard_normal((7, 5)).astype(np.float32),
        "big_endian": np.arange(24, dtype=">i4").reshape(2, 3, 4),
        "fortran": np.asfortranarray(rng.standard_normal((6, 4))),
        "scalar": np.array(3.5, dtype=np.float16),
        "empty": np.zeros((0, 3), dtype=np.int16),
        "bools": rng.random(33) > 0.5,
        "c64": (rng.standard_normal(9) + 1j).astype(np.complex64),
    }


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_honest_archives_load_as_numpy_loads_them(tmp_path: Path, save: object) -> None:
    path = tmp_path / "a.npz"
    save(path, **_arrays())  # type: ignore[operator]
    with np.load(path) as want, tensorfile.open(path) as f:
        got = f.get_tensors()
        assert list(got) == list(want.keys())
        for name, arr in got.items():
            np.testing.assert_array_equal(arr, want[name], strict=False)
            assert arr.shape == want[name].shape and arr.dtype == want[name].dtype.newbyteorder("=")
            np.testing.assert_array_equal(f.get_tensor(name), want[name])
            np.testing.assert_array_equal(f.view(name), want[name])
            if arr.ndim:
                np.testing.assert_array_equal(f.read_slice(name, slice(1, None)), want[name][1:])


@pytest.mark.parametrize("method", ["bzip2", "lzma"])
def test_honest_bzip2_and_lzma_archives_load_as_numpy_loads_them(
    tmp_path: Path, method: str
) -> None:
    """bzip2 and LZMA expand far more than deflate's ~1032 times (16 MiB of zeros packs
    into a few hundred bytes): an honest archive is never refused for it, and loads as
    ``np.load`` reads it."""
    arrays = {**_arrays(), "zeros": np.zeros(1 << 22, np.float32)}
    path = tmp_path / "a.npz"
    with zipfile.ZipFile(path, "w", _METHODS[method]) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w") as member:
                np.lib.format.write_array(member, arr)
    with np.load(path) as want, tensorfile.open(path) as f:
        got = f.get_tensors()
        assert list(got) == list(want.keys()) == list(arrays)
        for name, arr in got.items():
            np.testing.assert_array_equal(arr, want[name], strict=False)
            assert arr.shape == want[name].shape and arr.dtype == want[name].dtype.newbyteorder("=")


def test_a_big_honest_member_streams_through_many_chunks(tmp_path: Path) -> None:
    """A deflated member of 48 MB (many inflate chunks, compressible but not constant)
    reads back equal to numpy's reading, whole, sliced and as a view."""
    arr = np.tile(np.arange(4096, dtype=np.int32), 3 * 1024).reshape(-1, 256)
    arr[::97] += 7
    path = tmp_path / "big.npz"
    np.savez_compressed(path, w=arr, small=np.ones(3))
    with np.load(path) as want, tensorfile.open(path) as f:
        np.testing.assert_array_equal(f.get_tensor("w"), want["w"])
        np.testing.assert_array_equal(f.read_slice("w", slice(500, 700)), want["w"][500:700])
        got = f.get_tensors()
        np.testing.assert_array_equal(got["w"], want["w"])
        np.testing.assert_array_equal(got["small"], want["small"])
        np.testing.assert_array_equal(f.view("w"), want["w"])


def _nested(count: int) -> bytes:
    """``count`` stored members nested in each other (review35h h07): each a valid ``.npy``
    of bytes, with its true CRC-32, whose data is the rest of the archive (the next
    member's local header and data, and so on)."""
    tail, members = b"", []
    for i in reversed(range(count)):
        name = f"t{i}.npy".encode()
        data = _npy((len(tail),), "|u1") + tail
        crc, n = zlib.crc32(data), len(data)
        tail = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, n, n, len(name), 0)
        tail += name + data
        members.insert(0, (name, crc, n, len(tail)))
    central = b"".join(
        struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, n, n,
                    len(name), 0, 0, 0, 0, 0, len(tail) - at) + name
        for name, crc, n, at in members
    )  # fmt: skip
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(tail), 0)
    return tail + central + end


def test_members_that_share_bytes_are_refused_naming_two(tmp_path: Path) -> None:
    """h07: 300 stored members nested in each other, each true to its CRC-32 and within the
    file, claimed 150 times the file's bytes (every whole read, hash and conversion
    multiplied); refused, naming the first two that overlap."""
    path = tmp_path / "nested.npz"
    path.write_bytes(_nested(300))
    total = sum(i.file_size for i in zipfile.ZipFile(path).infolist())
    assert total > 100 * path.stat().st_size
    said = r"members t0\.npy \(bytes 0 to [\d,]+\) and t1\.npy \(from byte [\d,]+\) overlap"
    with pytest.raises(FormatError, match=said):
        tensorfile.open(path)
