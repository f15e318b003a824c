"""The zTensor format's registry hooks for both containers: v1.0 (magic ``ZTEN1000``) and v2
(magic ``89 5A 54 32 0D 0A 1A 0A``), told apart by the first bytes of the file, here and
only here (:func:`is_v2`): the registry's hooks and the public :func:`open` and
:func:`load_file` all go through :func:`open_any`.

The writer side (:func:`save`) writes v1.0 unless ``version=2``; options ``compression``
(``"zstd"``), ``level``, ``checksum`` (v1.0: ``crc32c``/``sha256``; v2: ``xxh3``/``sha256``)
and, for v2, ``align``. Sparse tensors keep their layout. v1.0 attributes are text (other
values become JSON text); v2 keeps any CBOR value.

For v2 files, :func:`edit_metadata` rewrites the manifest with the new attributes: the
bytes before the manifest are kept (cloned where the file system can), the new manifest
takes the old one's place and a new footer follows, and the new file is renamed over the
old one. An attribute the change leaves as the text it was keeps its original CBOR value
(a number stays a number); a new or changed one is written as text.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> ztensor.save_file({"w": np.zeros(2, np.float32)}, path, version=2,
    ...                   attributes={"epoch": 3, "who": "me"})
    >>> _ = edit_metadata(path, lambda m: {**m, "who": "you"})
    >>> sorted(ztensor.open(path).attributes.items())
    [('epoch', 3), ('who', 'you')]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from tensorfile.core.atomic import check_editable, rewrite
from tensorfile.core.catalog import Catalog, TensorInfo
from tensorfile.core.errors import (
    InvalidArgumentError,
    SourceError,
    UnsupportedError,
    ZTensorError,
    ZTensorIOError,
    ZTensorUnsupportedError,
    naming,
)
from tensorfile.core.reader import Reader
from tensorfile.core.source import Source
from tensorfile.core.values import plain
from tensorfile.formats import ZTENSOR, GetTensor, MetadataChange, TensorSpec, metadata_text
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor._layouts import COOTensor, CSRTensor
from tensorfile.formats.ztensor.v1 import _format
from tensorfile.formats.ztensor.v1._reader import ZTensorReader
from tensorfile.formats.ztensor.v2._format import MAGIC, encode_footer, manifest_hash
from tensorfile.formats.ztensor.v2._manifest import attribute_text
from tensorfile.frameworks import framework_name
from tensorfile.sources import PathOrData, open_input

__all__ = [
    "check_options",
    "edit_metadata",
    "is_v2",
    "load_file",
    "open",
    "open_any",
    "open_reader",
    "read_catalog",
    "save",
]


def is_v2(source: Source) -> bool:
    """Whether ``source`` starts like a zTensor v2 file (its first four magic bytes: a file
    whose magic was damaged in transit is then refused by the v2 reader, which says so)."""
    try:
        head = source.read(0, min(len(MAGIC), source.size))
    except SourceError as exc:
        raise ZTensorIOError(f"cannot read {source.name}: {exc}") from exc
    return head[:4] == MAGIC[:4]


def open_any(source: Source, *, verify: bool = True) -> Reader:
    """A reader of the zTensor file in ``source``, v1.0 or v2."""
    if is_v2(source):
        from tensorfile.formats.ztensor.v2._reader import ZTensor2Reader

        return ZTensor2Reader(source, verify=verify)
    return ZTensorReader(source, verify=verify)


def open_reader(source: Source, *, verify: bool | None = None) -> Reader:
    """A reader over ``source``; digests are checked unless ``verify=False``."""
    return open_any(source, verify=verify is not False)


def read_catalog(source: Source) -> Catalog:
    """The catalog of the zTensor file in ``source``, v1.0 or v2."""
    if is_v2(source):
        from tensorfile.formats.ztensor.v2 import _container as _v2_container

        return _v2_container.read_catalog(source)
    return _format.read_catalog(source)


def _new_root(raw: bytes, change: MetadataChange, name: str) -> dict[str, Any]:
    root: dict[str, Any] = _cbor.decode(raw, deterministic=True)
    if (
        _cbor.encode(root, deterministic=True) != raw
    ):  # (map keys that are arrays or maps: not kept exactly)
        raise ZTensorUnsupportedError(
            f"{name}: the manifest holds attribute keys tensorfile cannot write back as they "
            "are; its attributes are not edited"
        )
    old: dict[str, Any] = root.get("attributes", {})
    text = {k: attribute_text(v) for k, v in old.items()}
    new = change(dict(text))
    attributes = {k: old[k] if k in old and text[k] == v else v for k, v in new.items()}
    if attributes:
        root["attributes"] = attributes
    else:
        root.pop("attributes", None)
    return root


def edit_metadata(path: str, change: MetadataChange) -> bool:
    """Give the zTensor file at ``path`` the attributes ``change(old)`` by writing a new file
    renamed into place; True when its tensor bytes are shared with the old file."""
    from tensorfile.sources import LocalSource

    real, expect = check_editable(path)
    with LocalSource(real) as src:
        if not is_v2(src):
            return _format.edit_metadata(path, change)
        cat = read_catalog(src)
        if cat.extra.get("data_shard"):
            raise ZTensorError(f"{path} is a data shard: it has no manifest to hold attributes")
        start = cast(int, cat.extra["manifest_start"])
        raw = src.read(start, cat.header_size)
    from tensorfile.formats.ztensor._inputs import attributes_of
    from tensorfile.formats.ztensor.v2._manifest import catalog_from

    root = _new_root(raw, change, path)
    try:
        attributes_of(root.get("attributes"), 2)
        manifest = _cbor.encode(root, deterministic=True)
    except (TypeError, ValueError) as exc:
        raise ZTensorError(f"{path}: the new attributes cannot be written: {exc}") from exc
    size = start + len(manifest) + 40
    catalog_from(
        _cbor.decode(manifest, deterministic=True),
        manifest_at=start,
        manifest_length=len(manifest),
        file_size=size,
        name=path,
    )
    tail = manifest + encode_footer(start, len(manifest), manifest_hash(manifest))
    return rewrite(path, b"", 0, start, tail, expect=expect) == "reflink"


def open(
    path_or_data: PathOrData,
    *,
    verify: bool = True,
) -> Any:
    """Open a zTensor file (a path, a URL or its bytes), v1.0 or v2 (by its magic), for
    reading; a v2 file gives a :class:`~tensorfile.ztensor.ZTensor2Reader`.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import ztensor
        >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
        >>> ztensor.save_file({"a": np.eye(2, dtype=np.float32)}, path)
        >>> with ztensor.open(path) as f:
        ...     f.view("a").tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    if not isinstance(path_or_data, str | os.PathLike | bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"expected a path, a URL or the bytes of a file, got {type(path_or_data).__name__}"
        )
    try:
        opened = open_input(path_or_data, first=ZTENSOR.first_request())
        with opened as source, naming(source.name):
            return open_any(source, verify=verify)
    except ZTensorError:
        raise
    except SourceError as exc:
        err = ZTensorIOError(str(exc))
        err.path = exc.path
        raise err from exc


def load_file(
    path: str | os.PathLike[str],
    *,
    framework: str = "numpy",
    verify: bool = True,
) -> dict[str, Any]:
    """Every tensor of a zTensor file: numpy arrays (or torch tensors with
    ``framework="pt"``) for dense tensors, :class:`CSRTensor`/:class:`COOTensor` (torch
    sparse tensors with ``"pt"``) for sparse ones, :class:`ExtensionTensor` for unknown
    layouts.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import ztensor
        >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
        >>> ztensor.save_file({"a": np.arange(3, dtype=np.int8)}, path)
        >>> ztensor.load_file(path)["a"].tolist()
        [0, 1, 2]
    """
    try:
        kind = framework_name(framework)
    except UnsupportedError:
        kind = "unknown"
    if kind not in ("numpy", "torch"):
        what = "an unknown framework" if kind == "unknown" else "not one this function loads into"
        raise ZTensorUnsupportedError(
            f"framework {framework!r} is {what}; ztensor.load_file takes 'numpy' or 'pt'"
        )
    with open(path, verify=verify) as reader:
        if kind == "numpy":
            tensors: dict[str, Any] = reader.get_tensors()
            return tensors
        from tensorfile.frameworks.torch import torch_allocator

        names = reader.keys()
        dense = [n for n in names if reader.info(n).layout == "dense"]
        alloc: Callable[[TensorInfo], Any] = torch_allocator()
        got = dict(zip(dense, reader.read_into(dense, alloc), strict=True))
        out: dict[str, Any] = {}
        for n in names:
            if n in got:
                out[n] = got[n]
                continue
            value = reader.get_tensor(n)
            out[n] = value.to_torch() if isinstance(value, CSRTensor | COOTensor) else value
        return out


_OPTIONS = {
    1: ("compression", "level", "checksum"),
    2: ("compression", "level", "checksum", "align"),
}
_DIGESTS = {1: ("crc32c", "sha256"), 2: ("xxh3", "sha256")}


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The writer options, checked: ``version`` (1, the default, or 2) and the options that
    version takes (messages name it ``zt`` or ``zt2``).

    Example:
        >>> check_options({"checksum": "crc32c"})
        {'version': 1, 'checksum': 'crc32c'}
        >>> check_options({"version": 2, "checksum": "crc32c"})
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidArgumentError: checksum 'crc32c' is not a zt2 digest \
(choose xxh3 or sha256)
    """
    version = options.get("version", 1)
    if version not in _OPTIONS or isinstance(version, bool):
        raise InvalidArgumentError(f"version={version!r}: zTensor is written as version 1 or 2")
    label = "zt" if version == 1 else "zt2"
    out: dict[str, Any] = {"version": version}
    for key, value in options.items():
        if key == "version":
            continue
        if key not in _OPTIONS[version]:
            raise InvalidArgumentError(f"{key.replace('_', '-')} does not apply to {label} output")
        out[key] = value
    checksum = out.get("checksum")
    if checksum is not None and checksum not in _DIGESTS[version]:
        ok = _DIGESTS[version]
        raise InvalidArgumentError(
            f"checksum {checksum!r} is not a {label} digest (choose {' or '.join(ok)})"
        )
    if out.get("compression") not in (None, "zstd"):
        raise InvalidArgumentError(f"compression {out['compression']!r}: only zstd")
    return out


def _cbor_value(value: Any) -> bool:
    if isinstance(value, str | int | float | bool) or value is None:
        return True
    if isinstance(value, list):
        return all(_cbor_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _cbor_value(v) for k, v in value.items())
    return False


def save(
    path: str,
    tensors: Sequence[TensorSpec],
    get: GetTensor,
    metadata: Mapping[str, Any],
    *,
    tick: Callable[[str], None] | None = None,
    version: int = 1,
    **options: Any,
) -> list[str]:
    """Write ``tensors`` to the zTensor file ``path`` (v1.0, or v2 with ``version=2``), one
    ``get(name)`` at a time, atomically.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.core import dtypes
        >>> from tensorfile import ztensor
        >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
        >>> spec = TensorSpec("w", dtypes.from_name("F32"), (2,))
        >>> _ = save(path, [spec], lambda n: np.ones(2, np.float32), {"n": 3}, version=2)
        >>> ztensor.open(path).attributes
        {'n': 3}
    """
    from tensorfile.formats.ztensor._inputs import dtype_of, ztensor_dtype
    from tensorfile.formats.ztensor._writer import Writer

    for spec in tensors:  # every dtype first: nothing written for a file that cannot be
        if version == 1:
            ztensor_dtype(spec.name, spec.dtype)
        else:
            dtype_of(spec.name, spec.dtype.name)
    text = metadata_text(metadata)
    if version == 1:
        attributes: dict[str, Any] = text
    else:
        values = {k: plain(v) for k, v in metadata.items()}  # GGUFValue: float32 shortest
        attributes = {k: v for k, v in values.items() if _cbor_value(v)}
        attributes.update({k: v for k, v in text.items() if k not in attributes})
    with Writer(path, version=version, attributes=attributes, **options) as w:
        for spec in tensors:
            w.add(spec.name, get(spec.name))
            if tick is not None:
                tick(spec.name)
    return [path]
