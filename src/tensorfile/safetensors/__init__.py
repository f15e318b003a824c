"""A drop-in replacement for the ``safetensors`` package.

Replace ``safetensors`` by ``tensorfile.safetensors`` in an import and the code runs
unchanged: ``safe_open``, ``serialize``, ``serialize_file``, ``deserialize``,
``SafetensorError`` and ``TensorSpec`` here; ``save``/``save_file``/``load``/``load_file``
in :mod:`tensorfile.safetensors.numpy` and :mod:`tensorfile.safetensors.torch`.

Code that reaches past the four functions works too: ``_safe_open_handle`` (``safe_open``
over a file object you opened, including fsspec and object-store files, which the
reference cannot read), the torch module's ``_find_shared_tensors``, ``_is_complete``,
``_remove_duplicate_names`` and ``_end_ptr``, and the reference's exception types and words
where code matches on them (a missing file is a ``FileNotFoundError`` saying "No such file
or directory: ...", a bad type a ``TypeError``, a refused slice the reference's message).
The reference's own test suite passes through an import swap (``tools/reference_suite.py``).

What differs: headers are validated more strictly (duplicate names, a header that does not
start with ``{``), every error is a :class:`SafetensorError` subclass that names the rule,
the tensor and the byte offset; loading copies straight into new arrays (faster); writes are
atomic; strided numpy arrays are saved by value; metadata keys are written sorted;
``get_slice`` also takes steps, ``None`` and ``...`` (the reference ignores steps).

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors import safe_open
    >>> from tensorfile.safetensors.numpy import save_file
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, path, {"k": "v"})
    >>> with safe_open(path, framework="np") as f:
    ...     f.keys(), f.metadata(), f.get_slice("w")[:, 1].tolist()
    (['w'], {'k': 'v'}, [1.0, 4.0])
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tensorfile.formats.safetensors._encode import check_name, check_shape
from tensorfile.formats.safetensors._parse import MAX_HEADER_SIZE
from tensorfile.formats.safetensors._reader import SafetensorsReader
from tensorfile.formats.safetensors._slices import reference_index
from tensorfile.formats.safetensors._writer import (
    Prepared,
    StreamWriter,
    check_size,
    to_bytes,
    write_file,
)

from ..core import dtypes
from ..core.dtypes import DType
from ..core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SafetensorArgumentError,
    SafetensorError,
    SafetensorIOError,
    SafetensorNotFoundError,
    SafetensorSliceError,
    SafetensorUnsupportedError,
    SourceError,
    SourceNotFoundError,
    UnknownDtypeError,
    UnsupportedError,
)
from ..core.reader import brief, names_list
from ..core.source import Source
from ..frameworks import Framework, f4_shape, get_framework
from ..sources import MemorySource, is_url, open_input
from ..sources.fileobj import open_file_object

__all__ = [
    "MAX_HEADER_SIZE",
    "SafetensorError",
    "StreamWriter",
    "TensorSpec",
    "__version__",
    "deserialize",
    "safe_open",
    "serialize",
    "serialize_file",
]

__version__ = "0.8.0"
"""The version of the reference API this module is a drop-in for."""

_BACKENDS = ("mmap", "pread")
"""The ``backend`` values :class:`safe_open` accepts (the reference's)."""


def _open_reader(filename: str | os.PathLike[str]) -> SafetensorsReader:
    """A :class:`~tensorfile.core.reader.Reader` over a safetensors file (a path or a URL)."""
    if not isinstance(filename, str | os.PathLike):
        raise InvalidTypeError(
            f"filename must be a str or os.PathLike, got {type(filename).__name__}"
        )
    try:
        with open_input(filename) as source:
            return SafetensorsReader(source)
    except SafetensorError:
        raise
    except SourceNotFoundError as exc:
        if is_url(filename):  # the source's message: it names the URL without secrets
            raise SafetensorNotFoundError(str(exc)) from exc
        # the reference's words for a missing path: code matches on them
        raise SafetensorNotFoundError(
            f"No such file or directory: {os.fsdecode(filename)}"
        ) from exc
    except SourceError as exc:
        raise SafetensorIOError(str(exc)) from exc


def _framework(framework: str, device: Any) -> Framework:
    """The adapter for ``framework`` on ``device``; what cannot be had is a SafetensorError
    (as in the reference) that is also tensorfile's UnsupportedError or InvalidArgumentError."""
    try:
        return get_framework(framework, device)
    except SafetensorError:
        raise
    except UnsupportedError as exc:
        raise SafetensorUnsupportedError(str(exc)) from exc
    except InvalidTypeError:
        raise
    except InvalidArgumentError as exc:
        raise SafetensorArgumentError(str(exc)) from exc


def _reader_over(source: Source) -> SafetensorsReader:
    """A reader over ``source`` (which it then owns), with I/O errors as safetensors'."""
    try:
        return SafetensorsReader(source)
    except SafetensorError:
        source.close()
        raise
    except SourceError as exc:
        source.close()
        raise SafetensorIOError(str(exc)) from exc


class safe_open:
    """Open a safetensors file lazily and return tensors as asked.

    Args:
        filename: path of the file.
        framework: ``"np"``/``"numpy"``, ``"pt"``/``"torch"``, ``"jax"``/``"flax"``,
            ``"tf"``/``"tensorflow"``, ``"mlx"`` or ``"paddle"``.
        device: where tensors go (torch and paddle: any device of theirs; the others:
            ``"cpu"``).
        backend: ``"mmap"`` or ``"pread"``, accepted for compatibility; tensors are always
            copied with positional reads, which is the fastest way on every file system.

    Beyond the reference API, :meth:`read_tensors` reads many tensors at once (and, with
    ``copy=False``, maps them without a copy); the ``load_file`` functions of
    :mod:`tensorfile.safetensors.numpy` and :mod:`tensorfile.safetensors.torch` use it.

    Example:
        >>> import numpy as np
        >>> from tensorfile.safetensors.numpy import save_file
        >>> save_file({"embedding": np.ones((4, 16), np.float32)}, "model.safetensors")
        >>> with safe_open("model.safetensors", framework="pt") as f:
        ...     emb = f.get_slice("embedding")[:, ::8]
        >>> tuple(emb.shape)
        (4, 2)
    """

    def __init__(
        self,
        filename: str | os.PathLike[str],
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
    ) -> None:
        if backend not in _BACKENDS:
            raise InvalidArgumentError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        self._framework: Framework = _framework(framework, device)
        self._reader: SafetensorsReader | None = _open_reader(filename)
        self._name = os.fspath(filename)

    @classmethod
    def _over(cls, source: Source, framework: str, device: Any = "cpu") -> safe_open:
        """(internal) A ``safe_open`` over an open source, which it then owns."""
        f = cls.__new__(cls)
        f._framework = _framework(framework, device)
        f._reader = _reader_over(source)
        f._name = source.name
        return f

    @classmethod
    def _from_bytes(
        cls, data: bytes | bytearray | memoryview, framework: str, device: Any = "cpu"
    ) -> safe_open:
        """(internal) A ``safe_open`` over the bytes of a whole file, for ``load(bytes)``."""
        return cls._over(MemorySource(data), framework, device)

    @property
    def reader(self) -> SafetensorsReader:
        """The underlying format-neutral reader."""
        if self._reader is None:
            raise SafetensorError(f"{self._name} is closed")
        return self._reader

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return sorted(self.reader.header.names)

    def offset_keys(self) -> list[str]:
        """Tensor names in the order of their data in the file."""
        return self.reader.header.offset_names()

    def metadata(self) -> dict[str, str] | None:
        """The ``__metadata__`` map, or None when the file has none."""
        md = self.reader.header.metadata
        return None if md is None else dict(md)

    def get_tensor(self, name: str) -> Any:
        """The whole tensor ``name`` in the chosen framework (an owned copy)."""
        return self._framework.read(self.reader, [name])[0]

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, by name, in file order."""
        return self.read_tensors()

    def read_tensors(
        self, names: Iterable[str] | None = None, *, copy: bool = True
    ) -> dict[str, Any]:
        """Many tensors at once, by name: a tensorfile extension of the reference API.

        ``names`` (every tensor, in file order, by default) are read through the framework
        adapter with one positional read per run of adjacent tensors, in parallel, straight
        into the new tensors' memory: one copy and no per-tensor calls, which is what makes
        ``load_file`` fast. With ``copy=False`` the tensors are views of the mapped file, no
        copy at all: read-only numpy arrays (bit-packed F4/F6 are still unpacked copies), or
        torch tensors over a private mapping (writes never reach the file; cpu only).

        Example:
            >>> import numpy as np
            >>> from tensorfile.safetensors.numpy import save_file
            >>> save_file({"a": np.zeros(2, np.int8), "b": np.ones(3)}, "ab.safetensors")
            >>> with safe_open("ab.safetensors", framework="np") as f:
            ...     both, b = f.read_tensors(), f.read_tensors(["b"], copy=False)["b"]
            >>> list(both), b.tolist(), b.flags.writeable
            (['b', 'a'], [1.0, 1.0, 1.0], False)
        """
        reader = self.reader
        names = self.offset_keys() if names is None else names_list(names)
        fw = self._framework
        tensors = fw.read(reader, names) if copy else fw.view(reader, names)
        return dict(zip(names, tensors, strict=True))

    def get_slice(self, name: str) -> SafeSlice:
        """A handle that reads only the part of ``name`` you index."""
        self.reader.info(name)
        return SafeSlice(self, name)

    def close(self) -> None:
        """Close the file."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _safe_open_handle(safe_open):
    """``safe_open`` over a file object you already opened: the reference's
    ``safetensors._safe_open_handle``, used to read from fsspec and object-store files.

    Any object with an operating-system file behind it (``fileno()``, in any mode) is read
    through a duplicate of its descriptor; any other seekable binary file object (an s3fs or
    fsspec file, ``io.BytesIO``) through its ``seek`` and ``read``, which the reference
    cannot do. The object stays the caller's: leaving the block does not close it.

    Example:
        >>> import io, numpy as np
        >>> from tensorfile.safetensors.numpy import save
        >>> blob = io.BytesIO(save({"w": np.arange(3, dtype=np.int16)}))
        >>> with _safe_open_handle(blob, framework="np") as g:
        ...     g.keys(), g.get_tensor("w").tolist()
        (['w'], [0, 1, 2])
    """

    def __init__(
        self, f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap"
    ) -> None:
        if backend not in _BACKENDS:
            raise InvalidArgumentError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        self._framework = _framework(framework, device)
        try:
            source = open_file_object(f)
        except SourceError as exc:
            raise SafetensorIOError(str(exc)) from exc
        self._reader = _reader_over(source)
        self._name = source.name


class SafeSlice:
    """A tensor you can index (numpy basic indexing); returned by ``safe_open.get_slice``."""

    def __init__(self, owner: safe_open, name: str) -> None:
        self._owner = owner
        self._name = name
        info = owner.reader.info(name)
        self._dtype = info.dtype
        self._shape = info.shape

    def get_shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The tensor's safetensors dtype name (``"F32"``...)."""
        return self._dtype.name

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        return self._shape

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key: Any) -> Any:
        key = reference_index(self._shape, key)
        try:
            arr = self._owner.reader.read_slice(self._name, key)
        except SafetensorError:
            raise
        except InvalidArgumentError as exc:  # an index beyond the reference's, refused
            raise SafetensorSliceError(str(exc)) from exc
        return self._owner._framework.convert(arr, self._dtype)


class TensorSpec:
    """Describes one tensor passed to :func:`serialize` / :func:`serialize_file`.

    ``dtype`` is a numpy/torch-style name (``"float32"``, ``"bfloat16"``,
    ``"float4_e2m1fn_x2"``...); ``data_ptr``/``data_len`` give the address and size of its
    contiguous bytes, which must stay alive while they are serialized. For
    ``float4_e2m1fn_x2`` the last dimension of ``shape`` is doubled, as in the reference.

    Example:
        >>> import numpy as np
        >>> x = np.zeros(2, np.float32)
        >>> TensorSpec(dtype="float32", shape=[2], data_ptr=x.ctypes.data, data_len=8).dtype
        'F32'
    """

    __slots__ = ("_dtype", "data_len", "data_ptr", "shape")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        dt = _spec_dtype(dtype)
        shape_l = list(check_shape("<TensorSpec>", shape))
        if dtype == "float4_e2m1fn_x2":
            shape_l = list(f4_shape(dt, shape_l, to="file"))
        self._dtype = dt
        self.shape = shape_l
        self.data_ptr = _address("data_ptr", data_ptr)
        self.data_len = _address("data_len", data_len)

    @property
    def dtype(self) -> str:
        """The safetensors dtype code (``"F32"``)."""
        return self._dtype.name

    def prepared(self, name: str) -> Prepared:
        """The tensor's bytes, read in place at ``data_ptr``."""
        check_size(name, self._dtype, self.shape, self.data_len)  # before touching memory
        if self.data_len == 0:
            buf = memoryview(bytearray())
        else:
            if not self.data_ptr:
                raise InvalidArgumentError(f"tensor {name!r}: null data_ptr")
            buf = memoryview((ctypes.c_ubyte * self.data_len).from_address(self.data_ptr)).cast("B")
        return Prepared(name, self._dtype, tuple(self.shape), buf)

    def __repr__(self) -> str:
        return f"TensorSpec(dtype={self.dtype!r}, shape={self.shape}, data_len={self.data_len})"


def _spec_dtype(name: str) -> DType:
    if not isinstance(name, str):
        raise UnknownDtypeError(f"Unknown dtype {brief(name)}: a dtype is named by a string")
    try:
        return dtypes.from_name(name)
    except KeyError:
        raise UnknownDtypeError(f"Unknown dtype {brief(name)}") from None


def _address(what: str, value: object) -> int:
    """``data_ptr`` or ``data_len``: a non-negative integer that fits a pointer."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not 0 <= int(value) < 1 << 63
    ):
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {brief(value)}")
    return int(value)


def _prepare_all(tensor_dict: Mapping[str, Any]) -> list[Prepared]:
    if not isinstance(tensor_dict, Mapping):
        raise InvalidTypeError(f"expected a dict of tensor specs, got {type(tensor_dict).__name__}")
    out = []
    for name, spec in tensor_dict.items():
        if isinstance(spec, TensorSpec):
            out.append(spec.prepared(check_name(name)))
        elif isinstance(spec, Mapping) and {"dtype", "shape", "data"} <= set(spec):
            # the pre-0.7 reference form: {"dtype": ..., "shape": [...], "data": bytes}
            check_name(name)
            try:
                data = memoryview(spec["data"]).cast("B")
            except TypeError as exc:
                raise InvalidArgumentError(
                    f"tensor {name!r}: data must be a contiguous bytes-like object, got "
                    f"{type(spec['data']).__name__}: {exc}"
                ) from None
            dt = _spec_dtype(spec["dtype"])
            out.append(Prepared(name, dt, check_shape(name, spec["shape"]), data))
        else:
            raise InvalidTypeError(
                f"tensor {name!r}: expected a TensorSpec (or a dict with dtype, shape and "
                f"data), got {type(spec).__name__}"
            )
    return out


def serialize(tensor_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialize tensor specs (and optional metadata) to the bytes of a safetensors file.

    Example:
        >>> blob = serialize({"a": {"dtype": "F32", "shape": [1], "data": b"\\0\\0\\x80?"}})
        >>> blob[:8]
        b'8\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
    """
    return to_bytes(_prepare_all(tensor_dict), metadata)


def serialize_file(
    tensor_dict: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Serialize tensor specs into ``filename`` (atomically)."""
    write_file(_prepare_all(tensor_dict), filename, metadata, align=align, fsync=fsync)


def deserialize(data: bytes | bytearray | memoryview) -> list[tuple[str, dict[str, Any]]]:
    """Parse safetensors bytes into ``[(name, {"dtype", "shape", "data"}), ...]`` in file order.

    Example:
        >>> deserialize(serialize({"a": {"dtype": "U8", "shape": [2], "data": b"hi"}}))
        [('a', {'dtype': 'U8', 'shape': [2], 'data': bytearray(b'hi')})]
    """
    try:
        source = MemorySource(data)
    except TypeError as exc:
        raise InvalidTypeError(f"expected bytes, got {type(data).__name__}") from exc
    reader = SafetensorsReader(source)
    view = source.buffer()
    out = []
    for name in reader.header.offset_names():
        info = reader.info(name)
        rng = info.byte_range
        out.append(
            (
                name,
                {
                    "dtype": info.dtype.name,
                    "shape": list(info.shape),
                    "data": bytearray(view[rng.start : rng.stop]),
                },
            )
        )
    return out
