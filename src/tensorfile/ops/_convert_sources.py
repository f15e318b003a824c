"""What :func:`tensorfile.convert` reads: one interface over every source it takes.

* anything :func:`tensorfile.open` reads (safetensors, zTensor v1.0 and v2, GGUF), and
  sharded checkpoints (an index or the folder holding it), through the operations' loader;
* numpy ``.npz`` (``allow_pickle=False``, member by member) and ``.npy`` (one tensor, named
  after the file's stem);
* PyTorch pickles (``.pt``, ``.pth``, ``.bin``) through ``torch.load(weights_only=True)``
  only: never an unrestricted unpickler. Nested dicts are flattened with dotted names.

GGUF's quantized tensors are dequantized to float32 with the ``gguf`` package's routines
when it is installed, and refused by type name when it is not.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import dtypes
from ..core.errors import InvalidArgumentError, SourceError, UnsupportedError
from ..core.reader import Reader
from ._catalogs import files_of, load, open_readers

__all__ = ["ConvertSource", "Item", "open_source"]

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


@dataclass(frozen=True)
class Item:
    """One tensor as a source describes it (before any data is read)."""

    name: str
    dtype: dtypes.DType
    shape: tuple[int, ...]
    layout: str = "dense"
    note: str | None = None  # e.g. "dequantized from q8_0"

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(int(np.prod(self.shape, dtype=np.int64)))


@dataclass
class ConvertSource:
    """A source: its items in order, its metadata, and a way to get each tensor."""

    format: str
    items: list[Item]
    metadata: dict[str, Any]
    _get: Any = field(repr=False)
    _close: Any = field(repr=False, default=None)
    single_safetensors: str | None = None  # a lone local safetensors file (copied as is)

    def get(self, name: str) -> Any:
        """The tensor: a numpy array, or a zTensor CSRTensor/COOTensor."""
        return self._get(name)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _text_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in meta.items():
        inner = getattr(value, "value", value)  # GGUFValue
        out[str(key)] = inner
    return out


def open_source(src: str) -> ConvertSource:
    """Open ``src`` for conversion, by its kind (see the module docstring)."""
    lower = src.lower()
    if lower.endswith(".npz"):
        return _npz(src)
    if lower.endswith(".npy"):
        return _npy(src)
    if lower.endswith(PICKLE_SUFFIXES) and not _is_tensor_file(src):
        return _pickle(src)
    return _tensorfile(src)


def _is_tensor_file(src: str) -> bool:
    """Whether a ``.bin`` (say) is in fact a format tensorfile reads (the registry decides)."""
    from contextlib import closing

    from ..core.errors import TensorFileError
    from ..formats import detect
    from ..sources import open_path

    try:
        with closing(open_path(src)) as source:
            detect(source)
    except (TensorFileError, OSError):
        return False
    return True


def _tensorfile(src: str) -> ConvertSource:
    s = load(src)
    readers = open_readers(s)
    files = files_of(s)
    where = {t.name: t.file or files[0] for t in s.by_name()}
    items: list[Item] = []
    for t in s.by_name():
        reader = readers[where[t.name]]
        info = reader.info(t.name)
        if info.layout == "quantized":
            items.append(
                Item(
                    t.name,
                    dtypes.from_name("F32"),
                    info.shape,
                    "dense",
                    f"dequantized from {info.dtype_name}",
                )
            )
        else:
            items.append(Item(t.name, info.dtype, info.shape, info.layout))
    first = readers[files[0]]

    def get(name: str) -> Any:
        reader = readers[where[name]]
        info = reader.info(name)
        if info.layout == "quantized":
            return _dequantize(reader, name)
        return reader.get_tensor(name)

    def close() -> None:
        for r in readers.values():
            r.close()

    single = None
    if not s.shards and first.format == "safetensors" and os.path.isfile(src):
        single = src
    return ConvertSource(
        "sharded-safetensors" if s.shards else first.format,
        items,
        _text_metadata(getattr(first, "attributes", None) or s.metadata),  # zt2: CBOR values
        get,
        close,
        single,
    )


def _dequantize(reader: Reader, name: str) -> np.ndarray[Any, Any]:
    info = reader.info(name)
    kind = (info.dtype_name or "").upper()
    try:
        import gguf
    except ImportError:
        raise UnsupportedError(
            f"tensor {name!r} is quantized ({kind}); converting it needs the gguf package "
            "(pip install gguf) to dequantize it"
        ) from None
    qtype = getattr(gguf.GGMLQuantizationType, kind, None)
    if qtype is None:
        raise UnsupportedError(f"tensor {name!r}: gguf cannot dequantize {kind}")
    rng = info.byte_range
    raw = np.frombuffer(reader.source.read(rng.start, rng.length), np.uint8)
    rows = info.shape[:-1] if info.shape else ()
    try:
        out = gguf.quants.dequantize(raw.reshape(*rows, -1), qtype)
    except (ValueError, NotImplementedError) as exc:
        raise UnsupportedError(f"tensor {name!r}: gguf cannot dequantize {kind}: {exc}") from exc
    return np.ascontiguousarray(out, dtype=np.float32).reshape(info.shape)


def _numpy_item(
    name: str, arr: np.ndarray[Any, Any], src: str, shape: tuple[int, ...] | None = None
) -> Item:
    try:
        dt = dtypes.from_numpy(arr.dtype)
    except (KeyError, TypeError, ValueError, UnsupportedError):
        raise UnsupportedError(
            f"{src}: array {name!r} has dtype {arr.dtype}, which no tensor format holds"
        ) from None
    return Item(name, dt, tuple(int(d) for d in arr.shape) if shape is None else shape)


def _npz(src: str) -> ConvertSource:
    try:
        npz = np.load(src, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise SourceError(f"{src}: cannot read as .npz: {exc}") from exc
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise InvalidArgumentError(f"{src} is not an .npz archive")
    try:
        headers = _npz_headers(npz, src)
        items = [_numpy_item(name, np.empty(0, dt), src, shape) for name, (shape, dt) in headers]
    except BaseException:
        npz.close()
        raise

    def get(name: str) -> np.ndarray[Any, Any]:
        try:
            return _little(npz[name])
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise SourceError(f"{src}: member {name}.npy cannot be read: {exc}") from exc

    return ConvertSource("npz", items, {}, get, npz.close)


def _npz_headers(npz: Any, src: str) -> list[tuple[str, tuple[tuple[int, ...], np.dtype[Any]]]]:
    """Each member's name, shape and dtype, from its ``.npy`` header (no data read). A member
    whose header claims more bytes than the member holds is refused, before numpy allocates
    what the header claims; so is a member that is not an ``.npy`` array."""
    zf = npz.zip
    out = []
    for info in zf.infolist():
        if not info.filename.endswith(".npy"):
            raise UnsupportedError(f"{src}: member {info.filename} is not an .npy array")
        try:
            with zf.open(info) as f:
                major, _minor = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if major == 1
                    else np.lib.format.read_array_header_2_0
                )
                shape, _fortran, dtype = read_header(f, max_header_size=1 << 16)
                header_end = f.tell()
        except (ValueError, OSError, EOFError, SyntaxError, TypeError, zipfile.BadZipFile) as exc:
            raise SourceError(f"{src}: member {info.filename} is not a valid .npy: {exc}") from exc
        holds = max(0, _member_bound(info) - header_end)
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize if dtype.itemsize else 0
        if claimed > holds:
            raise SourceError(
                f"{src}: member {info.filename} claims {claimed:,} bytes of data but holds "
                f"{holds:,}"
            )
        out.append((info.filename[: -len(".npy")], (tuple(int(d) for d in shape), dtype)))
    return out


def _member_bound(info: zipfile.ZipInfo) -> int:
    """The most bytes a zip member can yield: its stated size, and no more than its stored
    bytes (deflate expands at most ~1032 times; other methods are given the same bound)."""
    if info.compress_type == zipfile.ZIP_STORED:
        return min(info.file_size, info.compress_size)
    return min(info.file_size, info.compress_size * 1100 + (1 << 16))


def _little(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """C-ordered and little-endian, as every tensor format stores it."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)


def _npy(src: str) -> ConvertSource:
    try:
        arr = np.load(src, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{src}: cannot read as .npy: {exc}") from exc
    name = os.path.splitext(os.path.basename(src))[0] or "tensor"
    item = _numpy_item(name, arr, src)
    return ConvertSource("npy", [item], {}, lambda n: _little(arr))


def _flatten(obj: Any, prefix: str, out: dict[str, Any], src: str) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        if prefix in out:
            raise UnsupportedError(
                f"{src}: two tensors flatten to the name {prefix!r} (a dotted key and a "
                "nested dict); rename one"
            )
        out[prefix] = obj
        return
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise UnsupportedError(
                    f"{src}: key {key!r} under {prefix or 'the top'} is not text"
                )
            _flatten(value, f"{prefix}.{key}" if prefix else key, out, src)
        return
    raise UnsupportedError(
        f"{src}: {prefix or 'the pickle'} holds a value of type {type(obj).__name__}, not a "
        "tensor; only (nested) dicts of tensors are converted"
    )


def _pickle(src: str) -> ConvertSource:
    try:
        import torch
    except ImportError:
        raise UnsupportedError(f"{src}: reading a PyTorch pickle needs torch") from None
    from ..frameworks.torch import to_numpy

    if not os.path.isfile(src):
        raise SourceError(f"{src}: no such file")
    try:
        try:
            obj = torch.load(src, weights_only=True, map_location="cpu", mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            obj = torch.load(src, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch's UnpicklingError and friends: the reason is theirs
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnsupportedError(
            f"{src}: refused by torch.load(weights_only=True), the only way tensorfile reads "
            f"pickles: {reason}"
        ) from None
    flat: dict[str, Any] = {}
    if isinstance(obj, torch.Tensor):  # a lone tensor: named after the file, as .npy
        obj = {os.path.splitext(os.path.basename(src))[0] or "tensor": obj}
    _flatten(obj, "", flat, src)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    items = []
    for name, t in flat.items():
        if t.layout != torch.strided:
            raise UnsupportedError(f"{src}: tensor {name!r} is {t.layout}; only dense tensors")
        arr = to_numpy(t.detach().cpu().contiguous())
        arrays[name] = arr
        items.append(_numpy_item(name, arr, src))
    return ConvertSource("pytorch", items, {}, arrays.__getitem__)


def iter_json(meta: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Metadata as text: text values as they are, others as JSON."""
    for key, value in meta.items():
        if isinstance(value, str):
            yield key, value
        else:
            yield key, json.dumps(value, ensure_ascii=False, default=str)
