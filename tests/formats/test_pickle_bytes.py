"""The pickle scan reads exactly the bytes torch.load then runs (review35h h02, h04, h11): a
zip's records as torch's own zip reader finds them, a local file through the descriptor
opened (never again by name), a remote file fetched once."""

from __future__ import annotations

import io
import os
import socket
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

import tensorfile
from tensorfile.errors import FormatError, UnsupportedError
from tensorfile.formats.torch_pickle import open_reader
from tensorfile.sources import LocalSource
from tests.helpers.hostile_http import (
    HostileServer,
    Request,
    Respond,
    parse_range,
    reply,
    serve_bytes,
)


def _records(obj: object) -> dict[str, bytes]:
    buf = io.BytesIO()
    torch.save(obj, buf)
    z = zipfile.ZipFile(buf)
    return {i.filename: z.read(i) for i in z.infolist()}


def _with_bytearray(pickle: bytes, n: int) -> bytes:
    """``pickle`` (a dict's) with ``"x": bytearray(n)`` added."""
    call = b"cbuiltins\nbytearray\nJ" + struct.pack("<i", n) + b"\x85R"
    return pickle[:-1] + b"X\x01\x00\x00\x00x" + call + b"s."


def _local(name: bytes, data: bytes) -> bytes:
    return (
        struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, zlib.crc32(data),
                    len(data), len(data), len(name), 0)
        + name + data
    )  # fmt: skip


def _central(name: bytes, data: bytes, off: int) -> bytes:
    return (
        struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21,
                    zlib.crc32(data), len(data), len(data), len(name), 0, 0, 0, 0, 0, off)
        + name
    )  # fmt: skip


def _two_directories(python: dict[str, bytes], miniz: dict[str, bytes], zip64: bool) -> bytes:
    """One zip, two central directories: Python's zipfile reads ``python``'s records and
    torch's reader (miniz) ``miniz``'s. zip64: miniz follows the zip64 locator to its end
    record, zipfile takes the one just before the locator. Otherwise (two directories of
    one size): the end record names miniz's; zipfile takes the bytes between it and the
    end record for data prepended to the archive, and reads the other."""
    views = [[(n.encode(), d) for n, d in view.items()] for view in (python, miniz)]
    size = sum(46 + len(n) for n, _ in views[0])
    out = bytearray() if zip64 else bytearray(_local(b"pad/pad", bytes(size)))
    offsets: dict[tuple[bytes, bytes], int] = {}
    for rec in views[0] + views[1]:
        if rec not in offsets:
            offsets[rec] = len(out)
            out += _local(*rec)
    shift = 0 if zip64 else size
    py_dir = b"".join(_central(n, d, offsets[n, d] - shift) for n, d in views[0])
    mz_dir = b"".join(_central(n, d, offsets[n, d]) for n, d in views[1])
    mz_at = len(out)
    out += mz_dir
    if not zip64:
        assert len(py_dir) == len(mz_dir)
        out += py_dir
        return bytes(out + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(views[1]),
                                       len(views[1]), size, mz_at, 0))  # fmt: skip
    mz_end = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(views[1]),
                       len(views[1]), len(mz_dir), mz_at)  # fmt: skip
    py_at = len(out)
    out += py_dir
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(views[0]),
                       len(views[0]), len(py_dir), py_at)  # fmt: skip
    out += struct.pack("<IIQI", 0x07064B50, 0, mz_end, 1)  # the locator: miniz's record
    return bytes(out + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF,
                                   0xFFFFFFFF, 0xFFFFFFFF, 0))  # fmt: skip


@pytest.mark.parametrize("zip64", [True, False])
def test_a_zip_with_two_central_directories_is_refused(tmp_path: Path, zip64: bool) -> None:
    """h02: Python's zipfile (the scan's) and torch's reader found different central
    directories, so the scan passed a harmless data.pkl and torch ran another, calling
    bytearray(N). tensorfile's zip reader takes a zip only as torch.save writes it: one
    central directory, ending where the end record begins; this file is refused, whichever
    directory holds the harm."""
    records = _records({"w": torch.arange(2.0)})
    benign = records["archive/data.pkl"]
    evil = {**records, "archive/data.pkl": _with_bytearray(benign, 1 << 20)}
    path = tmp_path / "evil.pt"
    path.write_bytes(_two_directories(records, evil, zip64))
    assert zipfile.ZipFile(path).read("archive/data.pkl") == benign  # (what zipfile sees)
    with pytest.raises(FormatError, match=r"not a zip torch\.save writes"):
        tensorfile.open(str(path))
    path.write_bytes(_two_directories(evil, records, zip64))  # (harm only zipfile sees)
    with pytest.raises(FormatError, match=r"not a zip torch\.save writes"):
        tensorfile.open(str(path))


def test_overlapping_records_are_refused(tmp_path: Path) -> None:
    """Two central entries naming one stored record: torch would read its bytes twice."""
    records = _records({"w": torch.zeros(2)})
    out = bytearray()
    central = b""
    for name, data in records.items():
        central += _central(name.encode(), data, len(out))
        out += _local(name.encode(), data)
    at = len(out)
    first = central[: 46 + len(b"archive/data.pkl")]  # (data.pkl's entry, again, renamed)
    central += first.replace(b"archive/data.pkl", b"archive/data/999")
    n = len(records) + 1
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), at, 0)
    path = tmp_path / "o.pt"
    path.write_bytes(bytes(out))
    with pytest.raises(FormatError, match=r"overlaps another|named otherwise"):
        tensorfile.open(str(path))


def _evil_zip(records: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in records.items():
            z.writestr(name, data)
    return out.getvalue()


def test_the_file_opened_is_the_file_read_not_the_name(tmp_path: Path) -> None:
    """h04: torch.load reopened a local file by its name after the scan: a file put in its
    place in between ran unscanned. tensorfile's reader reads (maps) the descriptor it
    opened, never the name again."""
    records = _records({"w": torch.arange(3.0)})
    evil = _evil_zip(
        {**records, "archive/data.pkl": _with_bytearray(records["archive/data.pkl"], 1 << 20)}
    )
    path = tmp_path / "model.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    swap = tmp_path / "swap.tmp"
    swap.write_bytes(evil)
    with LocalSource(path) as source:
        os.replace(swap, path)  # (the attacker's rename)
        with open_reader(source) as reader:
            assert reader.keys() == ["w"] and "x" not in reader.metadata
            assert reader.get_tensor("w").tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(UnsupportedError, match=r"calls builtins\.bytearray"):
        tensorfile.open(str(path))  # (the new file, opened: read, refused)


def _switching(good: bytes, bad: bytes, span: tuple[int, int], after: int) -> Respond:
    """An honest server of ``good`` until ``after`` replies held bytes of ``span``; every
    later reply holds ``bad``'s (the same length, the same ETag)."""
    covering = [0]

    def respond(request: Request, conn: socket.socket) -> bool:
        asked = request.headers.get("range")
        start, stop = parse_range(asked, len(good)) or (0, len(good))
        body = good
        if start < span[1] and span[0] < stop:
            covering[0] += 1
            body = bad if covering[0] > after else good
        head = {"Content-Length": str(stop - start), "ETag": '"v1"'}
        if asked:
            head["Content-Range"] = f"bytes {start}-{stop - 1}/{len(good)}"
        conn.sendall(reply(206 if asked else 200, head, body[start:stop]))
        return True

    return respond


def test_a_remote_pickle_is_fetched_once_for_the_scan_and_torch() -> None:
    """h11: over HTTP the scan and torch.load fetched the file separately; a server
    answering a later fetch of data.pkl with a harmful one of the same length (same ETag)
    had torch run what no scan read. Whenever the server switches, what torch runs is
    what the scan read: harmless bytes load, harmful ones are refused by the scan."""
    records = _records({"w": torch.arange(2.0), "pad": torch.zeros(1 << 20)})
    base = records["archive/data.pkl"]
    evil = _with_bytearray(base, 1 << 20)
    pad = len(evil) - len(base) - 12  # (the harmless one padded to the same length)
    benign = base[:-1] + b"X\x01\x00\x00\x00pX" + struct.pack("<I", pad) + b"p" * pad + b"s."
    assert len(benign) == len(evil)
    good = _evil_zip({**records, "archive/data.pkl": benign})
    at = good.index(benign)
    bad = good[:at] + evil + good[at + len(benign) :]
    seen = []
    for after in range(8):  # (the reply from which on the server lies)
        with HostileServer(_switching(good, bad, (at, at + len(evil)), after)) as server:
            try:
                with tensorfile.open(f"{server.url}/model.pt") as f:
                    assert sorted(f.keys()) == ["pad", "w"]
                    seen.append("harm ran" if "x" in f.metadata else "loaded")
            except (FormatError, UnsupportedError) as exc:  # (the scan saw the harm)
                seen.append("refused" if "calls builtins.bytearray" in str(exc) else str(exc))
    assert set(seen) == {"refused", "loaded"}, seen


def test_an_old_format_remote_pickle_loads_from_its_one_copy() -> None:
    """An old-format pickle cannot be mapped: torch reads it from the copy fetched once."""
    buf = io.BytesIO()
    torch.save({"w": torch.arange(3.0), "e": 3}, buf, _use_new_zipfile_serialization=False)
    with HostileServer(serve_bytes(buf.getvalue())) as server:
        with tensorfile.open(f"{server.url}/old.pt") as f:
            assert f.get_tensor("w").tolist() == [0.0, 1.0, 2.0] and f.metadata == {"e": "3"}
        assert len(server.requests) <= 3  # (format detection, then the one copy)
