"""tensorfile's own reader of PyTorch pickles (:mod:`tensorfile.formats._unpickle`): what a
hostile file can ask of it. torch is the oracle for what honest files hold; a file that
lies gets a TensorFileError naming what is wrong, in time and memory that grow with the
file, never an unrelated exception."""

from __future__ import annotations

import io
import pickle
import re
import struct
import subprocess
import sys
import warnings
import zipfile
import zlib
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


def test_pickles_need_no_torch(tmp_path: Path) -> None:
    """The reader is tensorfile's own, its zip reader too: zipped and old-format files open
    with torch unimportable."""
    legacy, zipped = tmp_path / "old.pt", tmp_path / "new.pt"
    state = {"w": torch.arange(4, dtype=torch.int16), "step": 7}
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    torch.save(state, zipped)
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import tensorfile\n"
        f"for p in ({str(legacy)!r}, {str(zipped)!r}):\n"
        "    f = tensorfile.open(p)\n"
        "    print(f.get_tensor('w').tolist(), f.attributes)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[0, 1, 2, 3] {'step': 7}"] * 2


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


# -- review35k: the reader's own attack surface ----------------------------------------


def _zip_pt(tmp_path: Path, pkl: bytes, records: dict[str, bytes], name: str = "z.pt") -> Path:
    """A zip as torch.save writes it (torch's own writer), holding ``pkl`` and ``records``."""
    path = tmp_path / name
    w = torch._C.PyTorchFileWriter(str(path))
    w.write_record("data.pkl", pkl, len(pkl))
    w.write_record("byteorder", b"little", 6)
    for key, data in records.items():
        w.write_record(f"data/{key}", data, len(data))
    w.write_end_of_file()
    del w
    return path


def _one_tensor(size: tuple[int, ...], stride: tuple[int, ...], numel: int = 4) -> bytes:
    """A zip data.pkl of ``{"w": _rebuild_tensor_v2(<numel floats>, 0, size, stride)}``."""
    ints = lambda t: b"(" + b"".join(_long(v) for v in t) + b"t"  # noqa: E731
    pid = (b"(" + _uni("storage") + b"ctorch\nFloatStorage\n" + _uni("0") + _uni("cpu")
           + _long(numel) + b"tQ")  # fmt: skip
    call = b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid + b"K\x00" + ints(size) + ints(stride)
    return b"\x80\x02}" + _uni("w") + call + b"\x89}tRs."


def _long(v: int) -> bytes:
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


@pytest.mark.parametrize(
    ("size", "stride"),
    [((1, 4), (2**70, 1)), ((0, 2**62 - 1), (1, 1)), ((1,), (2**2000,))],
    ids=["k01-size-1-huge-stride", "k02-empty-huge-size", "k12-long-stride"],
)
def test_layouts_no_array_can_address_are_refused_by_the_reader(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    """k01, k02, k12: a stride of 2**70 on a size-1 dimension, or an empty tensor of 2**62
    elements a row, passed the checks and numpy raised ValueError; now refused, by name."""
    path = _zip_pt(tmp_path, _one_tensor(size, stride), {"0": bytes(16)})
    with pytest.raises(UnsupportedError, match="reach past what an array can address"):
        tensorfile.open(str(path))


def _raw_zip(tmp_path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    """A zip written by Python's zipfile: ``(name, data, compress_type)`` entries."""
    path = tmp_path / "z.pt"
    with zipfile.ZipFile(path, "w") as z:
        for name, data, how in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = how
            z.writestr(info, data)
    return path


def test_a_compressed_record_is_refused_unread_whatever_its_size(tmp_path: Path) -> None:
    """k03: torch's zip reader inflated a compressed ``version`` record while it was built
    (a 1 MB file: 1 GB); tensorfile's own zip reader inflates nothing and refuses it."""
    pkl = b"\x80\x02}."
    bomb = zlib.compress(b"3\n" + bytes(64 << 20), 9)  # (64 MiB in ~64 KiB)
    path = _raw_zip(tmp_path, [("archive/data.pkl", pkl, zipfile.ZIP_STORED),
                               ("archive/version", b"", zipfile.ZIP_STORED)])  # fmt: skip
    raw = path.read_bytes()
    assert len(bomb) < 1 << 17
    path = _raw_zip(tmp_path, [("archive/data.pkl", pkl, zipfile.ZIP_STORED),
                               ("archive/version", b"3\n" + bytes(64 << 20),
                                zipfile.ZIP_DEFLATED)])  # fmt: skip
    assert path.stat().st_size < 1 << 18 and len(raw) < 1 << 10
    with pytest.raises(FormatError, match=r"record 'archive/version' is compressed"):
        tensorfile.open(str(path))


def test_a_record_stored_in_one_header_and_compressed_in_the_other_is_refused(
    tmp_path: Path,
) -> None:
    """k04: the central directory said deflated, the local header stored: tensorfile
    served the deflate stream as the tensor, torch inflated it. Both headers must agree."""
    values = np.arange(16, dtype=np.float32).tobytes()
    pkl = _one_tensor((16,), (1,), 16)
    path = _raw_zip(tmp_path, [("archive/data.pkl", pkl, zipfile.ZIP_STORED),
                               ("archive/data/0", values, zipfile.ZIP_DEFLATED)])  # fmt: skip
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        at = z.getinfo("archive/data/0").header_offset
    struct.pack_into("<H", raw, at + 8, 0)  # (its local header: stored)
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"record 'archive/data/0' is compressed"):
        tensorfile.open(str(path))


def _calls(call: bytes, args: bytes, times: int) -> bytes:
    """A zip data.pkl ``{"w": tensor, "x": [call(*args)] * times}``: the callable and its
    arguments memoised once, then 5 bytes a call."""
    body = b"]q\x01(" + call + b"q\x02" + args + b"q\x03R" + b"h\x02h\x03R" * (times - 1)
    return b"\x80\x02}(" + _uni("w") + _one_tensor((2,), (1,), 2)[3:-2] + _uni("x") + body + b"eu."


@pytest.mark.parametrize(
    ("call", "args", "said", "times"),
    [
        (b"ctorch\nSize\n", b"(" + b"(" + _long(2**63) * 64 + b"t" + b"t", "torch.Size", 200_000),
        (b"cbuiltins\nset\n", b"(]q\x04(" + b"N" * 4000 + b"e" + b"t", "builtins.set", 1_000),
        (
            b"ctorch._utils\n_rebuild_tensor_v2\n",
            _one_tensor((2,), (1,), 2)[_one_tensor((2,), (1,), 2).index(b"_v2\n(") + 4 : -4] + b"t",
            "torch._utils._rebuild_tensor_v2",
            200_000,
        ),
    ],
    ids=["k08-size", "k11-set", "k09-rebuild"],
)
def test_calls_repeated_through_the_memo_are_counted(
    tmp_path: Path, call: bytes, args: bytes, said: str, times: int
) -> None:
    """k08, k09, k11: one call and its memoised arguments, repeated at 5 bytes a call, made
    a new value each time (a 64-number Size, a 4,000-item set, a tensor and its catalog
    entry): hundreds of times the file's size in memory. Each call counts what it makes
    against twice the file's bytes (and 1 Mi)."""
    path = _zip_pt(tmp_path, _calls(call, args, times), {"0": bytes(8)})
    assert path.stat().st_size < 2 << 20
    with pytest.raises(FormatError, match=rf"calls of {re.escape(said)} copy"):
        tensorfile.open(str(path))


def test_a_set_keeps_each_item_once_and_its_order(tmp_path: Path) -> None:
    """k05, k15: a set of one 1 MiB bytes value named 300 times was sorted by the repr of
    every item (300 x 4 MiB at once); a set holds each item once, in the pickle's order."""
    big = bytes(1 << 20)
    path = tmp_path / "s.pt"
    torch.save({"w": torch.ones(1), "s": {"b", "a"}}, path)
    with tensorfile.open(str(path)) as f:
        assert sorted(f.attributes["s"]) == ["a", "b"]
    blob = _uni("s") + b"cbuiltins\nset\n(]q\x05(" + b"B" + struct.pack("<I", len(big))
    assert blob  # (BINBYTES is no opcode torch.save writes: the repeat goes through the memo)
    items = b"X" + struct.pack("<I", len(big)) + big.decode("latin1").encode() + b"q\x06"
    pkl = b"\x80\x02}(" + _uni("s") + b"cbuiltins\nset\n(](" + items + b"h\x06" * 300
    pkl += b"etRu."
    path = _zip_pt(tmp_path, pkl, {}, "set.pt")
    with tensorfile.open(str(path)) as f:
        assert f.attributes["s"] == ["\x00" * (1 << 20)]


def test_a_name_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    """k06: such a name reached the npz writer (UnicodeEncodeError); no format holds it."""
    key = "w\ud800".encode("utf-8", "surrogatepass")
    pkl = _one_tensor((2,), (1,), 2).replace(_uni("w"), b"X" + struct.pack("<I", len(key)) + key)
    path = _zip_pt(tmp_path, pkl, {"0": bytes(8)})
    with pytest.raises(FormatError, match="lone surrogate"):
        tensorfile.open(str(path))


def test_a_storage_view_named_like_a_storage_is_refused(tmp_path: Path) -> None:
    """k07: torch's old-format loader keeps storages and views under one table of keys, so
    a view named like a storage is that storage there, and another thing here."""
    view = b"(" + _uni("0") + b"K\x00K\x02t"  # (view key "0": the storage's own key)
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2, view), 0, (2,))
    path = _write(tmp_path, _legacy(obj + b"u.", ["0"], _counted(2, bytes(8))))
    with pytest.raises(FormatError, match=r"storage view '0' has a storage's key"):
        tensorfile.open(str(path))


@pytest.mark.parametrize(("op", "said"), [(b"(", "marks open at once"), (b"}", "containers")])
def test_marks_and_containers_are_bounded_by_the_file(tmp_path: Path, op: bytes, said: str) -> None:
    """k13: each one-byte MARK made a list, each ``}`` a dict: 64-110 bytes of memory a
    byte of the file. Marks open at once are capped; containers count against the file."""
    path = _write(tmp_path, _legacy(b"\x80\x02" + op * (4 << 20) + b".", []))
    with pytest.raises(FormatError, match=said):
        tensorfile.open(str(path))


def test_a_complex128_storage_is_refused_for_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    torch.save({"c": torch.zeros(2, dtype=torch.complex128)}, path)
    with pytest.raises(UnsupportedError, match="complex128, which no tensor file format holds"):
        tensorfile.open(str(path))


def test_a_remote_size_past_any_file_is_a_source_error() -> None:
    """k10: a server claiming a 19-digit size made ``os.ftruncate`` raise OverflowError."""
    from tensorfile.core.source import SourceBase
    from tensorfile.errors import SourceError
    from tensorfile.formats._pickle_bytes import pinned

    class Claiming(SourceBase):
        name = "http://127.0.0.1/claims.pt"

        @property
        def size(self) -> int:
            return 9_999_999_999_999_999_999

        def _read(self, offset: int, length: int) -> bytes:
            raise AssertionError("never read")

    with pytest.raises(SourceError, match="cannot keep the 9,999,999,999,999,999,999 bytes"):
        with pinned(Claiming()):
            pass


# -- review35l: differentials with torch.load, and what names can make ------------------


def _torch_zip(obj: object) -> tuple[bytes, dict[str, bytes]]:
    """``obj`` as torch.save zips it: its data.pkl and its other records (within archive/)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(buf) as z:
        records = {i.filename.split("/", 1)[1]: z.read(i) for i in z.infolist()}
    pkl = records.pop("data.pkl")
    return pkl, {k[len("data/") :]: v for k, v in records.items() if k.startswith("data/")}


def test_a_zip_with_a_comment_is_refused(tmp_path: Path) -> None:
    """l01: a second zip hidden in the end record's comment was what torch (and zipfile)
    read, tensorfile the first: torch.save writes no comment, and none is taken."""
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf)
    raw = bytearray(buf.getvalue())
    struct.pack_into("<H", raw, len(raw) - 2, 4)
    path = _write(tmp_path, bytes(raw) + b"hide")  # (a comment: another zip could be there)
    with pytest.raises(FormatError, match="does not end with its end record"):
        tensorfile.open(str(path))


def test_a_file_that_is_also_a_tar_is_refused(tmp_path: Path) -> None:
    """l02: torch.load reads a file that is a tar archive as an (old) tar checkpoint before
    it reads pickles; one whose first 512 bytes carry a tar header's checksum is refused."""
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf, _use_new_zipfile_serialization=False)
    head = bytearray(buf.getvalue()[:512].ljust(512, b"\0"))
    head[148:156] = b"        "
    head[148:156] = b"%06o\0 " % sum(head)
    path = _write(tmp_path, bytes(head) + buf.getvalue()[512:])
    with pytest.raises(FormatError, match="also a tar archive"):
        tensorfile.open(str(path))


def test_one_storage_under_many_names_serves_a_bounded_total(tmp_path: Path) -> None:
    """l03, l12: one tensor named again and again (a memo reference, 2 bytes a name) served
    its bytes under every name to convert, id and verify: the names together serve at most
    4 times the file and 64 MiB; a list of a tensor repeated past one entry for each 32 bytes
    of the file (and 16,384) is refused before it is walked."""
    t = torch.zeros(1 << 20)  # (4 MiB: 30 names serve 120 MiB)
    path = tmp_path / "many.pt"
    torch.save({f"n{i}": t for i in range(30)}, path)
    with pytest.raises(UnsupportedError, match="names serve more than 4 times"):
        tensorfile.open(str(path))
    pkl = b"\x80\x02](" + _one_tensor((1,), (1,), 1)[3 + 5 + 1 : -2] + b"q\x07" + b"h\x07" * 100_000
    path = _zip_pt(tmp_path, pkl + b"e.", {"0": bytes(4)}, "memo.pt")
    with pytest.raises(UnsupportedError, match="flattens to more than"):
        tensorfile.open(str(path))


@pytest.mark.parametrize(
    ("body", "said"),
    [(b"N" + b"\x85" * (4 << 20), "containers"), (b"](" + b"N" * (3 << 20) + b"e", "entries")],
    ids=["l04-tuple-chain", "l05-top-list"],
)
def test_one_byte_values_cannot_make_hundreds_of_times_the_file(
    tmp_path: Path, body: bytes, said: str
) -> None:
    """l04, l05: a chain of one-byte TUPLE1s, or a top list of one-byte values (each a
    metadata entry): ~300 bytes of memory a byte of the file. Tuples count as containers;
    entries are counted before a container is walked."""
    path = _write(tmp_path, _legacy(b"\x80\x02" + body + b".", []))
    with pytest.raises(TensorFileError, match=said):
        tensorfile.open(str(path))


def test_a_state_that_would_change_a_tensor_is_refused(tmp_path: Path) -> None:
    """l06: torch sets a rebuilt tensor's pickled state with setattr: ``{"data": other}``
    gives it other's values. Such a state is refused; added attributes are set aside."""
    t, other = torch.ones(3), torch.full((3,), 666.0)
    t.__dict__["data"] = other
    path = tmp_path / "s.pt"
    torch.save({"w": t}, path)
    assert torch.load(path, weights_only=True)["w"].tolist() == [666.0] * 3
    with pytest.raises(UnsupportedError, match="_rebuild_from_type_v2"):
        tensorfile.open(str(path))


def test_keys_python_takes_for_one_are_one_as_torch_has_them(tmp_path: Path) -> None:
    """l07: ``{1: a, True: b}`` is ``{1: b}`` to torch.load; tensorfile served a under
    "1" and b under "True". Keys Python takes for one are one: the first key, the last
    value."""
    pkl, records = _torch_zip({"a": torch.zeros(2), "b": torch.ones(2)})
    pkl = pkl.replace(_uni("a"), b"K\x01", 1).replace(_uni("b"), b"\x88", 1)
    path = _zip_pt(tmp_path, pkl, records)
    oracle = torch.load(path, weights_only=True)
    assert list(oracle) == [1] and oracle[1].tolist() == [1.0, 1.0]
    with tensorfile.open(str(path)) as f:
        assert f.keys() == ["1"] and f.get_tensor("1").tolist() == [1.0, 1.0]


@pytest.mark.parametrize("zipped", [True, False])
def test_conjugated_and_negated_views_read_as_torch_loads_them(
    tmp_path: Path, zipped: bool
) -> None:
    """l08: the view bits torch.save keeps beside a tensor were ignored."""
    x = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    state = {"c": x.conj(), "n": torch._neg_view(torch.tensor([1.0, -2.0]))}
    path = tmp_path / "v.pt"
    torch.save(state, path, _use_new_zipfile_serialization=zipped)
    oracle = torch.load(path, weights_only=True)
    with tensorfile.open(str(path)) as f:
        assert f.get_tensor("c").tolist() == oracle["c"].resolve_conj().tolist()
        assert f.get_tensor("n").tolist() == oracle["n"].resolve_neg().tolist() == [-1.0, 2.0]


def test_storage_keys_given_as_a_set_are_refused(tmp_path: Path) -> None:
    """l10: torch reads an old-format file's storages in the order of its key list; a set
    has no order (torch's changes with the hash seed)."""
    obj = b"\x80\x02}(" + _uni("w") + _rebuild(_pid(b"FloatStorage", "0", 2), 0, (2,)) + b"u."
    path = _write(tmp_path, _legacy(obj, {"0"}, _counted(2, bytes(8))))  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="not a list of texts"):
        tensorfile.open(str(path))


def test_a_name_with_a_nul_is_refused(tmp_path: Path) -> None:
    """l11: a NUL in a name made an npz that tensorfile (and numpy) could not read back."""
    pkl, records = _torch_zip({"a": torch.zeros(2)})
    path = _zip_pt(tmp_path, pkl.replace(_uni("a"), _uni("a\0b"), 1), records)
    with pytest.raises(FormatError, match="a NUL or a lone surrogate"):
        tensorfile.open(str(path))


# -- review35n: keys as Python has them, view bits, bare storages, JSON text ------------


def _two_keys(key_a: bytes, key_b: bytes) -> tuple[bytes, dict[str, bytes]]:
    """A zip data.pkl ``{key_a: <1, 2>, key_b: <666, 666>}`` (keys as opcodes) and its
    records."""
    pkl, records = _torch_zip({"a": torch.tensor([1.0, 2.0]), "b": torch.full((2,), 666.0)})
    return pkl.replace(_uni("a"), key_a, 1).replace(_uni("b"), key_b, 1), records


_FLOAT_1 = b"G" + struct.pack(">d", 1.0)
_COMPLEX_1 = b"cbuiltins\ncomplex\nK\x01K\x00\x86R"


def test_keys_python_takes_for_one_are_one(tmp_path: Path) -> None:
    """A key set twice (a big integer, twice) is one key to torch.load: the last value."""
    pkl, records = _two_keys(_long(2**70 + 1), _long(2**70 + 1))
    path = _zip_pt(tmp_path, pkl, records)
    assert len(torch.load(path, weights_only=True)) == 1
    with tensorfile.open(str(path)) as f:
        assert len(f.keys()) == 1 and f.get_tensor(f.keys()[0]).tolist() == [666.0, 666.0]


@pytest.mark.parametrize(
    ("key_a", "key_b"),
    [
        (b"K\x01\x85", _FLOAT_1 + b"\x85"),  # (1,) and (1.0,)
        (b"K\x01", _COMPLEX_1),  # 1 and complex(1, 0)
        (b"K\x01K\x02\x86", b"ctorch\nSize\n(K\x01K\x02t\x85R"),  # (1, 2), Size((1, 2))
        (b"ctorch\ndevice\nX\x03\x00\x00\x00cpu\x85R", _uni("cpu")),  # a device, a text
    ],
    ids=["tuples", "complex", "size", "device"],
)
def test_keys_whose_equality_is_python_s_own_are_refused(
    tmp_path: Path, key_a: bytes, key_b: bytes
) -> None:
    """n01, n11, o01, o02, o05, o07: tuples, torch.Size, complex numbers, devices (and
    tensors, NaN) as keys: Python's equality for them has corners (``(1,) == (1.0,)``,
    ``-0.0`` in a complex, NaN by identity, nested memo references) that tensorfile does
    not follow; no checkpoint keys a dict by one, so such a dict is refused."""
    pkl, records = _two_keys(key_a, key_b)
    path = _zip_pt(tmp_path, pkl, records)
    with pytest.raises(UnsupportedError, match="a dict key or set item that is"):
        tensorfile.open(str(path))


def test_keys_python_tells_apart_are_two(tmp_path: Path) -> None:
    """n04: distinct big integers were told apart by their size and low bits only."""
    pkl, records = _two_keys(_long(2**70 + 1), _long(2**70 + 2**20 + 1))
    path = _zip_pt(tmp_path, pkl, records)
    assert len(torch.load(path, weights_only=True)) == 2
    with tensorfile.open(str(path)) as f:
        assert len(f.keys()) == 2


def test_a_view_bit_whose_value_is_false_is_set_as_torch_sets_it(tmp_path: Path) -> None:
    """n02: torch sets a view bit whose key is there, whatever its value."""
    pkl, records = _torch_zip({"n": torch._neg_view(torch.tensor([1.0, 2.0]))})
    path = _zip_pt(tmp_path, pkl.replace(b"\x88s", b"\x89s", 1), records)
    oracle = torch.load(path, weights_only=True)["n"].resolve_neg()
    with tensorfile.open(str(path)) as f:
        assert f.get_tensor("n").tolist() == oracle.tolist() == [-1.0, -2.0]


@pytest.mark.parametrize("zipped", [True, False])
def test_a_bare_storage_is_served_as_its_bytes(tmp_path: Path, zipped: bool) -> None:
    """n06: torch.load gives a storage in a checkpoint its bytes; it was kept as metadata
    naming an internal class."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (TypedStorage is deprecated)
        typed = torch.tensor([1.0, 2.0, 3.0]).storage()
    state = {
        "w": torch.ones(1),
        "ts": typed,
        "us": torch.arange(4, dtype=torch.uint8).untyped_storage(),
    }
    path = tmp_path / "s.pt"
    torch.save(state if zipped else {"w": state["w"], "ts": typed}, path,
               _use_new_zipfile_serialization=zipped)  # fmt: skip
    with tensorfile.open(str(path)) as f:
        assert f.get_tensor("ts").tolist() == [1.0, 2.0, 3.0]
        if zipped:
            assert f.get_tensor("us").tolist() == [0, 1, 2, 3]


def test_a_torchscript_archive_is_refused(tmp_path: Path) -> None:
    """n07: torch.load hands a zip holding constants.pkl to torch.jit.load."""
    pkl, records = _torch_zip({"w": torch.ones(2)})
    path = tmp_path / "ts.pt"
    w = torch._C.PyTorchFileWriter(str(path))
    for name, data in [("data.pkl", pkl), ("constants.pkl", b"\x80\x02)."),
                       *((f"data/{k}", v) for k, v in records.items())]:  # fmt: skip
        w.write_record(name, data, len(data))
    w.write_end_of_file()
    del w
    with pytest.raises(FormatError, match="TorchScript"):
        tensorfile.open(str(path))


def test_set_items_are_told_apart_as_python_does(tmp_path: Path) -> None:
    """n08: ``set([1, 1.0, True])`` is ``{1}`` to torch.load."""
    pkl, records = _torch_zip({"w": torch.ones(1), "s": "x"})
    items = b"cbuiltins\nset\n(]q\x63(K\x01" + _FLOAT_1 + b"\x88etR"
    path = _zip_pt(tmp_path, pkl.replace(_uni("x"), items, 1), records)
    assert torch.load(path, weights_only=True)["s"] == {1}
    with tensorfile.open(str(path)) as f:
        assert f.attributes["s"] == [1]


def test_a_one_tuple_of_text_is_no_class(tmp_path: Path) -> None:
    """n12: ``("torch.Tensor",)`` equalled the class torch.Tensor (a NamedTuple); torch
    refuses it as _rebuild_from_type_v2's type."""
    t = torch.ones(2)
    t.note = "x"  # (saved through _rebuild_from_type_v2(func, torch.Tensor, args, state))
    pkl, records = _torch_zip({"w": t})
    assert b"ctorch\nTensor\n" in pkl
    pkl = pkl.replace(b"ctorch\nTensor\n", b"X\x0c\x00\x00\x00torch.Tensor\x85", 1)
    path = _zip_pt(tmp_path, pkl, records)
    with pytest.raises(UnsupportedError, match="_rebuild_from_type_v2"):
        tensorfile.open(str(path))


def test_control_characters_count_as_json_writes_them(tmp_path: Path) -> None:
    """n05: the text budget counted characters, and the metadata's JSON writes a NUL as 6:
    one memoised 64 KiB text of NULs under 520 keys made 200 MB of metadata from 70 KB."""
    text = "\0" * (64 << 10)
    entries = b"".join(_uni(f"k{i}") + b"](h\x63e" for i in range(520))
    pkl = b"\x80\x02}(" + _uni("s") + _uni(text) + b"q\x63" + entries + b"u."
    path = _zip_pt(tmp_path, pkl, {})
    assert path.stat().st_size < 100_000
    with pytest.raises(FormatError, match="as JSON text, take more than"):
        tensorfile.open(str(path))


# -- review35o ---------------------------------------------------------------------------


def test_a_dtype_tensorfile_does_not_read_is_named(tmp_path: Path) -> None:
    """o06: a complex32 tensor was refused as "a call a checkpoint does not need"."""
    path = tmp_path / "c32.pt"
    torch.save({"x": torch.zeros(2, dtype=torch.complex32)}, path)
    with pytest.raises(UnsupportedError, match=r"is of torch\.complex32, which tensorfile does"):
        tensorfile.open(str(path))


def test_a_nul_in_a_storage_key_or_record_name_is_refused(tmp_path: Path) -> None:
    """o08: torch looks records up by C strings, cut at a NUL: ``data/0\\0x`` is ``data/0``
    to torch, another record to tensorfile."""
    pkl, records = _torch_zip({"w": torch.ones(2)})
    path = _zip_pt(tmp_path, pkl.replace(_uni("0"), _uni("0\0x"), 1), records)
    with pytest.raises(UnsupportedError, match="its key must be a short text without NUL"):
        tensorfile.open(str(path))


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (b"\x80\x02}", b"\x80\x02}}b", "object.__setstate__"),  # a BUILD on a plain dict
        (b"X\x07\x00\x00\x00storage", b"X\x07\x00\x00\x00storage", "byteorder"),
    ],
    ids=["build-on-dict", "empty-byteorder"],
)
def test_files_torch_load_refuses_are_refused(
    tmp_path: Path, old: bytes, new: bytes, said: str
) -> None:
    """o09: a BUILD on a plain dict (torch builds only tensors and OrderedDicts), an empty
    byteorder record (torch: unknown endianness): torch.load refuses both."""
    pkl, records = _torch_zip({"w": torch.ones(2)})
    path = tmp_path / "r.pt"
    w = torch._C.PyTorchFileWriter(str(path))
    pkl = pkl.replace(old, new, 1)
    order = b"" if said == "byteorder" else b"little"
    for name, data in [("data.pkl", pkl), ("byteorder", order),
                       *((f"data/{k}", v) for k, v in records.items())]:  # fmt: skip
        w.write_record(name, data, len(data))
    w.write_end_of_file()
    del w
    with pytest.raises(TensorFileError):
        torch_refuses = False
        try:
            torch.load(path, weights_only=True)
        except Exception:
            torch_refuses = True
        assert torch_refuses
        tensorfile.open(str(path))


def test_a_tensor_state_is_one_level_deep(tmp_path: Path) -> None:
    """o10: a state of pairs of one memoised pair of pairs... (6 bytes a level) was walked
    2**depth times; nested 5,000 deep it was a RecursionError. torch writes a dict, or a
    pair of them: nothing deeper is taken."""
    state = b"NN\x86r" + struct.pack("<I", 1)
    for level in range(1, 22):  # (2**22 walks of it before)
        state += b"j" + struct.pack("<I", level) + b"\x86r" + struct.pack("<I", level + 1)
    call = (b"ctorch._utils\n_rebuild_parameter_with_state\n(" + _rebuild(
        _pid(b"FloatStorage", "0", 2), 0, (2,)) + b"\x89ccollections\nOrderedDict\n)R"
        + state + b"tR")  # fmt: skip
    obj = b"\x80\x02}(" + _uni("w") + call + b"u."
    path = _write(tmp_path, _legacy(obj, ["0"], _counted(2, bytes(8))))
    with pytest.raises(UnsupportedError, match="_rebuild_parameter_with_state"):
        tensorfile.open(str(path))


def test_a_record_longer_than_its_storage_is_refused(tmp_path: Path) -> None:
    """o11: torch reads a storage from a record of exactly its size."""
    pkl, records = _torch_zip({"w": torch.ones(2)})
    path = _zip_pt(tmp_path, pkl, {"0": records["0"] + bytes(4)})
    with pytest.raises(FormatError, match="claims 8 bytes, but has a record of 12"):
        tensorfile.open(str(path))


def test_a_torch_global_that_is_no_dtype_is_refused(tmp_path: Path) -> None:
    """o09: any ``torch.<name>`` was taken as a dtype's name (``torch.load`` too)."""
    pkl, records = _torch_zip({"w": torch.ones(2), "f": "x"})
    path = _zip_pt(tmp_path, pkl.replace(_uni("x"), b"ctorch\nload\n", 1), records)
    with pytest.raises(UnsupportedError, match=r"names torch\.load, which"):
        tensorfile.open(str(path))
