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
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

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
from tensorfile.formats.safetensors._prefetch import (
    PrefetchLoader,
    check_framework,
    prefetch_plan,
)
from tensorfile.formats.safetensors._reader import SafetensorsReader
from tensorfile.formats.safetensors._slices import reference_index
from tensorfile.frameworks import Framework, get_framework
from tensorfile.sources import CacheDir, MemorySource, is_url, open_input
from tensorfile.sources.local.fileobj import open_file_object

__all__ = ["PrefetchLoader", "SafeSlice", "TensorMeta", "_safe_open_handle", "safe_open"]

_BACKENDS = ("mmap", "pread")
"""The ``backend`` values :class:`safe_open` accepts (the reference's)."""

_T = TypeVar("_T")


class TensorMeta(NamedTuple):
    """A tensor's entry in the header: ``safe_open(...).get_tensor_meta(name)``."""

    dtype: str
    shape: list[int]
    data_offsets: tuple[int, int]


def _as_is(source: Source) -> None:
    """(nothing to settle: a plain ``safe_open``)"""


def _open_reader(
    filename: str | os.PathLike[str],
    verify: bool,
    cache_dir: CacheDir,
    settle: Callable[[Source], _T],
) -> tuple[SafetensorsReader, _T]:
    """A :class:`~tensorfile.core.reader.Reader` over a safetensors file (a path or a URL),
    and what ``settle`` (asked with the source, once it is open, before the header is read)
    returned."""
    if not isinstance(filename, str | os.PathLike):
        raise InvalidTypeError(
            f"filename must be a str or os.PathLike, got {type(filename).__name__}"
        )
    try:
        with open_input(filename, cache_dir=cache_dir) as source, naming(source.name):
            settled = settle(source)
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
    return (verified(reader, source.name) if verify else reader), settled


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

    _prefetch: PrefetchLoader | None = None

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
        reader, _ = _open_reader(filename, verify, cache_dir, _as_is)
        self._reader: SafetensorsReader | None = reader
        self._name = os.fspath(filename)

    @classmethod
    def _load(
        cls,
        filename: str | os.PathLike[str],
        framework: str,
        device: Any,
        *,
        verify: bool,
        cache_dir: CacheDir,
        settle: Callable[[Source], _T],
    ) -> tuple[safe_open, _T]:
        """(internal) ``load_file``'s ``safe_open``: the file is opened once, and
        ``settle(source)`` (the loader's one decision of how to read it) is asked with the
        open source before the header is read; returns both."""
        if not isinstance(verify, bool):
            raise InvalidTypeError(f"verify must be a bool, got {type(verify).__name__}")
        f = cls.__new__(cls)
        f._framework = _framework(framework, device)
        f._reader, settled = _open_reader(filename, verify, cache_dir, settle)
        f._name = os.fspath(filename)
        return f, settled

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
        """The whole tensor ``name`` in the chosen framework (an owned copy); after
        :meth:`prefetch`, the planned tensor (or rows) ``name``, handed out once."""
        if self._prefetch is not None:
            return self._prefetch.take(name)
        return self._framework.read(self.reader, [name])[0]

    def get_tensor_meta(self, name: str) -> TensorMeta:
        """``name``'s header entry (dtype, shape, data offsets), without reading it."""
        info = self.reader.info(name)
        start, stop = info.data_offsets
        return TensorMeta(info.stored_dtype, list(info.shape), (start, stop))

    def prefetch(
        self, plan: Any = None, *, device: Any = None, threads: int | None = None
    ) -> PrefetchLoader:
        """Read the tensors (or rows) of ``plan`` ahead, in one planned pass, as the
        reference's ``safe_open.prefetch`` (safetensors 0.9) does.

        ``plan`` maps tensor names to ``None`` (the whole tensor) or a step-1 slice of rows
        (tensorfile also takes any basic index, and :class:`~tensorfile.core.selection.Intervals`);
        ``None`` reads every tensor. Afterwards :meth:`get_tensor` hands out each planned
        tensor once, :meth:`tensor_stream` yields those not yet taken, and :meth:`get_slice`
        and :meth:`get_tensors` are refused. ``device`` (default: the handle's) is where the
        tensors go; ``threads``, how many reads run at once. Returns the loader
        (:class:`~tensorfile.formats.safetensors._prefetch.PrefetchLoader`); see
        :mod:`tensorfile.formats.safetensors._prefetch`.

        Example:
            >>> import numpy as np
            >>> from tensorfile.safetensors.numpy import save_file
            >>> save_file({"w": np.arange(8, dtype=np.int8).reshape(4, 2)}, "w8.safetensors")
            >>> with safe_open("w8.safetensors", framework="pt") as f:
            ...     _ = f.prefetch({"w": slice(-2, 4)})
            ...     f.get_tensor("w").tolist()
            [[4, 5], [6, 7]]
        """
        if self._prefetch is not None:
            raise SafetensorError("prefetch() was already called on this handle")
        reader = self.reader
        regions = prefetch_plan(reader, plan)
        fw = self._framework if device is None else _framework(self._framework.name, device)
        check_framework(fw, reader, regions)
        if threads is not None and (
            not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
        ):
            raise SafetensorArgumentError(f"threads must be a positive int, got {threads!r}")
        self._prefetch = PrefetchLoader(reader, regions, fw, threads)
        return self._prefetch

    def tensor_stream(self) -> Any:
        """``(name, tensor)`` for every prefetched tensor not yet taken, in file order, as it
        lands (without :meth:`prefetch` first: of every tensor, whole)."""
        if self._prefetch is None:
            self.prefetch()
        assert self._prefetch is not None
        return iter(self._prefetch)

    def _not_after_prefetch(self, what: str) -> None:
        if self._prefetch is not None:
            raise SafetensorError(
                f"{what} is not available after prefetch(): get_tensor hands out the planned "
                "tensors"
            )

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, by name, in file order."""
        self._not_after_prefetch("get_tensors")
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
        self._not_after_prefetch("read_tensors")
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
        self._not_after_prefetch("get_slice")
        self.reader.info(name)
        return SafeSlice(self, name)

    def close(self) -> None:
        """Close the file (and stop a prefetch's reads; tensors handed out stay valid)."""
        if self._prefetch is not None:
            self._prefetch.close()
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
