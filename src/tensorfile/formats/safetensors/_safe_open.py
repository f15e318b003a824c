"""``safe_open``, the reference's lazy reader of a safetensors file, over tensorfile's reader.

:class:`safe_open` opens a path or a URL, :class:`_safe_open_handle` a file object you
already opened (fsspec and object-store files included); :class:`SafeSlice` reads only the
part of a tensor you index. Tensors come out through a framework adapter
(:func:`tensorfile.frameworks.get_framework`). Errors are :class:`SafetensorError` subclasses
with the reference's words where code matches on them (a missing file is "No such file or
directory: ..."). The public face is :mod:`tensorfile.safetensors`.

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors.numpy import save_file
    >>> save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "w.safetensors")
    >>> with safe_open("w.safetensors", framework="np") as f:
    ...     f.keys(), f.get_slice("w")[1, ::2].tolist()
    (['w'], [3.0, 5.0])
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from tensorfile.core.digests import verified
from tensorfile.core.errors import (
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
    UnsupportedError,
    naming,
)
from tensorfile.core.reader import names_list
from tensorfile.core.source import Source
from tensorfile.formats.safetensors._reader import SafetensorsReader
from tensorfile.formats.safetensors._slices import reference_index
from tensorfile.frameworks import Framework, get_framework
from tensorfile.sources import CacheDir, MemorySource, is_url, open_input
from tensorfile.sources.local.fileobj import open_file_object

__all__ = ["SafeSlice", "_safe_open_handle", "safe_open"]

_BACKENDS = ("mmap", "pread")
"""The ``backend`` values :class:`safe_open` accepts (the reference's)."""


def _open_reader(
    filename: str | os.PathLike[str], verify: bool = False, cache_dir: CacheDir = None
) -> SafetensorsReader:
    """A :class:`~tensorfile.core.reader.Reader` over a safetensors file (a path or a URL)."""
    if not isinstance(filename, str | os.PathLike):
        raise InvalidTypeError(
            f"filename must be a str or os.PathLike, got {type(filename).__name__}"
        )
    try:
        with open_input(filename, cache_dir=cache_dir) as source, naming(source.name):
            reader = SafetensorsReader(source, verify=verify)
    except SafetensorError:
        raise
    except SourceNotFoundError as exc:
        if is_url(filename):  # the source's message: it names the URL without secrets
            raise _as_io_error(exc, SafetensorNotFoundError) from exc
        # the reference's words for a missing path: code matches on them
        name = os.fsdecode(filename)
        missing = SafetensorNotFoundError(f"No such file or directory: {name}")
        missing.path = name
        raise missing from exc
    except SourceError as exc:
        raise _as_io_error(exc, SafetensorIOError) from exc
    return verified(reader, source.name) if verify else reader


def _as_io_error(exc: SourceError, kind: type[SafetensorIOError]) -> SafetensorIOError:
    """``exc`` as the safetensors error ``kind``, with its message and the file it names."""
    err = kind(str(exc))
    err.path = exc.path
    return err


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
        with naming(source.name):
            return SafetensorsReader(source)
    except SafetensorError:
        source.close()
        raise
    except SourceError as exc:
        source.close()
        raise _as_io_error(exc, SafetensorIOError) from exc


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
        cache_dir: a folder that caches a remote file chunk by chunk (``True``: the default
            folder; ``False``: none; None: ``$TENSORFILE_CACHE_DIR`` when it is set); see
            :class:`tensorfile.sources.CachedSource`.

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
        verify: bool = False,
        cache_dir: CacheDir = None,
    ) -> None:
        if backend not in _BACKENDS:
            raise InvalidArgumentError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if not isinstance(verify, bool):
            raise InvalidTypeError(f"verify must be a bool, got {type(verify).__name__}")
        self._framework: Framework = _framework(framework, device)
        self._reader: SafetensorsReader | None = _open_reader(filename, verify, cache_dir)
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
        if reader.digests and not copy:  # views bypass the reads that check digests
            for name in names:
                reader.check_stored(name)
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
