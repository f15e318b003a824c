"""What :func:`tensorfile.convert` writes: whatever a registry entry writes
(:meth:`tensorfile.formats.Format.save`), one tensor at a time. Here only what is
convert's own: sparse tensors made dense (with ``densify``) for a format without sparse
layouts, and the progress ticks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.errors import UnsupportedError
from ..formats import Format, TensorSpec
from ._convert_sources import Item

__all__ = ["write"]

Get = Callable[[str], Any]
Tick = Callable[[Item], None]


def _dense(item: Item, value: Any, densify: bool, dst_format: str) -> Any:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "to_dense"):
        if not densify:
            raise UnsupportedError(
                f"tensor {item.name!r} is sparse ({item.layout}); {dst_format} has no sparse "
                "layout: pass --densify (densify=True) to store it dense"
            )
        return np.ascontiguousarray(value.to_dense())
    raise UnsupportedError(
        f"tensor {item.name!r} ({item.layout}) cannot be written to {dst_format}"
    )


def write(
    fmt: Format,
    dst: str,
    items: list[Item],
    get: Get,
    metadata: Mapping[str, Any],
    *,
    densify: bool,
    tick: Tick,
    options: Mapping[str, Any],
    label: str,
) -> list[str]:
    """Write ``items`` to ``dst`` in ``fmt`` with ``options`` (already checked); the files
    written. ``label`` is the destination's name in messages (``zt2``, ``npz``...)."""
    by_name = {i.name: i for i in items}
    specs = [
        TensorSpec(i.name, i.dtype, i.shape, i.layout if fmt.sparse else "dense") for i in items
    ]

    def value(name: str) -> Any:
        found = get(name)
        return found if fmt.sparse else _dense(by_name[name], found, densify, label)

    return fmt.save(dst, specs, value, metadata, tick=lambda n: tick(by_name[n]), **options)
