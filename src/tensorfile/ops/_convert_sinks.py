"""What :func:`tensorfile.convert` writes: safetensors (one file or shards), zTensor v1.0
and v2, numpy ``.npz``. Each sink writes atomically (a temporary file renamed into place)
and takes one tensor at a time."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.atomic import AtomicFile
from ..core.errors import InvalidArgumentError, SourceError, UnsupportedError
from ._convert_sources import Item, iter_json

__all__ = ["write_npz", "write_safetensors", "write_sharded", "write_ztensor"]

Get = Callable[[str], Any]
Tick = Callable[[Item], None]


def _dense(item: Item, value: Any, densify: bool, dst_format: str) -> np.ndarray[Any, Any]:
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


def _dense_items(items: list[Item]) -> list[Item]:
    return [i if i.layout in ("dense",) else Item(i.name, i.dtype, i.shape) for i in items]


def write_safetensors(
    dst: str, items: list[Item], get: Get, metadata: Mapping[str, Any], densify: bool, tick: Tick
) -> None:
    """One safetensors file, header first (every tensor's place is known), then the data."""
    from tensorfile.formats.safetensors._writer import StreamWriter

    specs = {i.name: (i.dtype.name, i.shape) for i in _dense_items(items)}
    meta = dict(iter_json(metadata)) or None
    with StreamWriter(dst, specs, meta) as w:
        for item in items:
            w.write(item.name, _dense(item, get(item.name), densify, "safetensors"))
            tick(item)


def write_sharded(
    dst: str,
    items: list[Item],
    get: Get,
    metadata: Mapping[str, Any],
    densify: bool,
    tick: Tick,
    max_bytes: int,
) -> list[str]:
    """A sharded checkpoint in the folder ``dst``, as huggingface_hub lays it out (see
    :mod:`tensorfile.formats.safetensors._sharded`: the index written last)."""
    from tensorfile.formats.safetensors._sharded import write_sharded as write

    by_name = {i.name: i for i in items}
    entries = [(i.name, i.dtype.name, i.shape) for i in _dense_items(items)]
    return write(
        entries,
        lambda n: _dense(by_name[n], get(n), densify, "safetensors"),
        dst,
        max_shard_size=max_bytes,
        metadata=dict(iter_json(metadata)),
        tick=lambda n: tick(by_name[n]),
    )


def write_ztensor(
    dst: str,
    items: list[Item],
    get: Get,
    metadata: Mapping[str, Any],
    tick: Tick,
    *,
    version: int,
    options: dict[str, Any],
) -> None:
    """A zTensor file (v1.0 or v2); sparse tensors keep their layout."""
    from ..ztensor import Writer

    if version == 1:
        attributes: dict[str, Any] = dict(iter_json(metadata))
    else:
        attributes = {k: v for k, v in metadata.items() if _cbor_value(v)}
        attributes.update({k: v for k, v in iter_json(metadata) if k not in attributes})
    with Writer(dst, version=version, attributes=attributes, **options) as w:
        for item in items:
            w.add(item.name, get(item.name))
            tick(item)


def _cbor_value(value: Any) -> bool:
    if isinstance(value, str | int | float | bool) or value is None:
        return True
    if isinstance(value, list):
        return all(_cbor_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _cbor_value(v) for k, v in value.items())
    return False


def write_npz(dst: str, items: list[Item], get: Get, densify: bool, tick: Tick) -> None:
    """A numpy ``.npz`` archive, member by member (not compressed, as ``np.savez``)."""
    for item in items:  # before anything is written
        if _needs_pickle(item.dtype.numpy):
            raise UnsupportedError(
                f"tensor {item.name!r} is {item.dtype.name}, which .npy cannot hold without pickle"
            )
    out = AtomicFile(dst)
    try:
        with os.fdopen(os.dup(out.fd), "wb") as f, zipfile.ZipFile(f, "w") as zf:
            for item in items:
                arr = _dense(item, get(item.name), densify, "npz")
                with zf.open(item.name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
                tick(item)
        out.commit()
    except OSError as exc:
        out.abort()
        raise SourceError(f"cannot write {dst}: {exc}") from exc
    except BaseException:
        out.abort()
        raise


def _needs_pickle(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "V" or dtype.type.__module__.startswith("ml_dtypes")


def check_options_for(fmt: str, options: Mapping[str, Any]) -> None:
    """Refuse options that the output format does not have."""
    allowed = {
        "safetensors": {"shard_size"},
        "npz": set(),
        "zt": {"compression", "level", "checksum"},
        "zt2": {"compression", "level", "checksum", "align"},
    }[fmt]
    for key, value in options.items():
        if value is not None and key not in allowed:
            raise InvalidArgumentError(f"{key.replace('_', '-')} does not apply to {fmt} output")
    checksum = options.get("checksum")
    if checksum is not None:
        ok = {"zt": ("crc32c", "sha256"), "zt2": ("xxh3", "sha256")}[fmt]
        if checksum not in ok:
            raise InvalidArgumentError(
                f"checksum {checksum!r} is not a {fmt} digest (choose {' or '.join(ok)})"
            )
    if options.get("compression") not in (None, "zstd"):
        raise InvalidArgumentError(f"compression {options['compression']!r}: only zstd")
