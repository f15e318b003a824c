"""The zTensor v2 surface of ``tensorfile.ztensor`` and of ``tensorfile.open``: the
``version`` flag (v1.0 stays the default), writer options and their refusals, streaming,
atomicity, zero-copy views, slices, torch and sparse inputs, attribute edits, detection,
and reads over HTTP that start with the footer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import InvalidArgumentError, UnsupportedError, ZTensorError
from tensorfile.formats import ZTENSOR, detect
from tensorfile.formats.ztensor.v2 import _format as _v2_format
from tensorfile.formats.ztensor.v2 import _writer as _v2_writer
from tensorfile.sources import MemorySource
from tests.helpers.servers import Server, start_nginx


def test_version_1_stays_the_default(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    ztensor.save_file({"w": np.ones(2, np.float32)}, path)
    assert path.read_bytes()[:8] == b"ZTEN1000"
    with ztensor.Writer(path) as w:
        assert type(w) is ztensor.Writer
        w.add("w", np.ones(2, np.float32))
    assert path.read_bytes()[:8] == b"ZTEN1000"
    with ztensor.open(path) as f:
        assert f.info("w").data.digest_over == "stored" and f.catalog.version == "1.0"


def test_version_2_writes_the_v2_container(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    with ztensor.Writer(path, version=2, checksum="sha256", align=8192) as w:
        assert isinstance(w, ztensor.Writer2)
        w.add("w", np.arange(5, dtype=np.uint16))
        w.add("v", np.zeros(30_000, dtype=np.int8), checksum=None, compression="zstd")
        w.add("t", np.arange(3, dtype=np.int8), compression="zstd")  # zstd cannot shrink it
    raw = path.read_bytes()
    assert raw[:8] == raw[-8:] == b"\x89ZT2\r\n\x1a\n"
    with ztensor.open(path) as f:
        assert isinstance(f, ztensor.ZTensor2Reader)
        w_part, v_part = f.info("w").data, f.info("v").data
        assert w_part.digest_over == "decoded" and w_part.digest.startswith("sha256:")
        assert v_part.digest is None and v_part.encoding == "zt.zstd-seekable/1"
        assert v_part.decoded_length == 30_000
        assert f.info("t").data.encoding == "raw"  # kept raw: encoded it would be bigger
        assert all(c.range.start % 8192 == 0 for c in (w_part, v_part, f.info("t").data))
        assert f.get_tensor("v").tolist() == [0] * 30_000
        assert f.get_tensor("t").tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"version": 3}, "version must be 1"),
        ({"version": True}, "version must be 1"),
        ({"version": 2, "checksum": "crc32c"}, "crc32c.*xxh3"),
        ({"version": 2, "align": 1000}, "multiple of 4096"),
        ({"version": 2, "align": 0}, "multiple of 4096"),
        ({"version": 2, "level": 99}, "level"),
        ({"version": 2, "attributes": {"": 1}}, "empty"),
        ({"version": 2, "attributes": {"k": object()}}, "CBOR"),
        ({"version": 2, "attributes": {"k": 2**64}}, "64-bit"),
        ({"version": 1, "align": 4096}, "version=2"),
    ],
)
def test_bad_writer_options_are_refused(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    path = tmp_path / "m.zt"
    with pytest.raises(InvalidArgumentError, match=message):
        ztensor.save_file({"w": np.ones(2)}, path, **options)
    with pytest.raises(InvalidArgumentError, match=message):
        ztensor.Writer(path, **options)
    assert os.listdir(tmp_path) == []


def test_bad_tensors_are_refused_and_the_writer_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    with ztensor.Writer(path, version=2) as w:
        with pytest.raises(UnsupportedError):
            w.add("f6", np.zeros(4, ml_dtypes.float6_e2m3fn))
        with pytest.raises(InvalidArgumentError):
            w.add("", np.zeros(1))
        with pytest.raises(InvalidArgumentError):
            w.add("a\0b", np.zeros(1))
        with pytest.raises(InvalidArgumentError):
            w.add("x", [1, 2])
        unsorted = ztensor.CSRTensor(np.ones(2), np.array([2, 0]), np.array([0, 2]), (1, 3))
        with pytest.raises(InvalidArgumentError, match="strictly increase"):
            w.add("csr", unsorted)
        twice = ztensor.COOTensor(np.ones(2), np.array([[1, 1]]), (3,))
        with pytest.raises(InvalidArgumentError, match="same coordinates"):
            w.add("coo", twice)
        w.add("ok", np.array([True, False]))
        with pytest.raises(InvalidArgumentError, match="already"):
            w.add("ok", np.zeros(1))
    assert ztensor.open(path).keys() == ["ok"]


def test_bool_bytes_are_written_as_0_and_1(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    odd = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
    ztensor.save_file({"b": odd}, path, version=2)
    assert ztensor.load_file(path)["b"].view(np.uint8).tolist() == [0, 1, 1, 1]


def _chunks(total: int, size: int) -> Iterator[np.ndarray[Any, Any]]:
    data = np.arange(total, dtype=np.float32)
    for i in range(0, total, size):
        yield data[i : i + size]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_add_stream_writes_what_add_writes(tmp_path: Path, compression: str | None) -> None:
    total = 700_001
    streamed, whole = tmp_path / "s.zt", tmp_path / "w.zt"
    with ztensor.Writer(streamed, version=2, compression=compression, checksum="xxh3") as w:
        w.add_stream("t", "float32", [total], _chunks(total, 99_999))
    ztensor.save_file(
        {"t": np.arange(total, dtype=np.float32)},
        whole,
        version=2,
        compression=compression,
        checksum="xxh3",
    )
    assert streamed.read_bytes() == whole.read_bytes()
    assert np.array_equal(ztensor.load_file(streamed)["t"], np.arange(total, dtype=np.float32))


@pytest.mark.parametrize("count", [9, 11])
def test_add_stream_refuses_the_wrong_byte_count_and_writes_nothing(
    tmp_path: Path, count: int
) -> None:
    dest = tmp_path / "m.zt"
    ztensor.save_file({"old": np.zeros(1)}, dest, version=2)
    w = ztensor.Writer(dest, version=2)
    with pytest.raises(InvalidArgumentError, match="chunks hold"):
        w.add_stream("t", np.int8, [10], [np.zeros(count, np.int8)])
    assert ztensor.open(dest).keys() == ["old"] and os.listdir(tmp_path) == ["m.zt"]


def test_an_exception_inside_the_with_block_leaves_the_old_file(tmp_path: Path) -> None:
    dest = tmp_path / "m.zt"
    ztensor.save_file({"old": np.zeros(1)}, dest, version=2)
    with pytest.raises(RuntimeError), ztensor.Writer(dest, version=2) as w:
        w.add("new", np.ones(1000))
        raise RuntimeError("stop")
    assert ztensor.open(dest).keys() == ["old"] and os.listdir(tmp_path) == ["m.zt"]
    w = ztensor.Writer(dest, version=2)
    w.add("new", np.ones(3))
    w.abort()
    assert ztensor.open(dest).keys() == ["old"] and os.listdir(tmp_path) == ["m.zt"]


def test_views_are_zero_copy_and_slices_read_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    data = np.arange(64 * 1024, dtype=np.float64).reshape(256, 256)
    ztensor.save_file({"w": data, "z": data}, path, version=2, checksum="xxh3", compression=None)
    with ztensor.open(path) as f:
        view = f.view("w")
        assert not view.flags.writeable and not view.flags.owndata
        assert np.array_equal(view, data)
        assert np.array_equal(f.read_slice("w", (slice(10, 12), 3)), data[10:12, 3])
    ztensor.save_file({"w": data}, path, version=2, compression="zstd")
    with ztensor.open(path) as f:
        with pytest.raises(UnsupportedError, match="cannot be viewed"):
            f.view("w")
        assert np.array_equal(f.read_slice("w", -1), data[-1])


def test_torch_and_scipy_inputs(tmp_path: Path) -> None:
    import scipy.sparse

    path = tmp_path / "m.zt"
    tensors = {
        "bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        "c128": torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex128),
        "f8": torch.tensor([1.0, -2.0]).to(torch.float8_e5m2),
        "tcoo": torch.eye(3).to_sparse_coo(),
        "tcsr": torch.eye(3).to_sparse_csr(),
        "scsr": scipy.sparse.random(5, 6, density=0.3, format="csr", random_state=1),
    }
    ztensor.save_file(tensors, path, version=2, checksum="xxh3")
    got = ztensor.load_file(path)
    assert torch.equal(
        torch.from_numpy(got["bf16"].view(np.int16)).view(torch.bfloat16), tensors["bf16"]
    )
    assert got["c128"].tolist() == [1 + 2j, 3 - 1j]
    assert got["f8"].dtype == ml_dtypes.float8_e5m2 and got["f8"].astype(float).tolist() == [1, -2]
    assert np.array_equal(got["tcoo"].to_dense(), np.eye(3, dtype=np.float32))
    assert np.array_equal(got["tcsr"].to_dense(), np.eye(3, dtype=np.float32))
    assert np.array_equal(got["scsr"].to_dense(), tensors["scsr"].toarray())
    pt = ztensor.load_file(path, framework="pt")
    assert torch.equal(pt["bf16"], tensors["bf16"]) and pt["tcoo"].is_sparse


def test_detection_and_the_registry(tmp_path: Path) -> None:
    data = _v2_writer.to_bytes({"w": np.ones(3, np.int8)}, attributes={"n": 1.5})
    assert detect(MemorySource(data)) is ZTENSOR
    with tensorfile.open(data) as f:
        assert f.format == "ztensor" and f.metadata == {"n": "1.5"}
        assert f.get_tensor("w").tolist() == [1, 1, 1]
    cat = tensorfile.formats.read_catalog(data)
    assert cat.version == "2" and cat.extra["attributes"] == {"n": 1.5}
    shard = _v2_format.MAGIC + bytes(24) + (2).to_bytes(4, "little") + bytes(4)
    with tensorfile.open(shard + _v2_format.MAGIC) as f:
        assert f.keys() == []


def test_attribute_edits_keep_the_other_values(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    ztensor.save_file(
        {"w": np.arange(3, dtype=np.int32)},
        path,
        version=2,
        checksum="xxh3",
        attributes={"epoch": 3, "who": "me", "gone": [1]},
    )
    edit = ZTENSOR.impl().edit_metadata
    edit(str(path), lambda m: {"epoch": m["epoch"], "who": "you", "new": "x"})
    with ztensor.open(path) as f:
        assert f.attributes == {"epoch": 3, "who": "you", "new": "x"}
        assert f.get_tensor("w").tolist() == [0, 1, 2] and f.verify_all() == (1, 0)
    edit(str(path), lambda m: {})
    assert ztensor.open(path).attributes == {}


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server, proc = start_nginx(tmp_path_factory.mktemp("nginx"))
    yield server
    proc.terminate()
    proc.wait(timeout=10)


def test_v2_over_http_starts_with_the_footer(nginx: Server) -> None:
    tensors = {"a": np.arange(1000, dtype=np.float32), "b": np.eye(30, dtype=np.float16)}
    ztensor.save_file(
        tensors,
        nginx.root / "m2.zt",
        version=2,
        checksum="xxh3",
        compression="zstd",
        attributes={"k": [1, 2]},
    )
    nginx.reset()
    with tensorfile.open(f"{nginx.url}/m2.zt") as f:
        assert f.format == "ztensor" and f.catalog.version == "2"
        assert np.array_equal(f.get_tensor("b"), tensors["b"])
    with ztensor.open(f"{nginx.url}/m2.zt") as f:
        assert np.array_equal(f.get_tensor("a"), tensors["a"]) and f.attributes == {"k": [1, 2]}
    if nginx.log is not None:
        first = nginx.requests()[0]
        assert first.range.startswith("bytes=-"), first  # a suffix read: the footer first


def test_a_remote_file_that_names_shards_says_it_cannot_find_them(nginx: Server) -> None:
    corpus = Path(__file__).resolve().parent / "fixtures" / "v2-conformance" / "valid"
    (nginx.root / "sharded.zt").write_bytes((corpus / "shards-table.zt").read_bytes())
    with ztensor.open(f"{nginx.url}/sharded.zt") as f, pytest.raises(ZTensorError, match="local"):
        f.get_tensor("t")
