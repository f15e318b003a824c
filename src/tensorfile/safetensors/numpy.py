"""``safetensors.numpy``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

As in the reference, loading goes through the public :class:`~tensorfile.safetensors.safe_open`
(``framework="np"``); it reads every tensor at once with :meth:`safe_open.read_tensors
<tensorfile.safetensors.safe_open.read_tensors>`, straight into new arrays.

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors.numpy import load, save
    >>> load(save({"x": np.arange(3, dtype=np.int16)}))["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tensorfile.formats.safetensors import faces
from tensorfile.formats.safetensors.faces import (
    load_sharded as _load_sharded,
)
from tensorfile.formats.safetensors.faces import (
    safe_open,
)

from ..core.dtypes import from_numpy
from ..core.errors import InvalidArgumentError, InvalidTypeError
from ..core.reader import NDArray
from ..core.sizes import parse_size
from ..loading import check_backend, settle

__all__ = ["load", "load_file", "load_sharded", "save", "save_file", "save_sharded"]


def _prepare(tensor_dict: dict[str, Any]) -> list[faces.Prepared]:
    if not isinstance(tensor_dict, dict):
        raise InvalidTypeError(
            f"expected a dict of [str, np.ndarray], got {type(tensor_dict).__name__}"
        )
    return [faces.prepare_array(name, arr) for name, arr in tensor_dict.items()]


def save(
    tensor_dict: dict[str, np.ndarray[Any, Any]],
    metadata: dict[str, str] | None = None,
    *,
    checksum: str | None = None,
) -> bytes:
    """Serialize numpy arrays (any strides, bf16/f8 through ``ml_dtypes``) to bytes;
    ``checksum`` as for :func:`save_file`.

    Example:
        >>> len(save({"a": np.zeros(2, np.float32)}))
        72
    """
    return faces.to_bytes(_prepare(tensor_dict), metadata, checksum=checksum)


def save_file(
    tensor_dict: dict[str, np.ndarray[Any, Any]],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
    checksum: str | None = None,
) -> None:
    """Save numpy arrays to ``filename``, atomically.

    ``checksum`` (``"xxh3"``, ``"crc32c"`` or ``"sha256"``) stores each tensor's digest in the
    metadata under ``tensorfile.digests`` (a JSON text: other readers load the file
    unchanged), which ``verify`` and ``load_file(..., verify=True)`` check.

    ``align`` pads the header so the data starts on that boundary (e.g. 64 or 4096);
    ``fsync`` flushes the file to stable storage before it is renamed into place.

    Example:
        >>> save_file({"a": np.zeros(2)}, "model.safetensors")
    """
    faces.write_file(
        _prepare(tensor_dict), filename, metadata, align=align, fsync=fsync, checksum=checksum
    )


def load(data: bytes | bytearray | memoryview) -> dict[str, NDArray]:
    """Load numpy arrays from the bytes of a safetensors file (owned copies).

    Example:
        >>> load(save({"a": np.ones(1, np.uint8)}))["a"].tolist()
        [1]
    """
    with safe_open._from_bytes(data, framework="np") as f:
        return f.read_tensors()


def load_file(
    filename: str | os.PathLike[str],
    *,
    backend: str = "auto",
    copy: bool = True,
    verify: bool = False,
    cache_dir: str | os.PathLike[str] | bool | None = None,
) -> dict[str, NDArray]:
    """Load every tensor of ``filename`` as owned, writable numpy arrays, in file order.

    With ``copy=False`` the arrays are read-only zero-copy views of the mapped file (bit-packed
    F4/F6 tensors are still unpacked copies). ``verify=True`` checks the digests the file
    records (``save_file(..., checksum=...)``): a changed byte is a ``ChecksumError`` naming
    the tensor.

    Example:
        >>> save_file({"a": np.zeros(2)}, "model.safetensors")
        >>> load_file("model.safetensors")["a"].tolist()
        [0.0, 0.0]
    """
    check_backend(backend)
    f, _ = safe_open._load(
        filename,
        "np",
        "cpu",
        verify=verify,
        cache_dir=cache_dir,
        settle=lambda source: settle(source, filename, backend, owned=copy),
    )
    with f:
        return f.read_tensors(copy=copy)


def save_sharded(
    tensors: dict[str, np.ndarray[Any, Any]],
    directory: str | os.PathLike[str],
    *,
    max_shard_size: int | str = "5GB",
    metadata: dict[str, str] | None = None,
    checksum: str | None = None,
) -> list[str]:
    """Save ``tensors`` as a sharded checkpoint in ``directory``, laid out as
    huggingface_hub's ``save_torch_state_dict`` lays it out (``model-00001-of-0000N``
    shards and ``model.safetensors.index.json``, or one ``model.safetensors``), atomically
    as a whole. Returns the file names written, the index last.

    Example:
        >>> import tempfile
        >>> save_sharded({"w": np.zeros(4, np.float32)}, tempfile.mkdtemp())
        ['model.safetensors']
    """
    if not isinstance(tensors, dict):
        raise InvalidArgumentError(f"expected a dict of arrays, got {type(tensors).__name__}")
    entries = []
    for name, arr in tensors.items():
        if not isinstance(arr, np.ndarray):
            raise InvalidTypeError(f"tensor {name!r}: expected a numpy array, got {type(arr)}")
        entries.append((name, from_numpy(arr.dtype).name, tuple(arr.shape)))
    return faces.write_sharded(
        entries,
        lambda n: np.ascontiguousarray(tensors[n]),
        directory,
        max_shard_size=parse_size(max_shard_size),
        metadata=metadata,
        checksum=checksum,
    )


def load_sharded(
    path: str | os.PathLike[str], *, verify: bool = False
) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor of a sharded checkpoint (``model.safetensors.index.json``, a folder
    holding one, or a single file; local or a URL), read as one plan: the shards are read
    in parallel, not one after the other (a tensorfile extension; the reference has none).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = save_sharded({"w": np.zeros(4, np.float32)}, d)
        >>> sorted(load_sharded(d))[:1]
        ['w']
    """
    return _load_sharded(path, "np", "cpu", verify=verify)
