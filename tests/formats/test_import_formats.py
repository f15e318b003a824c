"""The import/export entries of the registry (npz, npy, PyTorch pickles): detected by their
content, read as readers like any format, hostile files refused with tensorfile's errors
before anything a header only claims is allocated, and written through the registry."""

from __future__ import annotations

import io
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

import tensorfile
from tensorfile.errors import (
    FormatError,
    InvalidArgumentError,
    TensorFileError,
    UnknownFormatError,
    UnsupportedError,
)
from tensorfile.formats import FORMATS, NPY, NPZ, PYTORCH, destination, detect, read_catalog
from tensorfile.ops import content_hash, convert
from tensorfile.sources import LocalSource


def _npy_bytes(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:  # type: ignore[type-arg]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


# -- detection ------------------------------------------------------------------------------


def test_the_content_decides_whatever_the_name(tmp_path: Path) -> None:
    with open(tmp_path / "a.weights", "wb") as f:  # (np.savez adds .npz to a name)
        np.savez(f, w=np.ones(2))
    (tmp_path / "b.dat").write_bytes(_npy_bytes(np.ones(3, np.int8), (2, 0)))
    torch.save({"w": torch.ones(2)}, tmp_path / "c.safetensors")  # torch's zip format
    for name, fmt in (("a.weights", NPZ), ("b.dat", NPY), ("c.safetensors", PYTORCH)):
        with LocalSource(tmp_path / name) as src:
            assert detect(src) is fmt, name
        with tensorfile.open(tmp_path / name) as r:
            assert r.format == fmt.name


def test_an_old_pickle_needs_the_name_to_say_pytorch(tmp_path: Path) -> None:
    state = {"w": torch.arange(4, dtype=torch.int16)}
    torch.save(state, tmp_path / "old.bin", _use_new_zipfile_serialization=False)
    with tensorfile.open(tmp_path / "old.bin") as r:
        assert r.format == "pytorch" and r.get_tensor("w").tolist() == [0, 1, 2, 3]
    os.rename(tmp_path / "old.bin", tmp_path / "old.data")
    with pytest.raises(UnknownFormatError, match="a Python pickle"):
        tensorfile.open(tmp_path / "old.data")


def test_a_zip_of_something_else_is_still_a_zip_archive(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "docs.npz", "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(UnknownFormatError, match="looks like a zip archive"):
        tensorfile.open(tmp_path / "docs.npz")
    with pytest.raises(UnknownFormatError) as raised:
        tensorfile.open(b"PK\x03\x04" + bytes(60))
    message = str(raised.value)
    assert (
        "not a tensor file tensorfile knows (safetensors, zTensor, GGUF, npz, npy, PyTorch pickle)"
        in message
    )


def test_an_empty_npz_is_an_archive_of_nothing(tmp_path: Path) -> None:
    np.savez(tmp_path / "none.npz")
    with tensorfile.open(tmp_path / "none.npz") as r:
        assert (r.format, r.keys()) == ("npz", [])


# -- reading --------------------------------------------------------------------------------


def test_npy_in_place_big_endian_and_fortran(tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for name, arr in (("c", a), ("be", a.astype(">f4")), ("f", np.asfortranarray(a))):
        np.save(tmp_path / f"{name}.npy", arr)
        with tensorfile.open(tmp_path / f"{name}.npy") as r:
            assert r.keys() == [name] and r.info(name).dtype.name == "F32"
            v = r.view(name)
            assert v.tolist() == a.tolist() and not v.flags.writeable
            assert r.get_tensor(name).tolist() == a.tolist()
            assert r.read_slice(name, (slice(1, 3), -1)).tolist() == [7.0, 11.0]
    with tensorfile.open(_npy_bytes(a)) as r:  # bytes: the lone tensor is "tensor"
        assert r.keys() == ["tensor"]


def test_npz_stored_and_deflated_members(tmp_path: Path) -> None:
    w = np.arange(6.0).reshape(2, 3)
    b = np.arange(4, dtype=">i4")
    np.savez(tmp_path / "s.npz", w=w, b=b)
    np.savez_compressed(tmp_path / "c.npz", w=w, b=b)
    for name in ("s.npz", "c.npz"):
        with tensorfile.open(tmp_path / name) as r:
            assert r.keys() == ["w", "b"]
            assert r.view("w").tolist() == w.tolist() and r.get_tensor("b").tolist() == [0, 1, 2, 3]
            assert r.info("b").dtype.name == "I32"
        data = (tmp_path / name).read_bytes()
        with tensorfile.open(data) as r:  # bytes in memory too
            assert r.get_tensors()["w"].tolist() == w.tolist()


def test_a_damaged_stored_member_fails_its_crc_on_read_and_on_view(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", w=np.ones(1000, np.float32))
    raw = bytearray((tmp_path / "a.npz").read_bytes())
    raw[raw.index(b"\x00\x00\x80\x3f") + 400] ^= 0xFF
    (tmp_path / "a.npz").write_bytes(bytes(raw))
    for read in (lambda r: r.get_tensor("w"), lambda r: r.view("w")):
        with tensorfile.open(tmp_path / "a.npz") as r, pytest.raises(FormatError, match="CRC"):
            read(r)


def test_a_damaged_deflated_member_is_refused(tmp_path: Path) -> None:
    np.savez_compressed(tmp_path / "a.npz", w=np.arange(5000, dtype=np.float32))
    raw = bytearray((tmp_path / "a.npz").read_bytes())
    raw[200] ^= 0xFF  # inside the compressed stream
    (tmp_path / "a.npz").write_bytes(bytes(raw))
    with pytest.raises(TensorFileError):
        with tensorfile.open(tmp_path / "a.npz") as r:
            r.get_tensor("w")


def test_pickles_flatten_names_and_share_the_loaded_memory(tmp_path: Path) -> None:
    state = {"model": {"w": torch.randn(3, 4), "h": torch.ones(2, dtype=torch.bfloat16)}}
    torch.save(state, tmp_path / "m.pt")
    with tensorfile.open(tmp_path / "m.pt") as r:
        assert r.keys() == ["model.w", "model.h"] and r.info("model.h").dtype.name == "BF16"
        assert r.view("model.w").tolist() == state["model"]["w"].tolist()
        assert r.get_tensor("model.h").dtype == ml_dtypes.bfloat16
    with tensorfile.open((tmp_path / "m.pt").read_bytes()) as r:  # bytes: no mmap
        assert r.get_tensor("model.w").tolist() == state["model"]["w"].tolist()
    cat = read_catalog(tmp_path / "m.pt")
    assert cat.format == "pytorch" and cat.metadata == {}


# -- hostile files --------------------------------------------------------------------------


def test_a_lying_npy_header_is_refused_unallocated(tmp_path: Path) -> None:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
    )
    (tmp_path / "lie.npy").write_bytes(out.getvalue() + bytes(16))
    with pytest.raises(FormatError, match="claims 4,000,000,000,000 bytes"):
        tensorfile.open(tmp_path / "lie.npy")


def test_a_deflated_member_cannot_claim_more_than_it_can_expand_to(tmp_path: Path) -> None:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": "<f4", "fortran_order": False, "shape": (10**9,)}
    )
    with zipfile.ZipFile(tmp_path / "lie.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", out.getvalue() + bytes(64))
    with pytest.raises(FormatError, match="claims 4,000,000,000 bytes"):
        tensorfile.open(tmp_path / "lie.npz")


@pytest.mark.parametrize("kind", ["npz", "npz-compressed", "npy", "pt"])
def test_truncated_files_raise_tensorfile_errors_only(tmp_path: Path, kind: str) -> None:
    arr = np.arange(300, dtype=np.float32)
    path = tmp_path / f"m.{kind.split('-')[0]}"
    if kind == "npz":
        np.savez(path, w=arr)
    elif kind == "npz-compressed":
        np.savez_compressed(path, w=arr)
    elif kind == "npy":
        np.save(path, arr)
    else:
        torch.save({"w": torch.from_numpy(arr)}, path)
    data = path.read_bytes()
    for cut in sorted({1, 9, 20, 64, len(data) // 2, len(data) - 30, len(data) - 1}):
        path.write_bytes(data[:cut])
        try:
            with tensorfile.open(path) as r:
                for name in r.keys():
                    r.get_tensor(name)
        except TensorFileError:
            pass


def test_object_arrays_and_strings_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsupportedError, match="no tensor format holds"):
        tensorfile.open(tmp_path / "obj.npy")
    np.savez(tmp_path / "s.npz", s=np.array(["abc"]))
    with pytest.raises(UnsupportedError, match="no tensor format holds"):
        tensorfile.open(tmp_path / "s.npz")


def test_a_pickle_that_needs_more_than_weights_is_refused_unexecuted(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'executed'}",))

    torch.save({"w": torch.ones(2), "evil": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(UnsupportedError, match="pickle reader refuses") as caught:
        tensorfile.open(tmp_path / "evil.pt")
    assert not (tmp_path / "executed").exists()
    # the global named, in one line
    assert "the pickle names posix.system" in str(caught.value)
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


# -- writing through the registry ---------------------------------------------------------


def test_read_only_formats_refuse_to_be_destinations(tmp_path: Path) -> None:
    src = tmp_path / "a.npz"
    np.savez(src, w=np.ones(2))
    assert not FORMATS["gguf"].writable and not FORMATS["pytorch"].writable
    for dst, to in (("o.gguf", None), ("o.pt", None), ("o", "gguf"), ("o", "pytorch")):
        with pytest.raises(UnsupportedError, match="read-only"):
            convert(src, tmp_path / dst, to=to)
    with pytest.raises(InvalidArgumentError, match="choose one of"):
        destination("onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz"]


def test_npy_holds_one_tensor(tmp_path: Path) -> None:
    np.savez(tmp_path / "two.npz", a=np.ones(2), b=np.zeros(2))
    with pytest.raises(InvalidArgumentError, match="exactly one array"):
        convert(tmp_path / "two.npz", tmp_path / "two.npy")
    assert not (tmp_path / "two.npy").exists()
    np.savez(tmp_path / "one.npz", a=np.arange(3, dtype=np.int16))
    r = convert(tmp_path / "one.npz", tmp_path / "one.npy")
    assert r.destination_format == "npy" and np.load(tmp_path / "one.npy").tolist() == [0, 1, 2]


def _sources(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    i = np.arange(7, dtype=np.int64)
    torch.save({"m": {"w": torch.from_numpy(w), "i": torch.from_numpy(i)}}, tmp_path / "z.pt")
    torch.save(
        {"w": torch.from_numpy(w)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False
    )
    np.savez(tmp_path / "s.npz", w=w, i=i.astype(">i8"))
    np.savez_compressed(tmp_path / "c.npz", w=w, i=i)
    np.save(tmp_path / "e.npy", np.asfortranarray(w))
    return {p: tmp_path / p for p in ("z.pt", "old.pt", "s.npz", "c.npz", "e.npy")}


@pytest.mark.parametrize("dst", [".safetensors", ".zt", "zt2", ".npz"])
def test_every_lossless_conversion_keeps_the_content_id(tmp_path: Path, dst: str) -> None:
    for name, path in _sources(tmp_path).items():
        want = content_hash(str(path))
        out = tmp_path / f"{name}.out{dst if dst.startswith('.') else '.zt'}"
        convert(path, out, to=None if dst.startswith(".") else dst)
        assert content_hash(str(out)) == want, (name, dst)
        back = tmp_path / f"{name}.back.safetensors"
        convert(out, back)
        assert content_hash(str(back)) == want, (name, dst)


@pytest.mark.parametrize("name", ["model.bin", "model.pt"])
def test_a_safetensors_header_length_starting_like_a_pickle_is_safetensors(
    tmp_path: Path, name: str
) -> None:
    """Content wins over the name: a safetensors file whose header length starts with the
    pickle opcode (0x80, then 2-5: a 640-byte header, say) named like a PyTorch file is
    read as safetensors, never handed to torch.load."""
    from tensorfile.safetensors.numpy import save

    for pad in range(700):
        blob = save({"w": np.ones(2, np.float32)}, metadata={"k": "x" * pad})
        if blob[0] == 0x80 and blob[1] in (2, 3, 4, 5):
            break
    else:
        raise AssertionError("no padding gives such a header length")
    path = tmp_path / name
    path.write_bytes(blob)
    with tensorfile.open(str(path)) as f:
        assert f.format == "safetensors" and f.get_tensor("w").tolist() == [1.0, 1.0]


def _npy_with_shape(shape: tuple[int, ...]) -> bytes:
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': " + repr(shape) + ", }"
    head += " " * (118 - len(head)) + "\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + bytes(64)


@pytest.mark.parametrize("shape", [(-1, 4), (0, 2**70), (2**49,)])
def test_npy_and_npz_dimensions_out_of_range_are_refused_at_open(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    """numpy's header reader takes a -1 or a 2**70 dimension; tensorfile refuses it before
    any op can compute a negative or absurd size (the hostile review found -4 parameters)."""
    path = tmp_path / "x.npy"
    path.write_bytes(_npy_with_shape(shape))
    for door in (tensorfile.open, tensorfile.inspect, content_hash):
        with pytest.raises(FormatError, match=r"outside 0\.\."):
            door(str(path))
    with pytest.raises(FormatError, match=r"outside 0\.\."):
        convert(str(path), str(tmp_path / "o.safetensors"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.npy", _npy_with_shape(shape))
    (tmp_path / "x.npz").write_bytes(buf.getvalue())
    with pytest.raises(FormatError, match=r"outside 0\.\."):
        tensorfile.open(str(tmp_path / "x.npz"))


def test_pt_with_meta_or_quantized_tensors_is_refused_by_key(tmp_path: Path) -> None:
    torch.save({"w": torch.empty(3, device="meta")}, tmp_path / "meta.pt")
    with pytest.raises(UnsupportedError, match=r"_rebuild_meta_tensor_no_storage.*meta device"):
        tensorfile.open(str(tmp_path / "meta.pt"))
    with warnings.catch_warnings():  # torch deprecates quantized tensors
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    torch.save({"qq": q}, tmp_path / "q.pt")
    # (its storage is refused as it is read: review35i i05)
    with pytest.raises(UnsupportedError, match=r"QInt8Storage, which tensorfile's pickle"):
        tensorfile.open(str(tmp_path / "q.pt"))


def test_a_deeply_nested_pt_is_flattened_without_recursion(tmp_path: Path) -> None:
    import sys

    obj: Any = {"w": torch.arange(3, dtype=torch.int8)}
    for _ in range(3000):
        obj = {"k": obj}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # torch.save itself recurses
    try:
        torch.save(obj, tmp_path / "deep.pt")
    finally:
        sys.setrecursionlimit(limit)
    with tensorfile.open(str(tmp_path / "deep.pt")) as f:
        (name,) = f.keys()
        assert name == "k." * 3000 + "w" and f.get_tensor(name).tolist() == [0, 1, 2]


_UNDER_A_MEMORY_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from tensorfile import TensorFileError
from tensorfile.ops import content_hash, convert, verify
for op in (content_hash, verify, lambda p: convert(p, p + ".safetensors")):
    try:
        op(sys.argv[1])
        print("read")
    except TensorFileError as exc:
        print(type(exc).__name__)
"""


def test_a_real_member_too_big_for_memory_is_a_tensorfile_error(tmp_path: Path) -> None:
    """A deflated member holding 1.2 GB of zeros (5 MB in the file, within what deflate
    can hold, so its header is not a lie) read under a 1 GiB address-space limit: every
    operation says it cannot hold it, never a bare MemoryError or 'internal error'. (Deflated
    at level 1: the default level took 3.4 s to write it, level 1 takes 1.4 s.)"""
    import subprocess
    import sys

    path = tmp_path / "big.npz"
    chunk = 16 << 20
    count = 72  # 1.2 GB
    zeros = bytes(chunk)
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("w.npy", "w", force_zip64=True) as member,
    ):
        shape = (count * chunk // 4,)
        np.lib.format.write_array_header_1_0(
            member, {"descr": "<f4", "fortran_order": False, "shape": shape}
        )
        for _ in range(count):
            member.write(zeros)
    run = subprocess.run(
        [sys.executable, "-c", _UNDER_A_MEMORY_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["UnsupportedError"] * 3, run.stdout + run.stderr


def test_pickles_are_read_without_torch_load_or_pickle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tensorfile reads pickles with its own reader: neither ``torch.load`` (whose
    weights_only mode could be bypassed up to torch 2.5.1, CVE-2025-32434, and runs what a
    file asks of its allowed functions) nor any of Python's unpicklers is ever called."""
    import pickle

    path, legacy = tmp_path / "m.pt", tmp_path / "old.pt"
    state = {"w": torch.arange(6.0).reshape(2, 3), "epoch": 3}
    torch.save(state, path)
    torch.save(state, legacy, _use_new_zipfile_serialization=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unpickler was called")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    for p in (path, legacy):
        with tensorfile.open(str(p)) as f:
            assert f.get_tensor("w").tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
            assert f.attributes == {"epoch": 3}
