"""The format registry: the one door through which every part reads a tensor file.

Each format tensorfile knows is declared once here, as a :class:`Format`: its magic number,
its usual file suffixes, whether a remote read should begin with the end of the file (its
index is there), how its header gives offsets and shapes, and the module that implements it.
That module is imported only when a file of the format is opened, and provides
``read_catalog(source)``, ``open_reader(source)`` and ``edit_metadata(path, change)``
(:class:`FormatModule`).

:func:`open_reader` (``tensorfile.open``), :func:`read_catalog`, the operations, the dataset
reader, the Spark data source and the CLI all go through :func:`detect` and :func:`get`.

Example:
    >>> import numpy as np
    >>> from tensorfile.formats import detect, open_reader
    >>> from tensorfile.safetensors.numpy import save
    >>> from tensorfile.sources import MemorySource
    >>> detect(MemorySource(b"GGUF" + bytes(60))).name
    'gguf'
    >>> with open_reader(save({"w": np.ones((2, 2), np.float32)})) as f:
    ...     f.format, f.info("w").shape, f.view("w").sum()
    ('safetensors', (2, 2), np.float32(4.0))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from ..core.catalog import Catalog
from ..core.errors import InvalidArgumentError
from ..core.reader import Reader
from ..core.source import ByteRequest, RangeRequest, Source, SuffixRequest
from ..sources import PathOrData, open_input, path_text

__all__ = [
    "FORMATS",
    "GGUF",
    "SAFETENSORS",
    "ZTENSOR",
    "Format",
    "FormatModule",
    "MetadataChange",
    "detect",
    "get",
    "guess",
    "open_reader",
    "read_catalog",
]

FIRST_READ = 100_000
"""Bytes of the first request to a remote file (huggingface_hub's speculative read)."""

MetadataChange = Callable[[Mapping[str, str]], dict[str, str]]
"""Given a file's metadata, the metadata it should have."""


class FormatModule(Protocol):
    """What a format's implementing module provides."""

    def read_catalog(self, source: Source) -> Catalog:
        """Read and validate the header, return the catalog."""
        ...

    def open_reader(self, source: Source) -> Reader:
        """A reader over ``source`` (which the reader then owns)."""
        ...

    def edit_metadata(self, path: str, change: MetadataChange) -> bool:
        """Rewrite the metadata of the local file ``path``; True when done in place."""
        ...


@dataclass(frozen=True, slots=True)
class Format:
    """One file format.

    Attributes:
        name: the name ``format=`` takes and catalogs carry.
        title: the name messages use.
        magic: the first bytes of every file of the format (empty: none).
        suffixes: file name endings that suggest the format before a byte is read.
        tail_first: the header is at the end of the file: a remote read starts there.
        relative_offsets: the header gives data offsets from the start of the data region
            (else: from the start of the file).
        reversed_shapes: the header lists dimensions innermost first (GGUF).
        editable: tensorfile can rewrite its metadata.
        module: the implementing module (imported on first use).
    """

    name: str
    title: str
    magic: bytes
    suffixes: tuple[str, ...]
    tail_first: bool
    relative_offsets: bool
    reversed_shapes: bool
    editable: bool
    module: str

    def impl(self) -> FormatModule:
        """The implementing module."""
        return cast(FormatModule, importlib.import_module(self.module))

    def first_request(self, size: int = FIRST_READ) -> ByteRequest:
        """The first request to a remote file of this format: its head or its tail."""
        return SuffixRequest(size) if self.tail_first else RangeRequest(0, size)


SAFETENSORS = Format(
    name="safetensors",
    title="safetensors",
    magic=b"",  # an 8-byte header length, then '{': recognised by its reader
    suffixes=(".safetensors",),
    tail_first=False,
    relative_offsets=True,
    reversed_shapes=False,
    editable=True,
    module="tensorfile.safetensors._format",
)
ZTENSOR = Format(
    name="ztensor",
    title="zTensor",
    magic=b"ZTEN",
    suffixes=(".zt",),
    tail_first=True,
    relative_offsets=False,
    reversed_shapes=False,
    editable=True,
    module="tensorfile.ztensor._format",
)
GGUF = Format(
    name="gguf",
    title="GGUF",
    magic=b"GGUF",
    suffixes=(".gguf",),
    tail_first=False,
    relative_offsets=True,
    reversed_shapes=True,
    editable=False,
    module="tensorfile.gguf",
)

FORMATS: dict[str, Format] = {f.name: f for f in (SAFETENSORS, ZTENSOR, GGUF)}
"""Every format, by name. safetensors, which has no magic number, is the fallback."""

_MAGIC_BYTES = max(len(f.magic) for f in FORMATS.values())


def get(name: str) -> Format:
    """The format called ``name``; :class:`InvalidArgumentError` when there is none."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown format {name!r}; known: {', '.join(FORMATS)}"
        ) from None


def guess(path: str) -> Format | None:
    """The format a file name suggests, before any byte is read."""
    for fmt in FORMATS.values():
        if path.endswith(fmt.suffixes):
            return fmt
    return None


def detect(source: Source) -> Format:
    """The format of the file in ``source``, from its first bytes."""
    head = source.read(0, min(_MAGIC_BYTES, source.size))
    for fmt in FORMATS.values():
        if fmt.magic and head.startswith(fmt.magic):
            return fmt
    return SAFETENSORS


def _first(path_or_data: PathOrData, fmt: Format | None) -> ByteRequest | None:
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        return None
    hint = fmt or guess(path_text(path_or_data))
    return hint.first_request() if hint is not None else None


def open_reader(path_or_data: PathOrData, *, format: str | None = None) -> Reader:
    """Open a tensor file (a path, an ``http(s)://`` or fsspec URL, or its bytes) and return
    a :class:`~tensorfile.core.reader.Reader`. Over HTTP, the header costs one range request
    when it fits in the first 100,000 bytes, and each tensor one more.

    The format is detected from the first bytes unless ``format`` names it. The reader has
    ``keys()``, ``metadata``, ``info(name)``, ``view(name)`` (zero-copy, read-only),
    ``get_tensor(name)`` (an owned copy) and ``read_slice(name, index)``, and is a context
    manager.

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> with tensorfile.open(save({"w": np.ones((2, 2), np.float32)})) as f:
        ...     f.format, f.info("w").shape, f.view("w").sum()
        ('safetensors', (2, 2), np.float32(4.0))
    """
    fmt = get(format) if format is not None else None
    with open_input(path_or_data, first=_first(path_or_data, fmt)) as source:
        return (fmt or detect(source)).impl().open_reader(source)


def read_catalog(path_or_data: PathOrData, *, format: str | None = None) -> Catalog:
    """The catalog of a tensor file, from its header alone (the source is closed after).

    Example:
        >>> import numpy as np
        >>> from tensorfile.safetensors.numpy import save
        >>> read_catalog(save({"w": np.zeros(3, np.int8)})).tensors["w"].shape
        (3,)
    """
    fmt = get(format) if format is not None else None
    with open_input(path_or_data, first=_first(path_or_data, fmt)) as source:
        try:
            return (fmt or detect(source)).impl().read_catalog(source)
        finally:
            source.close()
