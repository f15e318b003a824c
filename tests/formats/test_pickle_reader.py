"""tensorfile's own reader of PyTorch pickles (:mod:`tensorfile.formats._unpickle`): what a
hostile file can ask of it. torch is the oracle for what honest files hold; a file that
lies gets a TensorFileError naming what is wrong, in time and memory that grow with the
file, never an unrelated exception."""

from __future__ import annotations

import io
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.errors import FormatError, TensorFileError, UnsupportedError

_MAGIC = 0x1950A86A20F9469CFC6C
_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2}}


def _legacy(obj: bytes, keys: list[str], tail: bytes = b"", info: object = _INFO) -> bytes:
    """An old-format file: torch's three head pickles, ``obj`` (a pickle's bytes), the
    list of storage keys, then ``tail`` (the storages' counts and bytes)."""
    head = b"".join(pickle.dumps(v, protocol=2) for v in (_MAGIC, 1001, info))
    return head + obj + pickle.dumps(keys, protocol=2) + tail


def _uni(s: str) -> bytes:
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()


def _pid(kind: bytes, key: str, numel: int, view: bytes = b"N") -> bytes:
    """A BINPERSID of ``("storage", torch.<kind>, key, "cpu", numel, view)``."""
    return (
        b"(" + _uni("storage") + b"ctorch\n" + kind + b"\n" + _uni(key) + _uni("cpu")
        + b"J" + struct.pack("<i", numel) + view + b"tQ"
    )  # fmt: skip


def _rebuild(storage: bytes, offset: int, size: tuple[int, ...]) -> bytes:
    """``_rebuild_tensor_v2(storage, offset, size, contiguous stride, False, {})``."""
    stride = tuple(int(np.prod(size[i + 1 :])) for i in range(len(size)))
    ints = lambda t: b"(" + b"".join(b"J" + struct.pack("<i", v) for v in t) + b"t"  # noqa: E731
    return (
        b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"J" + struct.pack("<i", offset)
        + ints(size) + ints(stride) + b"\x89}tR"
    )  # fmt: skip


def _write(tmp_path: Path, data: bytes, name: str = "x.pt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _counted(numel: int, data: bytes) -> bytes:
    return struct.pack("<q", numel) + data


def test_a_dict_of_colliding_integer_keys_reads_in_linear_time(tmp_path: Path) -> None:
    """Integers that are multiples of 2**61 - 1 all hash alike: a dict of 200,000 of them
    takes minutes to build. The reader keeps a dict's pairs and never hashes a key; the
    read finishes in a child given 60 seconds (it takes about one)."""
    n = 200_000
    body = b"".join(
        b"\x8a\x0b" + (i * (2**61 - 1)).to_bytes(11, "little") + b"K\x00" for i in range(1, n + 1)
    )
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2), 0, (2,))
    obj += _uni("d") + b"}(" + body + b"uu."
    path = _write(tmp_path, _legacy(obj, ["0"], _counted(2, np.ones(2, np.float32).tobytes())))
    code = (
        "import tensorfile, sys\n"
        f"f = tensorfile.open({str(path)!r})\n"
        "print(f.keys(), len(f.attributes['d']), f.catalog.extra['not_tensors']['d'])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("]")[0] == "['w'" and "dict of 200,000 ints" in run.stdout


def test_a_storage_named_twice_with_another_type_is_refused(tmp_path: Path) -> None:
    obj = b"\x80\x02](" + _rebuild(_pid(b"FloatStorage", "0", 2), 0, (2,))
    obj += _rebuild(_pid(b"DoubleStorage", "0", 2), 0, (2,)) + b"e."
    path = _write(tmp_path, _legacy(obj, ["0"], _counted(2, bytes(8))))
    with pytest.raises(FormatError, match=r"storage '0' is named twice with different types"):
        tensorfile.open(str(path))


@pytest.mark.parametrize(
    ("keys", "tail", "said"),
    [
        (["0", "0"], _counted(2, bytes(8)) * 2, r"names '0', which is listed twice"),
        (["1"], _counted(2, bytes(8)), r"names '1', which is no storage of the pickle"),
        ([], b"", r"storage '0' is never read from the file"),
        (["0"], _counted(3, bytes(12)), r"behind a count of 3 elements"),
        (["0"], _counted(2, bytes(7)), r"claims 8 bytes, but the file holds 7"),
        (["0"], b"\x02\x00", r"claims 8 bytes, but the file holds 0 after offset"),
    ],
)
def test_an_old_format_file_s_storages_must_be_what_the_pickle_says(
    tmp_path: Path, keys: list[str], tail: bytes, said: str
) -> None:
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2), 0, (2,)) + b"u."
    path = _write(tmp_path, _legacy(obj, keys, tail))
    with pytest.raises(FormatError, match=said):
        tensorfile.open(str(path))


def test_a_storage_view_past_its_storage_is_refused(tmp_path: Path) -> None:
    view = b"(" + _uni("v") + b"K\x01K\x04t"  # (key "v", offset 1, 4 elements of a 2-storage)
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2, view), 0, (2,))
    path = _write(tmp_path, _legacy(obj + b"u.", ["0"], _counted(2, bytes(8))))
    with pytest.raises(FormatError, match=r"storage view 'v' .* reaches past its storage '0'"):
        tensorfile.open(str(path))


def test_a_zip_storage_without_its_record_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2), "u": torch.zeros(3)}, buf)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as z, zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            if not info.filename.endswith("data/1"):
                w.writestr(info.filename, z.read(info))
    path = _write(tmp_path, out.getvalue())
    with pytest.raises(FormatError, match=r"storage '1' claims 12 bytes, but has no record"):
        tensorfile.open(str(path))


def test_a_big_endian_file_is_refused(tmp_path: Path) -> None:
    info = {**_INFO, "little_endian": False}
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2), 0, (2,)) + b"u."
    path = _write(tmp_path, _legacy(obj, ["0"], _counted(2, bytes(8)), info))
    with pytest.raises(UnsupportedError, match="big-endian"):
        tensorfile.open(str(path))


def test_old_format_pickles_need_no_torch_and_zipped_ones_name_the_extra(tmp_path: Path) -> None:
    """The reader is tensorfile's own: an old-format file opens with torch unimportable;
    a zipped one needs torch's zip reader, and says so."""
    legacy, zipped = tmp_path / "old.pt", tmp_path / "new.pt"
    state = {"w": torch.arange(4, dtype=torch.int16), "step": 7}
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    torch.save(state, zipped)
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import tensorfile\n"
        f"f = tensorfile.open({str(legacy)!r})\n"
        "print(f.get_tensor('w').tolist(), f.attributes)\n"
        "try:\n"
        f"    tensorfile.open({str(zipped)!r})\n"
        "except tensorfile.errors.UnsupportedError as exc:\n"
        "    print('refused', 'torch' in str(exc))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[0, 1, 2, 3] {'step': 7}", "refused True"]


def test_every_dtype_torch_saves_reads_as_torch_loads_it(tmp_path: Path) -> None:
    names = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
             "int64", "bool", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
             "complex64"]  # fmt: skip
    state = {n: (torch.arange(6) % 3).to(getattr(torch, n)).reshape(2, 3) for n in names}
    state["t"] = torch.arange(12.0).reshape(3, 4).T
    torch.save(state, tmp_path / "oracle.pt")
    oracle = torch.load(tmp_path / "oracle.pt", weights_only=True)  # (torch's old-format
    for zipped in (True, False):  # loader cannot read the uint16..64 it writes; tensorfile can)
        path = tmp_path / f"all{zipped}.pt"
        torch.save(state, path, _use_new_zipfile_serialization=zipped)
        with tensorfile.open(str(path)) as f:
            assert sorted(f.keys()) == sorted(oracle), zipped
            for name, t in oracle.items():
                got = f.get_tensor(name)
                assert got.shape == tuple(t.shape), name
                assert got.tobytes() == t.contiguous().view(torch.uint8).numpy().tobytes(), name


def test_arrays_outlive_the_file_they_were_read_from(tmp_path: Path) -> None:
    """An array is a view of the mapped file: closing the reader (or the source) must not
    unmap what it still shows (a use after close was a segmentation fault), and it is
    read-only (writing would change every name that shares the storage)."""
    code = (
        "import gc, tensorfile\n"
        "from tensorfile.sources import LocalSource\n"
        "from tensorfile.formats.torch_pickle import load_tensors\n"
        "kept = []\n"
        "for p in {paths!r}:\n"
        "    with tensorfile.open(p) as f:\n"
        "        kept += [f.view('w'), f.get_tensor('w')]\n"
        "    with LocalSource(p) as s:\n"
        "        kept.append(load_tensors(s)[0]['w'])\n"
        "gc.collect()\n"
        "print([float(a.sum()) for a in kept], kept[2].flags.writeable)\n"
    )
    paths = []
    for zipped in (True, False):
        path = tmp_path / f"w{zipped}.pt"
        torch.save({"w": torch.arange(1 << 16, dtype=torch.float32)}, path,
                   _use_new_zipfile_serialization=zipped)  # fmt: skip
        paths.append(str(path))
    run = subprocess.run(
        [sys.executable, "-c", code.format(paths=paths)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    total = float(sum(range(1 << 16)))
    assert run.stdout.strip() == f"{[total] * 6} False"


def _saved(zipped: bool) -> bytes:
    buf = io.BytesIO()
    state = {"w": torch.arange(6.0).reshape(2, 3), "opt": {"lr": 0.1, "betas": (0.9, 0.99)}}
    torch.save(
        {**state, "n": [1, 2], "t": torch.ones(2, 2).T}, buf, _use_new_zipfile_serialization=zipped
    )
    return buf.getvalue()


_VALID = (_saved(False), _saved(True))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_any_corruption_is_read_or_refused_never_a_crash(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Bytes of an old-format or a zipped file changed at random: each is read, or refused
    with a TensorFileError (never an unrelated exception, never a hang)."""
    raw = bytearray(data.draw(st.sampled_from(_VALID)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    path = tmp_path / "c.pt"
    path.write_bytes(bytes(raw))
    try:
        with tensorfile.open(str(path)) as f:
            for name in f.keys():
                f.get_tensor(name)
            _ = f.attributes
    except TensorFileError:
        pass
