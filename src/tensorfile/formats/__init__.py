"""The format registry: the one door through which every part reads a tensor file.

Each format tensorfile knows is declared once here, as a :class:`Format`: its magic number,
its usual file suffixes, whether a remote read should begin with the end of the file (its
index is there), how its header gives offsets and shapes, and the module that implements it.
That module is imported only when a file of the format is opened, and provides
``read_catalog(source)``, ``open_reader(source)`` and ``edit_metadata(path, change)``
(:class:`FormatModule`).

:func:`open_reader` (``tensorfile.open``), :func:`read_catalog`, the operations, the dataset
reader, the Spark data source and the CLI all go through :func:`detect` and :func:`get`.

The content decides the format, never the name (a GGUF file named ``*.safetensors`` is
read as GGUF): a file name only chooses a remote file's first request (:func:`guess`).
Bytes of no known format are an :class:`~tensorfile.errors.UnknownFormatError` that says
what they look like; sharded checkpoint indexes are recognised and refused with an
:class:`~tensorfile.errors.UnsupportedError` naming them. zTensor v1.0 and v2 files are both
the ``ztensor`` format (their magic numbers tell the containers apart). ``format=`` skips
detection. The drop-in :func:`tensorfile.safetensors.safe_open` reads safetensors only and
never detects.

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
from ..core.errors import (
    InvalidArgumentError,
    TensorFileError,
    UnknownFormatError,
    UnsupportedError,
)
from ..core.reader import Reader
from ..core.source import ByteRequest, RangeRequest, Source, SuffixRequest
from ..sources import PathOrData, open_input, path_text
from . import _sniff

__all__ = [
    "DETECT_BYTES",
    "FORMATS",
    "GGUF",
    "SAFETENSORS",
    "ZTENSOR",
    "ZTENSOR_V2_MAGIC",
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
    module="tensorfile.formats.safetensors._format",
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
    module="tensorfile.formats.ztensor._hooks",  # v1.0 (.v1._format) and v2
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
    module="tensorfile.formats.gguf",
)

FORMATS: dict[str, Format] = {f.name: f for f in (SAFETENSORS, ZTENSOR, GGUF)}
"""Every format tensorfile reads, by name. safetensors, which has no magic number, is
recognised by its header (:func:`detect`)."""

ZTENSOR_V2_MAGIC = b"\x89ZT2\r\n\x1a\n"
"""zTensor v2's magic (PNG-style: a high-bit byte, CR LF, SUB, LF): :func:`detect` gives
such a file (from its first four bytes) to the ``ztensor`` format, whose reader checks the
rest."""

DETECT_BYTES = 9
"""The bytes :func:`detect` reads to recognise a file: the magic numbers (four bytes) and
safetensors' 8-byte length with the ``{`` after it (a remote source keeps its first 64
bytes, so the reader that follows reads them again without a request)."""

_SNIFF_BYTES = 4096  # read to say what an unknown file looks like
_SMALL_JSON = 1 << 20  # a JSON file this small is parsed to see whether it is an index
_MAX_INDEX_BYTES = 64 << 20  # the largest index parsed (as the operations' limit)
_SHORTEST = 10  # no tensor file is shorter (safetensors: the length prefix and "{}")


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
    """The format of the file in ``source``, from its content, never its name: a GGUF file
    named ``*.safetensors`` is GGUF.

    A format with a magic number is recognised by it; safetensors, which has none, by its
    header: an 8-byte little-endian length under 2**32, then ``{``. A length that fits in
    the file followed by JSON whitespace and then ``{`` or ``[`` is taken for safetensors
    too, so that its reader says what is wrong (the reference's JSON parser skips leading
    whitespace; tensorfile's reader, like the spec, wants ``{`` at byte 8). Reads the first
    9 bytes (:data:`DETECT_BYTES`), more only on the way to an error.

    Raises:
        UnknownFormatError: the bytes are no format tensorfile knows (the message says what
            they look like, an HTML page, a JSON document..., and shows the first ones).
        UnsupportedError: a format tensorfile recognises but cannot read yet: a sharded
            checkpoint's index (``model.safetensors.index.json``).

    Example:
        >>> from tensorfile.sources import MemorySource
        >>> detect(MemorySource(b"ZTEN1000" + bytes(60))).title
        'zTensor'
        >>> try:
        ...     detect(MemorySource(b"<!DOCTYPE html><html>", name="ls.safetensors"))
        ... except UnknownFormatError as exc:
        ...     print(exc)
        ls.safetensors looks like an HTML page, not a tensor file tensorfile knows \
(safetensors, zTensor, GGUF): its first 16 of 21 bytes are b'<!DOCTYPE html><'...
    """
    size = source.size
    head = source.read(0, min(DETECT_BYTES, size))
    for fmt in FORMATS.values():
        if fmt.magic and head.startswith(fmt.magic):
            return fmt
    if head.startswith(ZTENSOR_V2_MAGIC[:4]):
        return ZTENSOR  # zTensor v2: the same format, its own container
    if _is_safetensors(source, head):
        return SAFETENSORS
    raise _not_a_tensor_file(source, head)


def _is_safetensors(source: Source, head: bytes) -> bool:
    """Whether ``head`` (the first bytes of ``source``) starts a safetensors file."""
    if len(head) <= 8:
        return False
    n = int.from_bytes(head[:8], "little")
    if head[8:9] == b"{" and n < 1 << 32:  # the reader then checks n (limit, end of file)
        return True
    if not 0 < n <= source.size - 8:
        return False
    body = head[8 : 8 + n].lstrip(_sniff.JSON_WHITESPACE)
    if not body and 8 + n > len(head):  # all whitespace so far: look a little further
        more = source.read(8, min(n, _SNIFF_BYTES))
        body = more.lstrip(_sniff.JSON_WHITESPACE)
    return body[:1] in (b"{", b"[")


def _not_a_tensor_file(source: Source, head: bytes) -> TensorFileError:
    """The error for a file detection does not recognise, saying what it looks like."""
    name, size = source.name, source.size
    known = ", ".join(f.title for f in FORMATS.values())
    if size == 0:
        return UnknownFormatError(
            f"{name} is empty (0 bytes), not a tensor file tensorfile knows ({known})",
            path=name,
        )
    sniff = head if size <= len(head) else source.read(0, min(size, _SNIFF_BYTES))
    if (
        _sniff.looks_like_json(sniff)
        and (b'"weight_map"' in sniff or size <= _SMALL_JSON)
        and size <= _MAX_INDEX_BYTES
    ):
        data = sniff if size <= len(sniff) else source.read(0, size)
        shards = _sniff.index_shards(data)
        if shards is not None:
            return UnsupportedError(_index_message(name, shards))
    what = _sniff.looks_like(sniff)
    prefix = f"{name} looks like {what}, not" if what else f"{name} is not"
    first = sniff[: _sniff.SHOWN_BYTES]
    if size < _SHORTEST:
        detail = (
            f"it is only {size} byte{'s' if size > 1 else ''} long ({_sniff.shown(sniff)}), "
            "too short for any of them"
        )
    elif size <= len(first):
        detail = f"its {size} bytes are {_sniff.shown(sniff)}"
    else:
        detail = f"its first {len(first)} of {size:,} bytes are {_sniff.shown(sniff)}"
    return UnknownFormatError(
        f"{prefix} a tensor file tensorfile knows ({known}): {detail}",
        path=name,
        head=first,
        size=size,
    )


def _index_message(name: str, shards: list[str]) -> str:
    listed = ", ".join(_sniff.printable(s) for s in shards[:3])
    more = f" and {len(shards) - 3:,} more" if len(shards) > 3 else ""
    which = f" ({listed}{more})" if shards else ""
    return (
        f"{name} is a sharded checkpoint index (like model.safetensors.index.json) naming "
        f"{len(shards):,} shard{'' if len(shards) == 1 else 's'}{which}, not a tensor file: "
        "open the shards themselves (reading a checkpoint through its index is not supported "
        "yet)"
    )


def _first(path_or_data: PathOrData, fmt: Format | None) -> ByteRequest | None:
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        return None
    hint = fmt or guess(path_text(path_or_data))
    return hint.first_request() if hint is not None else None


def open_reader(
    path_or_data: PathOrData, *, format: str | None = None, allow_full_download: bool | None = None
) -> Reader:
    """Open a tensor file (a path, an ``http(s)://`` or fsspec URL, or its bytes) and return
    a :class:`~tensorfile.core.reader.Reader`. Over HTTP, the header costs one range request
    when it fits in the first 100,000 bytes, and each tensor one more.

    From a server that ignores ``Range`` (it sends the whole file for every request),
    tensorfile reads only as far as each read needs, keeps what it read, and reads at most
    64 MiB unless ``allow_full_download=True`` (or ``$TENSORFILE_ALLOW_FULL_DOWNLOAD=1``).

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
    first = _first(path_or_data, fmt)
    with open_input(path_or_data, first=first, allow_full_download=allow_full_download) as source:
        return (fmt or detect(source)).impl().open_reader(source)


def read_catalog(
    path_or_data: PathOrData, *, format: str | None = None, allow_full_download: bool | None = None
) -> Catalog:
    """The catalog of a tensor file, from its header alone (the source is closed after);
    ``allow_full_download`` as for :func:`open_reader`.

    Example:
        >>> import numpy as np
        >>> from tensorfile.safetensors.numpy import save
        >>> read_catalog(save({"w": np.zeros(3, np.int8)})).tensors["w"].shape
        (3,)
    """
    fmt = get(format) if format is not None else None
    first = _first(path_or_data, fmt)
    with open_input(path_or_data, first=first, allow_full_download=allow_full_download) as source:
        try:
            return (fmt or detect(source)).impl().read_catalog(source)
        finally:
            source.close()
