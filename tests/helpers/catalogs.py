"""Catalogs built by hand, for tests of the operations (a format reader refuses what some
tests need: a lone surrogate, say)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
from tensorfile.core.dtypes import from_name


def tensor(name: str, dtype: str = "F32", shape: tuple[int, ...] = (2,)) -> TensorInfo:
    """A dense tensor at offset 0."""
    dt = from_name(dtype)
    n = 1
    for d in shape:
        n *= d
    return TensorInfo(name, dt, shape, {"data": Component(ByteRange(0, dt.nbytes(n)), dt)})


def catalog(
    fmt: str = "safetensors",
    path: str = "built",
    version: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tensors: Iterable[TensorInfo] = (),
) -> Catalog:
    """A catalog of ``tensors``."""
    return Catalog(
        fmt, dict(metadata or {}), {t.name: t for t in tensors}, 0, 0, version, path=path
    )
