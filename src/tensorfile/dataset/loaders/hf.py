"""A dataset as a Hugging Face ``datasets.Dataset`` (or ``IterableDataset``): features that
match the schema, values exactly as written (BF16 and F8 widened to float32, exactly).

Fixed-shape samples get the matching feature: a scalar ``Value``, a 1-D sample
``Sequence(Value, length=n)``, 2-D to 5-D samples ``Array2D``...``Array5D`` with their
shape, more dimensions nested ``Sequence``s; a KV dataset's key column is a ``Value("string")``.
``datasets`` is imported only here.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.ones((4, 2, 3), np.float32)}, out, batch_size=2)
    >>> h = to_hf(dataset.open(out), cache_dir=tempfile.mkdtemp())
    >>> h.num_rows, h.features["x"].shape
    (4, (2, 3))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..layout.manifest import load_manifest
from ..layout.storage import storage_for
from .arrow import iter_arrow

__all__ = ["features_of", "to_hf"]

_VALUE = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
}


def features_of(manifest: Any, columns: Sequence[str] | None = None) -> Any:
    """The ``datasets.Features`` of the samples of ``manifest``."""
    import datasets

    sample = manifest.sample_schema()
    out: dict[str, Any] = {}
    if manifest.mode == "kv":
        out[manifest.name_col or "key"] = datasets.Value("string")
    for c in columns or manifest.tensor_columns():
        value = _VALUE.get(sample[c]["dtype"], "float32")
        shape = tuple(sample[c]["shape"])
        if not shape:
            out[c] = datasets.Value(value)
        elif len(shape) == 1:
            out[c] = datasets.Sequence(datasets.Value(value), length=shape[0])
        elif len(shape) <= 5:
            kind = {2: datasets.Array2D, 3: datasets.Array3D, 4: datasets.Array4D}.get(
                len(shape), datasets.Array5D
            )
            out[c] = kind(shape=shape, dtype=value)
        else:
            feature: Any = datasets.Value(value)
            for n in reversed(shape):
                feature = datasets.Sequence(feature, length=n)
            out[c] = feature
    return datasets.Features(out)


def _rows(location: Any, columns: list[str] | None) -> Iterator[dict[str, Any]]:
    store = storage_for(location)
    located = SimpleNamespace(storage=store, manifest=load_manifest(store, strict=True))
    for batch in iter_arrow(located, 1024, columns):
        for row in batch.to_pylist():
            yield {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in row.items()}


def to_hf(
    ds: Any,
    *,
    streaming: bool = False,
    columns: Sequence[str] | None = None,
    cache_dir: str | None = None,
) -> Any:
    """``datasets.Dataset`` of every sample (written into the ``datasets`` cache, shard by
    shard: memory stays bounded), or with ``streaming`` an ``IterableDataset`` that reads the
    shards as it is iterated."""
    import datasets

    features = features_of(ds.manifest, columns)
    kwargs = {"location": ds.storage, "columns": list(columns) if columns else None}
    if streaming:
        return datasets.IterableDataset.from_generator(_rows, features=features, gen_kwargs=kwargs)
    return datasets.Dataset.from_generator(
        _rows, features=features, gen_kwargs=kwargs, cache_dir=cache_dir
    )
