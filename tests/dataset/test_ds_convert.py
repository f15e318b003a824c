"""``dataset.from_parquet`` and ``dataset.from_hf`` (issue 39): a parquet file and a Hugging
Face dataset become a dataset in one call, streaming.

The oracles are the real libraries: every value of the input read by pyarrow
(``to_pylist``) or by ``datasets`` (``Dataset[column]``), every value of the output read by the
reference ``safetensors`` from the shards the manifest lists, in its order. Hostile inputs (a
missing, corrupt or truncated file, a null, a ragged row, a column of another type) are
refused with tensorfile's errors naming the file, column and row, and never touch the dataset
already at the output path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import dataset
from tensorfile.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
    TensorFileError,
)
from tests.helpers.checkpoints import snapshot

NDArray = np.ndarray[Any, Any]
ROWS = 50


def _output(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor column of the dataset at ``out``, read by the reference library from the
    shards its manifest lists, in order."""
    doc = json.loads((out / "dataset_manifest.json").read_text())
    parts: dict[str, list[torch.Tensor]] = defaultdict(list)
    for entry in doc["shards"]:
        for key, value in safetensors.torch.load_file(out / entry["shard_path"]).items():
            parts[key].append(value)
    return {k: torch.cat(v) for k, v in parts.items()}


def _same(got: torch.Tensor, want: NDArray) -> None:
    """``got`` holds exactly ``want`` (bit for bit; bool as bool)."""
    assert tuple(got.shape) == want.shape
    assert got.dtype == torch.from_numpy(np.ascontiguousarray(want)).dtype
    assert torch.equal(got, torch.from_numpy(np.ascontiguousarray(want)))


def _mixed_table(rows: int = ROWS, seed: int = 0) -> pa.Table:
    """Columns of several dtypes and shapes, as parquet and Arrow hold them."""
    rng = np.random.default_rng(seed)
    f32 = rng.standard_normal((rows, 3)).astype(np.float32)
    f16 = rng.standard_normal((rows, 2)).astype(np.float16)
    u8 = rng.integers(0, 256, (rows, 2, 3), dtype=np.uint8)
    i8 = rng.integers(-128, 128, (rows, 2, 2), dtype=np.int8)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (2, 2))
    return pa.table(
        {
            "f32": pa.FixedSizeListArray.from_arrays(pa.array(f32.ravel()), 3),
            "f16": pa.array(list(f16), pa.list_(pa.float16())),  # variable lists, one length
            "i64": pa.array(rng.integers(-(1 << 62), 1 << 62, rows)),
            "f64": pa.array(rng.standard_normal(rows)),
            "u8": pa.array(list(u8.tolist()), pa.list_(pa.list_(pa.uint8(), 3), 2)),
            "i8": pa.array(i8.tolist(), pa.list_(pa.list_(pa.int8()))),
            "flag": pa.array(
                list(rng.integers(0, 2, (rows, 4)).astype(bool)), pa.list_(pa.bool_(), 4)
            ),
            "t": pa.ExtensionArray.from_storage(
                tensor_type,
                pa.FixedSizeListArray.from_arrays(
                    pa.array(rng.standard_normal(rows * 4).astype(np.float32)), 4
                ),
            ),
        }
    )


_DTYPES = {
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "f64": np.float64,
    "u8": np.uint8,
    "i8": np.int8,
    "flag": np.bool_,
    "t": np.float32,
}


def _pyarrow_oracle(table: pa.Table, name: str) -> NDArray:
    """The column read by pyarrow, as Python values (no zero-copy path), as an array."""
    col = table.column(name)
    if isinstance(col.type, pa.BaseExtensionType):
        col = pa.chunked_array([c.storage for c in col.chunks])
        shape = table.schema.field(name).type.shape
        return np.array(col.to_pylist(), _DTYPES[name]).reshape((len(col), *shape))
    return np.array(col.to_pylist(), _DTYPES[name])


def _check_all(out: Path, source: pa.Table) -> None:
    got = _output(out)
    assert sorted(got) == sorted(source.column_names)
    for name in source.column_names:
        _same(got[name], _pyarrow_oracle(source, name))


def test_from_parquet_every_value_of_every_dtype(tmp_path: Path) -> None:
    table = _mixed_table()
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=7)  # 8 row groups
    out = tmp_path / "ds"
    # chunks of one batch (chunk_mb tiny): many chunks, shards across row groups
    m = dataset.from_parquet(tmp_path / "in.parquet", out, batch_size=8, chunk_mb=1e-6)
    assert m.total_samples == ROWS
    assert [s.samples_count for s in m.shards] == [8] * 6 + [2]
    _check_all(out, pq.read_table(tmp_path / "in.parquet"))
    schema = dataset.open(out).manifest.sample_schema()
    assert schema["t"] == {"dtype": "F32", "shape": [2, 2]}  # the fixed_shape_tensor's shape
    assert schema["u8"] == {"dtype": "U8", "shape": [2, 3]}
    assert schema["flag"]["dtype"] == "BOOL" and schema["i64"]["shape"] == []
    # the default chunk size: one chunk, the same values
    dataset.from_parquet(tmp_path / "in.parquet", tmp_path / "ds2", batch_size=8)
    _check_all(tmp_path / "ds2", table)


def test_from_parquet_dtype_option_rounds_like_torch(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((20, 5)).astype(np.float32)
    pq.write_table(
        pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 5)}),
        tmp_path / "x.parquet",
    )
    dataset.from_parquet(tmp_path / "x.parquet", tmp_path / "ds", batch_size=6, dtype="BF16")
    got = _output(tmp_path / "ds")["x"]
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, torch.from_numpy(x).to(torch.bfloat16))


def test_from_parquet_a_folder_and_a_list_of_files(tmp_path: Path) -> None:
    tables = [_mixed_table(rows, seed) for seed, rows in enumerate((13, 1, 22))]
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, t in enumerate(tables):
        pq.write_table(t, folder / f"part-{i}.parquet", row_group_size=5)
    (folder / "_SUCCESS").write_text("")
    m = dataset.from_parquet(folder, tmp_path / "ds", batch_size=4, chunk_mb=1e-6)
    # the files are one stream of rows: only the last shard is short
    assert [s.samples_count for s in m.shards] == [4] * 9
    _check_all(tmp_path / "ds", pa.concat_tables(tables))
    files = [folder / "part-2.parquet", folder / "part-0.parquet"]
    dataset.from_parquet(files, tmp_path / "ds2", batch_size=4, columns=["f32", "t"])
    got = _output(tmp_path / "ds2")
    assert sorted(got) == ["f32", "t"]
    both = pa.concat_tables([tables[2], tables[0]])
    _same(got["f32"], _pyarrow_oracle(both, "f32"))


def test_from_parquet_empty_input(tmp_path: Path) -> None:
    empty = _mixed_table(0)
    pq.write_table(empty, tmp_path / "e.parquet")
    m = dataset.from_parquet(tmp_path / "e.parquet", tmp_path / "ds", batch_size=4)
    assert m.total_samples == 0 and m.shards == []
    assert sorted(m.columns) == sorted(empty.column_names)
    assert len(dataset.open(tmp_path / "ds")) == 0


def test_from_parquet_key_value_mode_append_and_fsspec(tmp_path: Path) -> None:
    keys = [f"k{i:03d}" for i in range(30)]
    x = np.arange(90, dtype=np.int32).reshape(30, 3)
    table = pa.table({"key": keys, "x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 3)})
    pq.write_table(table, tmp_path / "kv.parquet", row_group_size=8)
    dataset.from_parquet(tmp_path / "kv.parquet", tmp_path / "kv", name_col="key", chunk_mb=1e-6)
    with dataset.open(tmp_path / "kv") as ds:
        samples = {s["key"]: s["x"] for s in ds}
    assert sorted(samples) == keys
    for i, k in enumerate(keys):
        np.testing.assert_array_equal(samples[k], x[i])
    # batch mode, appended, into an fsspec URL
    url = f"memory://convert-{uuid.uuid4().hex}/ds"
    for _ in range(2):
        dataset.from_parquet(tmp_path / "kv.parquet", url, batch_size=7, columns="x", mode="append")
    with dataset.open(url) as ds:
        assert len(ds) == 60
        got = np.stack([s["x"] for s in ds])
    # (the manifest lists shards by name: the two appends' shards alternate)
    np.testing.assert_array_equal(
        got[np.argsort(got[:, 0], kind="stable")], np.repeat(x, 2, axis=0)
    )


def test_duplicate_keys_across_chunks(tmp_path: Path) -> None:
    table = pa.table({"key": ["a", "b", "a"], "x": pa.array([1.0, 2.0, 3.0])})
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(InvalidArgumentError, match="duplicate"):
        dataset.from_parquet(
            tmp_path / "dup.parquet", tmp_path / "kv", name_col="key", chunk_mb=1e-6
        )
    dataset.from_parquet(
        tmp_path / "dup.parquet",
        tmp_path / "kv",
        name_col="key",
        chunk_mb=1e-6,
        duplicatesStrategy="lastWin",
    )
    with dataset.open(tmp_path / "kv") as ds:
        assert {s["key"]: float(s["x"]) for s in ds} == {"a": 3.0, "b": 2.0}


# --------------------------------------------------------------------------- Hugging Face


def _hf(rows: int = 40) -> Any:
    import datasets

    datasets.disable_progress_bars()
    rng = np.random.default_rng(3)
    features = datasets.Features(
        {
            "img": datasets.Array2D((2, 3), "float32"),
            "emb": datasets.Sequence(datasets.Value("float16"), length=4),
            "ids": datasets.Sequence(datasets.Value("int64")),  # variable lists, one length
            "label": datasets.ClassLabel(names=["a", "b", "c"]),
            "ok": datasets.Value("bool"),
            "text": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "img": rng.standard_normal((rows, 2, 3)).astype(np.float32),
            "emb": rng.standard_normal((rows, 4)).astype(np.float16),
            "ids": rng.integers(0, 1 << 40, (rows, 2)),
            "label": rng.integers(0, 3, rows),
            "ok": rng.integers(0, 2, rows).astype(bool),
            "text": [f"row {i}" for i in range(rows)],
        },
        features=features,
    )


_HF_DTYPES = {
    "img": np.float32,
    "emb": np.float16,
    "ids": np.int64,
    "label": np.int64,
    "ok": np.bool_,
}
TENSORS = sorted(_HF_DTYPES)


def _check_hf(out: Path, hf: Any) -> None:
    got = _output(out)
    assert sorted(got) == TENSORS
    for name in TENSORS:
        _same(got[name], np.array(hf[name], _HF_DTYPES[name]))  # the values datasets gives


def test_from_hf_dataset_object_and_its_views(tmp_path: Path) -> None:
    hf = _hf()
    m = dataset.from_hf(hf, tmp_path / "ds", batch_size=16, columns=TENSORS, chunk_mb=1e-6)
    assert [s.samples_count for s in m.shards] == [16, 16, 8]
    _check_hf(tmp_path / "ds", hf)
    assert dataset.open(tmp_path / "ds").manifest.sample_schema()["img"]["shape"] == [2, 3]
    view = hf.shuffle(seed=5).select(range(25))  # an indices mapping: honoured
    dataset.from_hf(view, tmp_path / "view", batch_size=16, columns=TENSORS)
    _check_hf(tmp_path / "view", view)


def test_from_hf_dataset_dict_and_save_to_disk_folders(tmp_path: Path) -> None:
    import datasets

    hf = _hf()
    both = datasets.DatasetDict({"train": hf, "test": hf.select(range(10, 17))})
    with pytest.raises(InvalidArgumentError, match=r"splits \['train', 'test'\].*split="):
        dataset.from_hf(both, tmp_path / "x", batch_size=4, columns=TENSORS)
    dataset.from_hf(both, tmp_path / "test", split="test", batch_size=4, columns=TENSORS)
    _check_hf(tmp_path / "test", both["test"])
    hf.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    dataset.from_hf(tmp_path / "saved", tmp_path / "ds", batch_size=16, columns=TENSORS)
    _check_hf(tmp_path / "ds", hf)
    both.save_to_disk(str(tmp_path / "saved_dict"))
    dataset.from_hf(
        tmp_path / "saved_dict", tmp_path / "ds2", split="train", batch_size=16, columns=TENSORS
    )
    _check_hf(tmp_path / "ds2", hf)
    files = sorted((tmp_path / "saved").glob("*.arrow"))
    assert len(files) == 3
    dataset.from_hf(files, tmp_path / "ds3", batch_size=16, columns=TENSORS)
    _check_hf(tmp_path / "ds3", hf)


def test_from_hf_empty_and_text_columns(tmp_path: Path) -> None:
    hf = _hf().select([])
    m = dataset.from_hf(hf, tmp_path / "ds", batch_size=4, columns=TENSORS)
    assert m.total_samples == 0 and sorted(m.columns) == TENSORS
    with pytest.raises(InvalidArgumentError, match=r"column 'text'.*columns=.*name_col='text'"):
        dataset.from_hf(_hf(), tmp_path / "ds2", batch_size=4)
    assert not (tmp_path / "ds2").exists()  # refused before anything was written
    dataset.from_hf(_hf(8), tmp_path / "kv", name_col="text", columns=["emb"])
    with dataset.open(tmp_path / "kv") as ds:
        assert [s["key"] for s in ds] == [f"row {i}" for i in range(8)]


def test_from_hf_iterable_dataset(tmp_path: Path) -> None:
    import datasets

    hf = _hf()
    stream = hf.to_iterable_dataset(num_shards=3)  # read as it streams, shard after shard
    dataset.from_hf(stream, tmp_path / "ds", batch_size=16, columns=TENSORS, chunk_mb=1e-6)
    _check_hf(tmp_path / "ds", hf)
    both = datasets.IterableDatasetDict({"train": stream, "test": stream.take(5)})
    dataset.from_hf(both, tmp_path / "test", split="test", batch_size=4, columns=TENSORS)
    _check_hf(tmp_path / "test", hf.select(range(5)))

    def rows() -> Any:
        yield {"x": [1.0, 2.0]}

    untyped = datasets.IterableDataset.from_generator(rows)
    with pytest.raises(InvalidArgumentError, match="IterableDataset has no features"):
        dataset.from_hf(untyped, tmp_path / "x", batch_size=4)
    # rows that do not match the features they claim: refused, not a raw pyarrow error
    lying = stream.map(lambda r: {"emb": [1.0] * 3}, features=stream.features)
    with pytest.raises(FormatError, match="IterableDataset is not a readable Hugging Face"):
        dataset.from_hf(lying, tmp_path / "y", batch_size=4, columns=TENSORS)


# --------------------------------------------------------------------------- hostile inputs


@pytest.fixture
def previous(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A dataset already at the output path, and a snapshot of its files."""
    out = tmp_path / "out"
    dataset.write({"x": np.ones((5, 2), np.float32)}, out, batch_size=2)
    return out, snapshot(out)


def _refused(
    exc_type: type[TensorFileError], match: str, call: Any, previous: tuple[Path, dict[str, str]]
) -> str:
    out, before = previous
    with pytest.raises(exc_type, match=match) as info:
        call(out)
    assert not isinstance(info.value, pa.ArrowException)
    assert snapshot(out) == before  # the previous dataset, untouched, no staging left
    return str(info.value)


def _fsl(values: NDArray, width: int) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), width)


def test_missing_and_corrupt_parquet_files(
    tmp_path: Path, previous: tuple[Path, dict[str, str]]
) -> None:
    missing = tmp_path / "nope.parquet"
    _refused(
        SourceNotFoundError,
        "nope.parquet",
        lambda o: dataset.from_parquet(missing, o, batch_size=2),
        previous,
    )
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)  # never opened (reading it would wait for a writer)
    _refused(
        SourceError,
        "fifo.parquet is not a regular file",
        lambda o: dataset.from_parquet(fifo, o, batch_size=2),
        previous,
    )
    parts = tmp_path / "partitioned"
    (parts / "year=2024").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1.0]}), parts / "year=2024" / "p.parquet")
    pq.write_table(pa.table({"x": [1.0]}), parts / "p.parquet")
    _refused(
        InvalidArgumentError,
        r"sub-folders \(year=2024\)",
        lambda o: dataset.from_parquet(parts, o, batch_size=2),
        previous,
    )
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1" + os.urandom(200))
    _refused(
        FormatError,
        "garbage.parquet",
        lambda o: dataset.from_parquet(garbage, o, batch_size=2),
        previous,
    )
    # a readable footer, a corrupt page in the third row group: found while streaming
    x = np.arange(300, dtype=np.float32).reshape(100, 3)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"x": _fsl(x, 3)}), bad, row_group_size=20, compression="snappy")
    offset = pq.ParquetFile(bad).metadata.row_group(2).column(0).data_page_offset
    raw = bytearray(bad.read_bytes())
    raw[offset : offset + 40] = b"\xff" * 40
    bad.write_bytes(bytes(raw))
    msg = _refused(
        FormatError,
        "bad.parquet",
        lambda o: dataset.from_parquet(bad, o, batch_size=8, chunk_mb=1e-6),
        previous,
    )
    assert "after 40 rows" in msg


def test_truncated_arrow_file(tmp_path: Path, previous: tuple[Path, dict[str, str]]) -> None:
    hf = _hf(200)
    hf.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    last = sorted((tmp_path / "saved").glob("*.arrow"))[-1]
    raw = last.read_bytes()
    last.write_bytes(raw[: len(raw) // 2])
    _refused(
        FormatError,
        last.name,
        lambda o: dataset.from_hf(tmp_path / "saved", o, batch_size=8, columns=TENSORS),
        previous,
    )
    (tmp_path / "saved" / "state.json").write_text('{"_data_files": [{"filename": "../x.arrow"}]}')
    _refused(
        FormatError,
        "not a file name",
        lambda o: dataset.from_hf(tmp_path / "saved", o, batch_size=8),
        previous,
    )


def test_nulls_ragged_rows_and_other_types(
    tmp_path: Path, previous: tuple[Path, dict[str, str]]
) -> None:
    good = np.arange(60, dtype=np.float32).reshape(20, 3)
    pq.write_table(pa.table({"x": _fsl(good, 3)}), tmp_path / "a.parquet")
    values = [list(map(float, r)) for r in good]
    values[13] = None
    pq.write_table(
        pa.table({"x": pa.array(values, pa.list_(pa.float32(), 3))}),
        tmp_path / "b.parquet",
        row_group_size=4,
    )
    both = [tmp_path / "a.parquet", tmp_path / "b.parquet"]

    def convert(o: Path) -> Any:
        return dataset.from_parquet(both, o, batch_size=8, chunk_mb=1e-6)

    _refused(InvalidArgumentError, r"b\.parquet, row 13: column 'x' has a null$", convert, previous)
    with pytest.raises(InvalidArgumentError, match="has a null"):
        convert(tmp_path / "fresh" / "ds")
    assert not (tmp_path / "fresh" / "ds").exists()  # the folder it made is gone again
    inner = [list(map(float, r)) for r in good]
    inner[6][1] = None
    pq.write_table(pa.table({"x": pa.array(inner, pa.list_(pa.float32()))}), tmp_path / "c.parquet")
    _refused(
        InvalidArgumentError,
        r"c\.parquet, row 6: column 'x' has a null inside a sample",
        lambda o: dataset.from_parquet(tmp_path / "c.parquet", o, batch_size=8),
        previous,
    )
    ragged = [list(map(float, r)) for r in good]
    ragged[17] = ragged[17][:2]
    pq.write_table(
        pa.table({"x": pa.array(ragged, pa.list_(pa.float32()))}),
        tmp_path / "d.parquet",
        row_group_size=5,
    )
    _refused(
        InvalidArgumentError,
        r"d\.parquet, row 17: column 'x' has a list of 2 values where the first row has 3; .*pad",
        lambda o: dataset.from_parquet(tmp_path / "d.parquet", o, batch_size=8, chunk_mb=1e-6),
        previous,
    )
    stamps = pa.table(
        {"when": pa.array(np.arange(4).astype("datetime64[s]")), "x": pa.array([1, 2, 3, 4])}
    )
    pq.write_table(stamps, tmp_path / "e.parquet")
    _refused(
        InvalidArgumentError,
        r"column 'when' has the Arrow type timestamp",
        lambda o: dataset.from_parquet(tmp_path / "e.parquet", o, batch_size=2),
        previous,
    )
    pq.write_table(pa.table({"x": pa.array([1.0, 2.0])}), tmp_path / "f.parquet")
    _refused(
        InvalidArgumentError,
        r"f\.parquet: column 'x' is double, the first input file's is fixed_size_list",
        lambda o: dataset.from_parquet(
            [tmp_path / "a.parquet", tmp_path / "f.parquet"], o, batch_size=2
        ),
        previous,
    )
    _refused(
        InvalidArgumentError,
        r"column\(s\) 'y' do not exist",
        lambda o: dataset.from_parquet(tmp_path / "a.parquet", o, batch_size=2, columns=["y"]),
        previous,
    )


# --------------------------------------------------------------------------- memory


_CHILD = textwrap.dedent(
    """
    import sys, tracemalloc
    import pyarrow as pa, pyarrow.parquet as pq
    from tensorfile import dataset
    tiny = sys.argv[2] + "-tiny.parquet"
    pq.write_table(pa.table({"x": pa.array([1.0])}), tiny)
    tracemalloc.start()
    dataset.from_parquet(tiny, sys.argv[2] + "-tiny", batch_size=1)  # (imports done)
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    m = dataset.from_parquet(sys.argv[1], sys.argv[2], batch_size=64, chunk_mb=1)
    peak = tracemalloc.get_traced_memory()[1] - base
    print(m.total_samples, peak, pa.default_memory_pool().max_memory())
    """
)


def test_memory_stays_bounded_by_the_chunk_not_the_input(tmp_path: Path) -> None:
    """A 32 MiB parquet file converted in chunks of 1 MiB: the peak of numpy's and Arrow's
    allocations (tracemalloc; Arrow's memory pool) stays far below the input's size."""
    rows, width = 8192, 1024
    path = tmp_path / "big.parquet"
    schema = pa.schema({"x": pa.list_(pa.float32(), width)})
    with pq.ParquetWriter(path, schema, compression="none", use_dictionary=False) as w:
        for start in range(0, rows, 1024):
            x = np.full((1024, width), start, np.float32)
            w.write_table(pa.table({"x": _fsl(x, width)}), row_group_size=256)
    nbytes = rows * width * 4
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(tmp_path / "ds")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    total, numpy_peak, arrow_peak = map(int, got.stdout.split())
    assert total == rows
    assert numpy_peak + arrow_peak < nbytes / 4, (numpy_peak, arrow_peak, nbytes)
    first = safetensors.torch.load_file(sorted((tmp_path / "ds").glob("*.safetensors"))[0])
    assert first["x"].shape == (64, width)


# --------------------------------------------------------------------------- CLI


def test_cli_dataset_from_parquet_and_from_hf(tmp_path: Path, capsys: Any) -> None:
    from tests.helpers.cli import ERROR_PREFIX, run

    table = _mixed_table()
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=9)
    r = run(
        capsys,
        "dataset",
        "from-parquet",
        tmp_path / "in.parquet",
        tmp_path / "ds",
        "--batch-size",
        "16",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["samples"] == ROWS and doc["shards"] == 4
    assert doc["columns"]["t"] == {"dtype": "F32", "shape": [2, 2]}
    _check_all(tmp_path / "ds", table)
    _hf().save_to_disk(str(tmp_path / "saved"), num_shards=2)
    r = run(
        capsys,
        "dataset",
        "from-hf",
        tmp_path / "saved",
        tmp_path / "hf",
        "--batch-size",
        "8",
        "--columns",
        ",".join(TENSORS),
    )
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == f"wrote 40 samples in 5 shards to {tmp_path / 'hf'}"
    _check_hf(tmp_path / "hf", _hf())
    before = snapshot(tmp_path / "hf")
    r = run(capsys, "dataset", "from-hf", tmp_path / "saved", tmp_path / "hf", "--batch-size", "8")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(ERROR_PREFIX) and "column 'text'" in r.err
    assert snapshot(tmp_path / "hf") == before


def test_files_with_columns_in_another_order(
    tmp_path: Path, previous: tuple[Path, dict[str, str]]
) -> None:
    x = np.arange(12, dtype=np.int64).reshape(6, 2) * 60
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"x": _fsl(x[:3], 2), "y": pa.array([1, 2, 3])}), a)
    schema = pa.schema(
        [pa.field("y", pa.int64(), nullable=False), pa.field("x", pa.list_(pa.int64(), 2))]
    )
    pq.write_table(pa.table({"y": [4, 5, 6], "x": _fsl(x[3:], 2)}, schema=schema), b)
    dataset.from_parquet([a, b], tmp_path / "ds", batch_size=4)
    got = _output(tmp_path / "ds")
    _same(got["x"], x)
    _same(got["y"], np.arange(1, 7))
    # the writer's own checks name where the chunk starts
    _refused(
        InvalidArgumentError,
        r"a\.parquet, row 0 \(in the chunk of 6 rows from there\): "
        r"column 'x': values 0\.\.660 do not fit U8",
        lambda o: dataset.from_parquet([a, b], o, batch_size=4, dtype="U8"),
        previous,
    )


def test_batches_that_contradict_their_schema(previous: tuple[Path, dict[str, str]]) -> None:
    from tensorfile.dataset.writing.arrow_stream import Input, write_arrow

    # an extension type inside a list: refused from the schema
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (2,))
    storage = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0], pa.float32()), 2)
    tensors = pa.ExtensionArray.from_storage(tensor_type, storage)
    nested = pa.record_batch({"x": pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), tensors)})
    item = Input("nested", nested.schema, lambda rows: iter([nested]))
    _refused(
        InvalidArgumentError,
        r"column 'x' has the Arrow type list<item: extension<arrow.fixed_shape_tensor",
        lambda o: write_arrow([item], o, what="table", batch_size=2),
        previous,
    )
    schema = pa.schema({"x": pa.float32()})
    for batch, match in (
        (pa.record_batch({"x": pa.array([1, 2])}), r"lie, row 0: column 'x' is int64 here, float"),
        (pa.record_batch({"y": pa.array([1.0])}), r"lie, row 0: the rows lack the column 'x'"),
    ):
        item = Input("lie", schema, lambda rows, b=batch: iter([b]))
        _refused(
            InvalidArgumentError,
            match,
            lambda o, i=item: write_arrow([i], o, what="table", batch_size=2),
            previous,
        )


_NUMPY = (np.float32, np.float16, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(0, 40),
    shape=st.lists(st.integers(1, 3), max_size=3),
    kind=st.sampled_from(["fixed", "list", "tensor"]),
    dtype=st.sampled_from(_NUMPY),
    batch=st.integers(1, 9),
    group=st.integers(1, 12),
    chunk=st.sampled_from([1e-6, 16.0]),
    tail=st.sampled_from(["write", "drop", "pad"]),
    seed=st.integers(0, 2**16),
)
def test_any_shape_dtype_and_cut_round_trips(
    tmp_path_factory: pytest.TempPathFactory,
    rows: int,
    shape: list[int],
    kind: str,
    dtype: Any,
    batch: int,
    group: int,
    chunk: float,
    tail: str,
    seed: int,
) -> None:
    """Whatever the sample shape, the list type that holds it, the dtype, the row groups, the
    batch, the tail and the chunk size: the shards hold the file's rows, in order."""
    tmp = tmp_path_factory.mktemp("prop")
    x = (np.random.default_rng(seed).integers(0, 100, (rows, *shape)) % 2**7).astype(dtype)
    arr: pa.Array = pa.array(x.reshape(-1))
    if kind == "tensor" and shape:
        typ = pa.fixed_shape_tensor(arr.type, shape)
        storage = pa.FixedSizeListArray.from_arrays(arr, int(np.prod(shape)))
        arr = pa.ExtensionArray.from_storage(typ, storage)
    else:
        for n in reversed(shape):  # innermost dimension first
            if kind == "fixed":
                arr = pa.FixedSizeListArray.from_arrays(arr, n)
            else:
                arr = pa.ListArray.from_arrays(
                    pa.array(np.arange(0, len(arr) + 1, n, dtype=np.int32)), arr
                )
    pq.write_table(pa.table({"x": arr}), tmp / "in.parquet", row_group_size=group)
    m = dataset.from_parquet(
        tmp / "in.parquet", tmp / "ds", batch_size=batch, chunk_mb=chunk, tail_strategy=tail
    )
    kept = rows - rows % batch if tail == "drop" else rows
    want = x[:kept]
    if tail == "pad" and rows % batch:
        want = np.concatenate([x, np.zeros((batch - rows % batch, *shape), dtype)])
    assert m.real_total == kept
    got = _output(tmp / "ds")
    if want.size or len(want):
        _same(got["x"], want)
    else:
        assert "x" not in got or got["x"].numel() == 0
