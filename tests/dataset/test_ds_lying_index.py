"""Lying ``_tensor_index.parquet`` files: a corrupt or wrongly typed index is a FormatError
naming it, a FIFO or folder a SourceError without blocking, and a stale or wrong index (keys
in the wrong shard, shards the manifest does not list or that it lacks, keys it lacks) gives
the right sample anyway, from the shard headers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tensorfile import dataset
from tensorfile.errors import FormatError, SourceError, TensorNotFoundError
from tests.helpers.lying_datasets import INDEX, fifo_guard
from tests.helpers.manifests import listed_shards

N = 12


def values(i: int) -> list[float]:
    return [float(2 * i), float(2 * i + 1)]


@pytest.fixture
def kv(tmp_path: Path) -> Path:
    out = tmp_path / "kv"
    dataset.write(
        {
            "name": [f"k{i:02d}" for i in range(N)],
            "v": np.arange(2 * N, dtype=np.float32).reshape(N, 2),
        },
        out,
        name_col="name",
        target_shard_size_mb=150 / 2**20,
        generate_index=True,
    )
    assert len(listed_shards(out)) >= 3
    return out


def true_rows(folder: Path) -> list[dict[str, Any]]:
    return pq.read_table(folder / INDEX).to_pylist()


def write_rows(folder: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> None:
    table = pa.Table.from_pylist(rows, schema=schema) if rows or schema else pa.table({})
    pq.write_table(table, folder / INDEX)


def assert_all_keys_right(folder: Path) -> None:
    ds = dataset.open(folder)
    for i in reversed(range(N)):
        got = ds.get(f"k{i:02d}")
        assert got["key"] == f"k{i:02d}"
        assert got["v"].tolist() == values(i)
    with pytest.raises(TensorNotFoundError, match="nope"):
        ds.get("nope")


def test_a_valid_index_is_used(kv: Path) -> None:
    assert_all_keys_right(kv)
    ds = dataset.open(kv)
    ds.get("k07")
    assert len(ds._readers) == 1


# -- corrupt ------------------------------------------------------------------------------------


CORRUPT: dict[str, Any] = {
    "empty": lambda b: b"",
    "random": lambda b: bytes(range(256)) * 4,
    "truncated": lambda b: b[: len(b) // 2],
    "no-footer": lambda b: b[:-8],
    "footer-length": lambda b: b[:-8] + (2**31 - 1).to_bytes(4, "little") + b"PAR1",
    "magic-only": lambda b: b"PAR1PAR1",
    "footer-garbage": lambda b: _footer(b, lambda f: b"\xff" * len(f)),
    "footer-zeros": lambda b: _footer(b, lambda f: b"\x00" * len(f)),
}


def _footer(data: bytes, change: Any) -> bytes:
    """``data`` with its thrift footer (the bytes before the 4-byte length and "PAR1")
    replaced by ``change(footer)``."""
    n = int.from_bytes(data[-8:-4], "little")
    return data[: -8 - n] + change(data[-8 - n : -8]) + data[-8:]


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_a_corrupt_index_is_a_format_error(kv: Path, name: str) -> None:
    path = kv / INDEX
    path.write_bytes(CORRUPT[name](path.read_bytes()))
    ds = dataset.open(kv)  # the index is not needed to open
    assert len(list(ds)) == N
    with pytest.raises(FormatError, match="not a valid tensor index") as err:
        ds.get("k03")
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("columns", "words"),
    [
        (
            {"tensor_key": pa.array([1, 2]), "file_name": pa.array(["a", "b"])},
            "tensor_key column is int64",
        ),
        (
            {"tensor_key": pa.array(["a"]), "file_name": pa.array([[1]], pa.list_(pa.int32()))},
            "file_name column is list",
        ),
        ({"tensor_key": pa.array(["a"])}, "no (single) file_name"),
        ({"key": pa.array(["a"]), "file_name": pa.array(["x"])}, "no (single) tensor_key"),
        ({"tensor_key": pa.array(["a", None]), "file_name": pa.array(["x", "y"])}, "null"),
        ({"tensor_key": pa.array(["a"]), "file_name": pa.array([None], pa.string())}, "null"),
    ],
    ids=["key-int", "file-list", "no-file", "no-key", "null-key", "null-file"],
)
def test_a_wrongly_typed_index_is_a_format_error(
    kv: Path, columns: dict[str, Any], words: str
) -> None:
    pq.write_table(pa.table(columns), kv / INDEX)
    with pytest.raises(FormatError, match=words.replace("(", r"\(").replace(")", r"\)")):
        dataset.open(kv).get("k00")


def test_an_index_that_is_not_a_file(kv: Path) -> None:
    path = kv / INDEX
    path.unlink()
    os.mkfifo(path)
    with fifo_guard(path), pytest.raises(SourceError, match="not a regular file"):
        dataset.open(kv).get("k00")


def test_an_index_folder_without_parts_is_no_index(kv: Path) -> None:
    """A folder is how Spark (the reference connector) writes the index; one without part
    files is no index: the shards' headers answer."""
    path = kv / INDEX
    path.unlink()
    path.mkdir()
    (path / "_SUCCESS").write_bytes(b"")
    assert dataset.open(kv).get("k00")["key"] == "k00"


def test_a_large_string_index_is_read(kv: Path) -> None:
    rows = true_rows(kv)
    schema = pa.schema([("tensor_key", pa.large_string()), ("file_name", pa.large_string())])
    write_rows(
        kv, [{"tensor_key": r["tensor_key"], "file_name": r["file_name"]} for r in rows], schema
    )
    assert_all_keys_right(kv)


# -- stale or wrong: the headers answer ------------------------------------------------------


def _rotate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every key assigned to another listed shard."""
    files = sorted({r["file_name"] for r in rows})
    move = dict(zip(files, files[1:] + files[:1], strict=True))
    return [{**r, "file_name": move[r["file_name"]]} for r in rows]


STALE = {
    "wrong-shard": _rotate,
    "unlisted-file": lambda rows: [{**r, "file_name": "../" + r["file_name"]} for r in rows],
    "old-shard": lambda rows: [
        {**r, "file_name": "part-00000-0000-00000000-0000-0000-0000-000000000000.safetensors"}
        for r in rows
    ],
    "missing-shard": lambda rows: [r for r in rows if r["file_name"] != rows[0]["file_name"]],
    "missing-key": lambda rows: rows[1:],
    "one-row": lambda rows: rows[:1],
    "empty": lambda rows: [],
    "fake-keys": lambda rows: [{**r, "tensor_key": "fake" + r["tensor_key"]} for r in rows],
    "key-in-two-shards": lambda rows: rows + _rotate(rows)[:1],
    "absolute": lambda rows: [{**r, "file_name": "/etc/passwd"} for r in rows],
}


@pytest.mark.parametrize("name", sorted(STALE))
def test_a_stale_index_falls_back_to_the_headers(kv: Path, name: str) -> None:
    rows = STALE[name](true_rows(kv))
    schema = pq.read_schema(kv / INDEX)
    write_rows(kv, rows, schema)
    assert_all_keys_right(kv)


def test_a_stale_index_after_an_append_without_it(kv: Path) -> None:
    stale = (kv / INDEX).read_bytes()
    dataset.write(
        {"name": ["new"], "v": np.array([[7.0, 8.0]], np.float32)},
        kv,
        name_col="name",
        mode="append",
    )
    (kv / INDEX).write_bytes(stale)  # as a writer that does not keep the index would leave it
    ds = dataset.open(kv)
    assert ds.get("new")["v"].tolist() == [7.0, 8.0]
    assert ds.get("k05")["v"].tolist() == values(5)


def test_a_fake_key_the_index_names_is_not_found(kv: Path) -> None:
    rows = true_rows(kv)
    write_rows(kv, [*rows, {**rows[0], "tensor_key": "ghost__v"}], pq.read_schema(kv / INDEX))
    ds = dataset.open(kv)
    with pytest.raises(TensorNotFoundError, match="ghost"):
        ds.get("ghost")
    assert ds.get("k01")["v"].tolist() == values(1)
