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

__all__ = ["SPARSE", "check_writable", "write"]

Get = Callable[[str], Any]
Tick = Callable[[Item], None]


SPARSE = ("sparse_csr", "sparse_coo")
"""The sparse layouts a source gives (zTensor's, torch's): kept by a format with sparse
layouts, made dense for the others with ``densify``."""


def check_writable(fmt: Format, items: list[Item], densify: bool, dst_format: str) -> None:
    """Refuse, before anything is written or allocated, a tensor whose layout ``fmt``
    cannot hold: a sparse one without ``densify`` where the format has no sparse layout,
    and an extension layout (zTensor's, which tensorfile reads as its raw parts only)."""
    for item in items:
        if item.layout == "dense" or (item.layout in SPARSE and (fmt.sparse or densify)):
            continue
        if item.layout in SPARSE:
            raise UnsupportedError(
                f"tensor {item.name!r} is sparse ({item.layout}); {dst_format} has no sparse "
                "layout: pass --densify (densify=True) to store it dense"
            )
        raise UnsupportedError(
            f"tensor {item.name!r} has the extension layout {item.layout!r}, which tensorfile "
            "does not interpret: it reads such an object only as its raw parts "
            f"(tensorfile.open(src).get_tensor({item.name!r}) gives an ExtensionTensor with "
            f"each part's bytes), and cannot convert it to {dst_format} or any other format; "
            "the tool that wrote the layout may"
        )


def _dense(item: Item, value: Any, dst_format: str) -> Any:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "to_dense"):  # (check_writable let it through: densify)
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
    check_writable(fmt, items, densify, label)
    by_name = {i.name: i for i in items}
    specs = [
        TensorSpec(i.name, i.dtype, i.shape, i.layout if fmt.sparse else "dense") for i in items
    ]

    def value(name: str) -> Any:
        found = get(name)
        return found if fmt.sparse else _dense(by_name[name], found, label)

    return fmt.save(dst, specs, value, metadata, tick=lambda n: tick(by_name[n]), **options)
