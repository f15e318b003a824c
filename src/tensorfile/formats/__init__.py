"""The format registry: the one door through which every part reads a tensor file.

Each format tensorfile knows is declared once here, as a :class:`Format`: its magic number,
its usual file suffixes, whether a remote read should begin with the end of the file (its
index is there), how its header gives offsets and shapes, and the module that implements it.
That module is imported only when a file of the format is opened, and provides
``read_catalog(source)``, ``open_reader(source)``, ``edit_metadata(path, change)`` where the
format is editable, and, where it is writable, ``check_options(options)`` and
``save(path, tensors, get, metadata, **options)`` (:class:`FormatModule`): the writer side,
which takes the tensors one at a time from ``get(name)`` (memory: about the largest tensor).
:meth:`Format.save` is how :func:`tensorfile.convert` writes; :func:`destination` turns a
name (``safetensors``, ``ztensor``, ``npz``, ``npy``, or an alias: ``zt`` is zTensor v1.0,
``zt2`` zTensor v2) into a format and its options.

Besides the tensor file formats (safetensors, zTensor, GGUF) the registry holds import and
export entries: ``npz`` and ``npy`` (numpy, read and written) and ``pytorch`` (PyTorch
pickles, read only, by tensorfile's own pickle reader: never unpickled). Detection knows them
by their content: an ``.npy`` by its magic and header, a zip archive by its members (``.npy``
members: ``npz``; a ``*/data.pkl``: torch's zip format), and an old PyTorch pickle by the
pickle protocol opcode when the file name also says ``.pt``, ``.pth``, ``.ckpt`` or ``.bin``
(a pickle is not recognisable by its bytes alone).

:func:`open_reader` (``tensorfile.open``), :func:`read_catalog`, the operations, the dataset
reader, the Spark data source and the CLI all go through :func:`detect` and :func:`get`.

The content decides the format, never the name (a GGUF file named ``*.safetensors`` is
read as GGUF): a file name only chooses a remote file's first request (:func:`guess`).
Bytes of no known format are an :class:`~tensorfile.errors.UnknownFormatError` that says
what they look like (a zip archive that holds neither ``.npy`` arrays nor a torch pickle is
"a zip archive"); sharded checkpoint indexes are recognised and refused with an
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, cast

from ..core.catalog import Catalog
from ..core.digests import Verify, checking, verified, warns
from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, UnsupportedError, naming, quoted_name
from ..core.reader import Reader
from ..core.source import FIRST_READ, ByteRequest, RangeRequest, Source, SuffixRequest
from ..sources import CacheDir, PathOrData, open_input, path_text
from . import _sniff
from ._text import metadata_text

__all__ = [
    "ALIASES",
    "DETECT_BYTES",
    "FORMATS",
    "GGUF",
    "NPY",
    "NPZ",
    "PYTORCH",
    "SAFETENSORS",
    "ZTENSOR",
    "ZTENSOR_V2_MAGIC",
    "Format",
    "FormatModule",
    "GetTensor",
    "MetadataChange",
    "TensorSpec",
    "destination",
    "detect",
    "get",
    "guess",
    "known",
    "label",
    "metadata_text",
    "open_reader",
    "read_catalog",
    "writable_names",
]

Key = str | None
"""A dotted name of a dictionary in a :attr:`Format.nested` format's file, or None."""

MetadataChange = Callable[[Mapping[str, str]], dict[str, str]]
"""Given a file's metadata, the metadata it should have."""

GetTensor = Callable[[str], Any]
"""Given a tensor's name, its value: a numpy array (or, for a format that keeps sparse
layouts, a zTensor ``CSRTensor``/``COOTensor``)."""


class TensorSpec(NamedTuple):
    """A tensor a writer is told about before its data: name, dtype, shape, layout."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    layout: str = "dense"


class FormatModule(Protocol):
    """What a format's implementing module provides (the writer side only where the format
    is writable, ``edit_metadata`` only where it is editable)."""

    def read_catalog(self, source: Source) -> Catalog:
        """Read and validate the header, return the catalog."""
        ...

    def open_reader(self, source: Source, *, verify: bool | None = None) -> Reader:
        """A reader over ``source`` (which the reader then owns); ``verify``: check stored
        digests as tensors are read (None: the format's default)."""
        ...

    def edit_metadata(self, path: str, change: MetadataChange) -> bool:
        """Rewrite the metadata of the local file ``path``; True when done in place."""
        ...

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The writer options, checked and completed (defaults filled in)."""
        ...

    def save(
        self,
        path: str,
        tensors: Sequence[TensorSpec],
        get: GetTensor,
        metadata: Mapping[str, Any],
        *,
        tick: Callable[[str], None] | None = None,
        **options: Any,
    ) -> list[str]:
        """Write ``tensors`` to ``path`` atomically, one ``get(name)`` at a time (``tick``
        after each); the files written (a sharded checkpoint: its shards, index last)."""
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
        reversed_shapes: the header lists dimensions innermost first (GGUF).
        editable: tensorfile can rewrite its metadata.
        module: the implementing module (imported on first use); ``module:attribute`` names
            an object of it (one module implementing two formats).
        writable: tensorfile writes it (:meth:`save`).
        sparse: its writer keeps sparse layouts (else they must be made dense first).
        tensor_file: a tensor file format proper, known by its magic number alone; False for
            the import and export entries (numpy arrays, PyTorch pickles), which detection
            checks further. Messages list every format (:func:`known`).
        hint_suffixes: name endings that make content the format if the bytes agree but
            cannot prove it alone (a pickle named ``.bin``); never used by :func:`guess`.
        nested: its files hold nested dictionaries, of which ``key=`` picks one (PyTorch
            pickles: its module's ``open_reader`` and ``read_catalog`` take ``key``).
    """

    name: str
    title: str
    magic: bytes
    suffixes: tuple[str, ...]
    tail_first: bool
    reversed_shapes: bool
    editable: bool
    module: str
    writable: bool = False
    sparse: bool = False
    tensor_file: bool = True
    hint_suffixes: tuple[str, ...] = field(default=())
    nested: bool = False

    def impl(self) -> FormatModule:
        """The implementing module."""
        module, _, attr = self.module.partition(":")
        found: Any = importlib.import_module(module)
        return cast(FormatModule, getattr(found, attr) if attr else found)

    def open_reader(self, source: Source, *, verify: bool | None = None, key: Key = None) -> Reader:
        """The module's reader of ``source``; ``key``: a :attr:`nested` format's dictionary."""
        module: Any = self.impl()  # (only a nested format's module takes ``key``)
        return cast(Reader, module.open_reader(source, verify=verify, **self._key(key, source)))

    def read_catalog(self, source: Source, *, key: Key = None) -> Catalog:
        """The module's catalog of ``source`` (``key``: as for :meth:`open_reader`)."""
        return self.impl().read_catalog(source, **self._key(key, source))

    def _key(self, key: Key, source: Source) -> dict[str, str]:
        if key is None or (self.nested and isinstance(key, str) and key):
            return {} if key is None else {"key": key}
        what = (
            f"picks a PyTorch pickle's dictionary by its dotted name; this is a {self.title} file"
        )
        if not isinstance(key, str) or not key:  # (a nested format's too)
            what = "names no dictionary: give a dotted name, or leave key out to read every entry"
        raise InvalidArgumentError(f"{quoted_name(source.name)}: key={key!r} {what}")

    def first_request(self, size: int = FIRST_READ) -> ByteRequest:
        """The first request to a remote file of this format: its head or its tail."""
        return SuffixRequest(size) if self.tail_first else RangeRequest(0, size)

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The writer options (None values dropped), checked against what this format's
        writer takes; :class:`UnsupportedError` for a format tensorfile does not write.

        Example:
            >>> ZTENSOR.check_options({"version": 2, "checksum": "xxh3", "level": None})
            {'version': 2, 'checksum': 'xxh3'}
            >>> GGUF.check_options({})
            Traceback (most recent call last):
            ...
            tensorfile.core.errors.UnsupportedError: GGUF is read-only: tensorfile reads GGUF \
files but does not write them
        """
        if not self.writable:
            raise UnsupportedError(
                f"{self.title} is read-only: tensorfile reads {self.title} files but does not "
                "write them"
            )
        given = {k: v for k, v in options.items() if v is not None}
        return self.impl().check_options(given)

    def save(
        self,
        path: str,
        tensors: Sequence[TensorSpec],
        get: GetTensor,
        metadata: Mapping[str, Any] | None = None,
        *,
        tick: Callable[[str], None] | None = None,
        **options: Any,
    ) -> list[str]:
        """Write ``tensors`` (specs first, then each one's value from ``get(name)``, one at a
        time) to ``path``, atomically; returns the files written. ``options`` are the
        format's (:meth:`check_options`).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile.core import dtypes
            >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
            >>> spec = TensorSpec("w", dtypes.from_name("F32"), (2,))
            >>> NPZ.save(path, [spec], lambda name: np.ones(2, np.float32)) == [path]
            True
        """
        chosen = self.check_options(options)
        return self.impl().save(path, list(tensors), get, dict(metadata or {}), tick=tick, **chosen)


SAFETENSORS = Format(
    name="safetensors",
    title="safetensors",
    magic=b"",  # an 8-byte header length, then '{': recognised by its reader
    suffixes=(".safetensors",),
    tail_first=False,
    reversed_shapes=False,
    editable=True,
    module="tensorfile.formats.safetensors._format",
    writable=True,
)
ZTENSOR = Format(
    name="ztensor",
    title="zTensor",
    magic=b"ZTEN",
    suffixes=(".zt",),
    tail_first=True,
    reversed_shapes=False,
    editable=True,
    module="tensorfile.formats.ztensor._hooks",  # v1.0 (.v1._format) and v2
    writable=True,
    sparse=True,
)
GGUF = Format(
    name="gguf",
    title="GGUF",
    magic=b"GGUF",
    suffixes=(".gguf",),
    tail_first=False,
    reversed_shapes=True,
    editable=False,
    module="tensorfile.formats.gguf",
)
NPZ = Format(
    name="npz",
    title="npz",
    magic=b"PK\x03\x04",  # a zip archive of .npy members
    suffixes=(".npz",),
    tail_first=True,  # a zip's directory ends it
    reversed_shapes=False,
    editable=False,
    module="tensorfile.formats.numpy_files:NPZ_ENTRY",
    writable=True,
    tensor_file=False,
)
NPY = Format(
    name="npy",
    title="npy",
    magic=b"\x93NUMPY",
    suffixes=(".npy",),
    tail_first=False,
    reversed_shapes=False,
    editable=False,
    module="tensorfile.formats.numpy_files:NPY_ENTRY",
    writable=True,
    tensor_file=False,
)
PYTORCH = Format(
    name="pytorch",
    title="PyTorch pickle",
    magic=b"\x80",  # the pickle protocol opcode (torch's zip format: see detect)
    suffixes=(".pt", ".pth", ".ckpt"),
    tail_first=False,
    reversed_shapes=False,
    editable=False,
    module="tensorfile.formats.torch_pickle",
    tensor_file=False,
    hint_suffixes=(".pt", ".pth", ".ckpt", ".bin"),
    nested=True,
)

FORMATS: dict[str, Format] = {f.name: f for f in (SAFETENSORS, ZTENSOR, GGUF, NPZ, NPY, PYTORCH)}
"""Every format tensorfile reads, by name. safetensors, which has no magic number, is
recognised by its header (:func:`detect`)."""

ALIASES: dict[str, tuple[Format, Mapping[str, Any]]] = {
    "zt": (ZTENSOR, {"version": 1}),
    "zt2": (ZTENSOR, {"version": 2}),
}
"""Destination names that are a format with options: ``zt`` (zTensor v1.0), ``zt2`` (v2)."""

ZTENSOR_V2_MAGIC = b"\x89ZT2\r\n\x1a\n"
"""zTensor v2's magic (PNG-style: a high-bit byte, CR LF, SUB, LF): :func:`detect` gives
such a file (from its first four bytes) to the ``ztensor`` format, whose reader checks the
rest."""

EMPTY_ZIP_MAGIC = b"PK\x05\x06"
"""The first bytes of a zip archive with no members (``np.savez`` of nothing)."""

DETECT_BYTES = 9
"""The bytes :func:`detect` reads to recognise a file: the magic numbers (four bytes) and
safetensors' 8-byte length with the ``{`` after it (a remote source keeps its first 64
bytes, so the reader that follows reads them again without a request)."""

_NPY_HEAD = 12  # an .npy's magic, version and header length, and the header's "{"
_LOOKS_LIKE = (
    (NPY.magic, "a NumPy .npy array"),
    (NPZ.magic, "a zip archive (torch.save writes one: a PyTorch .bin/.pt checkpoint?)"),
)
"""What files of the import formats that are not one look like (for the messages)."""


def writable_names() -> list[str]:
    """The names :func:`destination` takes: the writable formats and the aliases.

    Example:
        >>> writable_names()
        ['safetensors', 'ztensor', 'npz', 'npy', 'zt', 'zt2']
    """
    return [f.name for f in FORMATS.values() if f.writable] + list(ALIASES)


def destination(name: str) -> tuple[Format, dict[str, Any]]:
    """The format a destination name means, with the options the name implies (an alias).

    Example:
        >>> fmt, options = destination("zt2")
        >>> fmt.name, options
        ('ztensor', {'version': 2})
    """
    if name in ALIASES:
        fmt, options = ALIASES[name]
        return fmt, dict(options)
    if name not in FORMATS:
        raise InvalidArgumentError(f"to={name!r}: choose one of {', '.join(writable_names())}")
    return FORMATS[name], {}


def label(fmt: Format, options: Mapping[str, Any]) -> str:
    """The shortest name for ``fmt`` written with ``options``: the alias whose options they
    include, else the format's name.

    Example:
        >>> label(ZTENSOR, {"version": 1, "level": 3}), label(NPZ, {})
        ('zt', 'npz')
    """
    for alias, (target, implied) in ALIASES.items():
        if target is fmt and all(options.get(k) == v for k, v in implied.items()):
            return alias
    return fmt.name


def known() -> str:
    """Every format tensorfile reads, as the words messages and help texts list them.

    Example:
        >>> known()
        'safetensors, zTensor, GGUF, npz, npy, PyTorch pickle'
    """
    return ", ".join(f.title for f in FORMATS.values())


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
        >>> from tensorfile.errors import UnknownFormatError
        >>> from tensorfile.sources import MemorySource
        >>> detect(MemorySource(b"ZTEN1000" + bytes(60))).title
        'zTensor'
        >>> try:
        ...     detect(MemorySource(b"<!DOCTYPE html><html>", name="ls.safetensors"))
        ... except UnknownFormatError as exc:
        ...     print(exc)
        ls.safetensors looks like an HTML page, not a tensor file tensorfile knows \
(safetensors, zTensor, GGUF, npz, npy, PyTorch pickle): its first 16 of 21 bytes are \
b'<!DOCTYPE html><'...
    """
    size = source.size
    head = source.read(0, min(DETECT_BYTES, size))
    for fmt in FORMATS.values():
        if fmt.tensor_file and fmt.magic and head.startswith(fmt.magic):
            return fmt
    if head.startswith(ZTENSOR_V2_MAGIC[:4]):
        return ZTENSOR  # zTensor v2: the same format, its own container
    found = _import_format(source, head)
    if found is not None:
        return found
    if _is_safetensors(source, head):
        return SAFETENSORS
    raise _sniff.not_a_tensor_file(source, head, known(), _LOOKS_LIKE)


def _import_format(source: Source, head: bytes) -> Format | None:
    """The import/export format of ``source`` (npy, npz, a PyTorch pickle) when its content
    says so: an ``.npy`` magic with a version and a header that starts like one; a zip
    archive with ``.npy`` members (npz) or a ``*/data.pkl`` (torch's zip format); the
    pickle protocol opcode in a file whose name says PyTorch (:attr:`Format.hint_suffixes`).
    """
    name = source.name.lower()
    if head.startswith(NPY.magic):
        more = source.read(0, min(source.size, _NPY_HEAD + 1))
        at = 10 if more[6:7] == b"\x01" else 12 if more[6:7] in (b"\x02", b"\x03") else 0
        return NPY if at and more[at : at + 1] == b"{" else None
    if head.startswith(NPZ.magic):
        from ._arrays import zip_names

        names = zip_names(source)
        if names is None:
            from ._arrays import refuse_cut_zip

            refuse_cut_zip(source, NPY.suffixes)
            return None
        if any(n.endswith("/data.pkl") and n.count("/") == 1 for n in names):
            return PYTORCH
        return NPZ if any(n.endswith(NPY.suffixes) for n in names) else None
    if head.startswith(EMPTY_ZIP_MAGIC) and name.endswith(NPZ.suffixes):
        return NPZ
    if head[:1] == PYTORCH.magic and head[1:2] in b"\x02\x03\x04\x05" and head[1:2]:
        if head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 1 << 32:
            return None  # a safetensors header length that starts with 0x80: content wins
        return PYTORCH if name.endswith(PYTORCH.hint_suffixes) else None
    return None


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
        more = source.read(8, min(n, _sniff.SNIFF_BYTES))
        body = more.lstrip(_sniff.JSON_WHITESPACE)
    return body[:1] in (b"{", b"[")


def _first(path_or_data: PathOrData, fmt: Format | None) -> ByteRequest | None:
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        return None
    hint = fmt or guess(path_text(path_or_data))
    return hint.first_request() if hint is not None else None


def open_reader(
    path_or_data: PathOrData,
    *,
    format: str | None = None,
    allow_full_download: bool | None = None,
    verify: Verify = None,
    cache_dir: CacheDir = None,
    key: str | None = None,
) -> Reader:
    """Open a tensor file (a path, an ``http(s)://`` or fsspec URL, or its bytes) and return
    a :class:`~tensorfile.core.reader.Reader`. Over HTTP, the header costs one range request
    when it fits in the first 100,000 bytes, and each tensor one more.

    From a server that ignores ``Range`` (it sends the whole file for every request),
    tensorfile reads only as far as each read needs, keeps what it read, and reads at most
    64 MiB unless ``allow_full_download=True`` (or ``$TENSORFILE_ALLOW_FULL_DOWNLOAD=1``).
    ``cache_dir`` keeps a remote file in a local folder, chunk by chunk (see
    :func:`tensorfile.sources.open_path`).

    The format is detected from the first bytes unless ``format`` names it. ``key`` reads
    one dictionary of a PyTorch pickle (``"model_state_dict"``), named from there on
    (:mod:`tensorfile.formats.torch_pickle`; other formats refuse it). The reader has
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
    opened = open_input(
        path_or_data, first=first, allow_full_download=allow_full_download, cache_dir=cache_dir
    )
    with opened as source, naming(source.name):  # every error names the file
        reader = (fmt or detect(source)).open_reader(source, verify=checking(verify), key=key)
    return verified(reader, source.name) if warns(verify) else reader


def read_catalog(
    path_or_data: PathOrData,
    *,
    format: str | None = None,
    allow_full_download: bool | None = None,
    key: Key = None,
) -> Catalog:
    """The catalog of a tensor file, from its header alone (the source is closed after);
    ``allow_full_download`` and ``key`` as for :func:`open_reader`.

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
            with naming(source.name):
                return (fmt or detect(source)).read_catalog(source, key=key)
        finally:
            source.close()
