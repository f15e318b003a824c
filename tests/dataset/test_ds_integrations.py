"""Arrow, Hugging Face datasets, Ray Data and Dask give back exactly the written values, for
batch and key-value datasets, tested with the real libraries.

BF16 follows the documented policy: widened to float32 (exact: every bfloat16 is a float32),
or with ``low_precision="binary"`` kept as the stored bytes with the dtype in the field
metadata; Dask keeps the stored dtype (ml_dtypes' bfloat16).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pyarrow as pa
import pytest

from tensorfile import dataset
from tensorfile.errors import InvalidArgumentError

N = 23


def _batch_data() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "id": np.arange(N, dtype=np.int64),
        "img": rng.standard_normal((N, 2, 3, 4)).astype(np.float32),
        "vec": rng.standard_normal((N, 5)).astype(np.float32),
        "flag": (np.arange(N) % 3 == 0),
        "small": np.arange(N, dtype=np.uint16),
    }


@pytest.fixture(scope="module")
def batch_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("int") / "batch")
    dataset.write(
        _batch_data(), out, batch_size=5, shapes={"img": [2, 3, 4], "vec": [5]}, dtype="BF16"
    )
    return out


@pytest.fixture(scope="module")
def kv_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("int") / "kv")
    keys = [f"doc{i:02d}" for i in range(12)]
    dataset.write(
        {"doc": keys, "emb": np.arange(36, dtype=np.float32).reshape(12, 3)},
        out,
        name_col="doc",
        target_shard_size_mb=0.0005,
    )
    return out


def _bf16(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The float32 values a BF16 column holds after the write (round to nearest even)."""
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _expected() -> dict[str, Any]:
    d = _batch_data()
    return {
        "id": d["id"],
        "img": _bf16(d["img"]),
        "vec": _bf16(d["vec"]),
        "flag": d["flag"],
        "small": d["small"],
    }


def test_to_arrow_batch(batch_ds: str) -> None:
    t = dataset.open(batch_ds).to_arrow()
    want = _expected()
    assert t.num_rows == N
    assert t.schema.field("img").type == pa.list_(pa.list_(pa.list_(pa.float32(), 4), 3), 2)
    assert t.schema.field("small").type == pa.uint16()
    for c, v in want.items():
        got = np.array(t.column(c).to_pylist())
        assert got.shape == v.shape and np.array_equal(got, v), c


def test_iter_arrow_streams_and_binary_policy(batch_ds: str) -> None:
    ds = dataset.open(batch_ds)
    batches = list(ds.iter_arrow(7, columns=["id", "vec"]))
    assert [b.num_rows for b in batches] == [7, 7, 7, 2]
    assert batches[0].schema.names == ["id", "vec"]
    ids = np.concatenate([b.column("id").to_numpy() for b in batches])
    assert ids.tolist() == list(range(N))
    t = ds.to_arrow(["vec"], low_precision="binary")
    field = t.schema.field("vec")
    assert field.metadata[b"tensorfile.dtype"] == b"BF16"
    assert json.loads(field.metadata[b"tensorfile.shape"]) == [5]
    back = np.stack(
        [np.frombuffer(v, ml_dtypes.bfloat16).reshape(5) for v in t.column("vec").to_pylist()]
    )
    assert np.array_equal(back.astype(np.float32), _expected()["vec"])
    with pytest.raises(InvalidArgumentError):
        ds.to_arrow(low_precision="float16")
    with pytest.raises(InvalidArgumentError):
        ds.to_arrow(["nope"])
    with pytest.raises(InvalidArgumentError):
        list(ds.iter_arrow(0))


def test_arrow_kv(kv_ds: str) -> None:
    t = dataset.open(kv_ds).to_arrow()
    assert t.schema.names == ["doc", "emb"]
    rows = sorted(zip(t.column("doc").to_pylist(), t.column("emb").to_pylist(), strict=True))
    assert rows == [(f"doc{i:02d}", [3.0 * i, 3.0 * i + 1, 3.0 * i + 2]) for i in range(12)]


def test_to_hf_features_and_values(batch_ds: str, kv_ds: str, tmp_path: Path) -> None:
    import datasets

    from tensorfile.dataset.hf import to_hf

    h = to_hf(dataset.open(batch_ds), cache_dir=str(tmp_path / "cache"))
    assert isinstance(h, datasets.Dataset)
    f = h.features
    assert isinstance(f["img"], datasets.Array3D) and f["img"].shape == (2, 3, 4)
    assert f["vec"].length == 5 and f["id"].dtype == "int64" and f["flag"].dtype == "bool"
    h.set_format("numpy")
    want = _expected()
    for c, v in want.items():
        assert np.array_equal(np.asarray(h[c]), v), c
    # the method takes the cache folder too (it went to ~/.cache/huggingface before)
    cache = tmp_path / "method-cache"
    assert len(dataset.open(batch_ds).to_hf(cache_dir=str(cache))) == len(h)
    assert any(cache.iterdir())
    stream = dataset.open(kv_ds).to_hf(streaming=True)
    assert isinstance(stream, datasets.IterableDataset)
    got = sorted((r["doc"], list(r["emb"])) for r in stream)
    assert got == [(f"doc{i:02d}", [3.0 * i, 3.0 * i + 1, 3.0 * i + 2]) for i in range(12)]


def test_to_dask_lazy_chunks_per_shard(batch_ds: str, kv_ds: str) -> None:
    ds = dataset.open(batch_ds)
    arrays = ds.to_dask()
    assert arrays["img"].chunks[0] == (5, 5, 5, 5, 3)
    assert arrays["img"].dtype == ml_dtypes.bfloat16  # the stored dtype, exact
    want = _expected()
    for c, v in want.items():
        got = arrays[c].compute()
        assert np.array_equal(np.asarray(got, dtype=v.dtype), v), c
    assert float(arrays["vec"][7:9].astype(np.float32).sum().compute()) == pytest.approx(
        float(want["vec"][7:9].sum()), rel=1e-6
    )
    kv = dataset.open(kv_ds).to_dask()
    keys = kv["doc"].compute().tolist()
    emb = kv["emb"].compute()
    assert sorted(zip(keys, emb.tolist(), strict=True)) == [
        (f"doc{i:02d}", [3.0 * i, 3.0 * i + 1, 3.0 * i + 2]) for i in range(12)
    ]


@pytest.fixture(scope="module")
def ray_session() -> Any:
    import ray

    # ray keeps each session's logs and sockets in its temporary folder (/tmp/ray unless
    # told, never removed): a short one (its sockets' paths must fit 107 bytes), removed after
    folder = tempfile.mkdtemp(prefix="tf-ray-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             _temp_dir=folder)  # fmt: skip
    yield ray
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)


def test_to_ray(ray_session: Any, batch_ds: str, kv_ds: str) -> None:
    ds = dataset.open(batch_ds)
    r = ds.to_ray()
    assert r.count() == N
    rows = sorted(r.take_all(), key=lambda row: int(row["id"]))
    want = _expected()
    assert [int(row["id"]) for row in rows] == list(range(N))
    assert np.array_equal(np.stack([np.asarray(row["vec"]) for row in rows]), want["vec"])
    assert np.array_equal(np.stack([np.asarray(row["img"]) for row in rows]), want["img"])
    import ray.data

    from tensorfile.dataset.ray import SafetensorsDatasource

    kv = ray.data.read_datasource(SafetensorsDatasource(kv_ds, columns=["emb"]))
    got = sorted((row["doc"], list(row["emb"])) for row in kv.take_all())
    assert got == [(f"doc{i:02d}", [3.0 * i, 3.0 * i + 1, 3.0 * i + 2]) for i in range(12)]
