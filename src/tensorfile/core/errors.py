"""The exceptions tensorfile raises, as one tree.

Every error raised on bad input or a failed operation derives from :class:`TensorFileError`.
An exception from a dependency (``OSError``, ``msgspec``, ``UnicodeDecodeError``, ...) is
translated where it crosses into tensorfile and chained with ``from``::

    TensorFileError
    ├── FormatError                 a header or manifest is invalid (format, offset, tensor)
    │   ├── SafetensorError         anything wrong while reading or writing safetensors
    │   │   ├── HeaderTooSmallError         file shorter than the 8-byte length prefix
    │   │   ├── HeaderTooLargeError         declared header length over 100,000,000 bytes
    │   │   ├── InvalidHeaderLengthError    declared header length runs past the end of file
    │   │   ├── HeaderEncodingError         header bytes are not UTF-8
    │   │   ├── HeaderSyntaxError           not JSON, not an object, or not starting with '{'
    │   │   ├── DuplicateTensorError        the same tensor name twice
    │   │   ├── InvalidTensorEntryError     dtype/shape/data_offsets missing or malformed
    │   │   ├── SafetensorUnsupportedError  a framework or dtype the drop-in cannot handle
    │   │   │   │                           (+ UnsupportedError)
    │   │   │   └── UnknownDtypeError       a dtype the format does not define
    │   │   ├── SafetensorArgumentError     an unusable device or argument (+ InvalidArgumentError)
    │   │   ├── InvalidMetadataError        __metadata__ is not a map of strings to strings
    │   │   ├── InvalidOffsetsError         offsets overlap, leave a hole or do not start at 0
    │   │   ├── IncompleteBufferError       offsets do not end at the end of the file
    │   │   ├── ValidationOverflowError     shape x bits does not fit in 64 bits
    │   │   ├── TensorSizeMismatchError     shape x bits disagrees with the byte length
    │   │   ├── MisalignedSubByteError      a sub-byte tensor whose bits are not a multiple of 8
    │   │   ├── MissingTensorError          no tensor of that name (+ TensorNotFoundError)
    │   │   ├── SafetensorChecksumError     a tensor's digest (tensorfile.digests) does not
    │   │   │                               match its bytes (+ ChecksumError)
    │   │   ├── SafetensorSliceError        a get_slice index the reference refuses
    │   │   │                               (+ InvalidArgumentError)
    │   │   └── SafetensorIOError           the file could not be read (+ SourceError)
    │   │       └── SafetensorNotFoundError     no such file (+ FileNotFoundError)
    │   ├── ZTensorError            anything wrong while reading or writing zTensor
    │   │   ├── ZTensorChecksumError        a component's digest does not match (+ ChecksumError)
    │   │   ├── ZTensorUnsupportedError     unknown dtype, encoding, digest, major version
    │   │   │                               (+ UnsupportedError)
    │   │   ├── ZTensorMissingError         no tensor or component of that name
    │   │   │                               (+ TensorNotFoundError)
    │   │   └── ZTensorIOError              the file could not be read (+ SourceError)
    │   ├── GGUFError               a GGUF header is invalid or cannot be read
    │   ├── NpzChecksumError        an npz member's bytes do not match the CRC-32 its zip
    │   │                           archive records (+ ChecksumError)
    │   └── UnknownFormatError      not a tensor file tensorfile knows (an HTML page, a JSON
    │                               document, random bytes, an empty file)
    ├── ChecksumError               a stored digest does not match the bytes
    ├── UnsupportedError            a dtype, codec, framework or version tensorfile cannot handle
    ├── SourceError                 I/O failed: a file, an HTTP server, a range not honoured
    │                               (also an OSError)
    │   ├── SourceNotFoundError     no such file or URL (also a FileNotFoundError)
    │   ├── ConcurrentWriteError    another writer changed a dataset while this one wrote
    │   └── PeerError               another rank of a cooperative load failed or was lost
    ├── TensorNotFoundError         no tensor of that name (also a KeyError)
    ├── InvalidArgumentError        a caller passed something unusable (also a ValueError)
    │   ├── InvalidTypeError        ... of the wrong type (also a TypeError)
    │   └── UnsavableTensorError    a tensor with no bytes to save (also a RuntimeError)
    └── SharedTensorsError          tensors to save share memory (also a RuntimeError)

Warnings are not errors: tensorfile issues them, through :mod:`warnings`, for what works but
is not what was asked for or what the spec recommends. They share a base, so that a program
can turn every one of them into an error::

    TensorFileWarning               (a UserWarning)
    ├── NoDigestsWarning            verify=True, but no stored digest covers some tensors
    └── ZTensorWarning              a zTensor file readable but not as the spec recommends

A format error's message says what is wrong and where: the file, the tensor name and the
byte offset in the file when they are known. The same facts are attributes (``path``,
``format``, ``offset``, ``tensor``) so that programs need not parse messages. Every error
raised while opening a file names it (a path, or a URL without its credentials), however the
format's own words put it: the registry's open path and the drop-in's ``safe_open`` attach it
in one place, :func:`naming`.

Example:
    >>> from tensorfile.errors import FormatError, TensorFileError
    >>> issubclass(FormatError, TensorFileError)
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "ChecksumError",
    "ConcurrentWriteError",
    "DuplicateTensorError",
    "FormatError",
    "GGUFError",
    "HeaderEncodingError",
    "HeaderSyntaxError",
    "HeaderTooLargeError",
    "HeaderTooSmallError",
    "IncompleteBufferError",
    "InvalidArgumentError",
    "InvalidHeaderLengthError",
    "InvalidMetadataError",
    "InvalidOffsetsError",
    "InvalidTensorEntryError",
    "InvalidTypeError",
    "MisalignedSubByteError",
    "MissingTensorError",
    "NoDigestsWarning",
    "NpzChecksumError",
    "PeerError",
    "SafetensorArgumentError",
    "SafetensorChecksumError",
    "SafetensorError",
    "SafetensorIOError",
    "SafetensorNotFoundError",
    "SafetensorSliceError",
    "SafetensorUnsupportedError",
    "SharedTensorsError",
    "SourceError",
    "SourceNotFoundError",
    "TensorFileError",
    "TensorFileWarning",
    "TensorNotFoundError",
    "TensorSizeMismatchError",
    "UnknownDtypeError",
    "UnknownFormatError",
    "UnsavableTensorError",
    "UnsupportedError",
    "ValidationOverflowError",
    "ZTensorChecksumError",
    "ZTensorError",
    "ZTensorIOError",
    "ZTensorMissingError",
    "ZTensorUnsupportedError",
    "ZTensorWarning",
]
# (name_file and naming are for tensorfile's own open paths: not in __all__, so the public
# tensorfile.errors holds the exceptions only)


class TensorFileError(Exception):
    """Base of every error tensorfile raises on bad input or a failed operation.

    Attributes:
        path: the file the error concerns (a path, or a URL without its credentials), when
            known: set where a file is opened (:func:`naming`), and named in the message too.
    """

    path: str | None = None


class FormatError(TensorFileError):
    """A header or manifest is invalid.

    Attributes:
        format: ``"safetensors"``, ``"ztensor"``, ... or ``None`` when unknown.
        offset: byte offset in the file where the problem is, when known.
        tensor: the tensor the problem concerns, when known.
    """

    format: str | None = None

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        tensor: str | None = None,
        format: str | None = None,
    ) -> None:
        super().__init__(message)
        self.offset = offset
        self.tensor = tensor
        if format is not None:
            self.format = format


class ChecksumError(TensorFileError):
    """A stored digest does not match the bytes it covers."""


class UnsupportedError(TensorFileError):
    """A dtype, codec, framework or format version that tensorfile cannot handle."""


class SourceError(TensorFileError, OSError):
    """Reading or writing the underlying file, buffer or URL failed. Also an ``OSError``, as
    the reference's I/O errors are, so ``except OSError`` works."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """The file (or URL) does not exist. Also a ``FileNotFoundError``."""


class ConcurrentWriteError(SourceError):
    """Another writer committed to the same dataset while this one was writing (an append
    racing an overwrite, two jobs at once), or held it past the wait: this write published
    nothing (the dataset is the other writer's) and can be run again. ``changed`` names the
    file another writer changed, when that is what happened."""

    def __init__(self, message: str, *, changed: str | None = None) -> None:
        super().__init__(message)
        self.changed = changed


class PeerError(SourceError):
    """Another rank of a cooperative load (``tensorfile.distributed.load(group=...)``) failed,
    stopped or opened another checkpoint: the bytes this rank was to receive from it never
    came. Every rank of the group raises it (the failing rank raises its own error)."""


class TensorNotFoundError(TensorFileError, KeyError):
    """No tensor of the requested name. Also a ``KeyError``, so ``except KeyError`` works."""

    def __str__(self) -> str:
        # KeyError quotes its argument; a message reads better as plain text.
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(TensorFileError, ValueError):
    """A caller passed an argument tensorfile cannot use. Also a ``ValueError``."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """A caller passed an argument of a type tensorfile cannot use. Also a ``TypeError``
    (and, as every :class:`InvalidArgumentError`, a ``ValueError``)."""


class UnsavableTensorError(InvalidArgumentError, RuntimeError):
    """A tensor that has no bytes to save (on torch's meta device, nested). Also a
    ``RuntimeError``, which is what the reference raises there."""


class SharedTensorsError(TensorFileError, RuntimeError):
    """Tensors to be saved share memory (use ``save_model``). Also a ``RuntimeError``."""


class SafetensorError(FormatError):
    """Anything wrong while reading or writing a safetensors file."""

    format = "safetensors"


class HeaderTooSmallError(SafetensorError):
    """The file is shorter than the 8-byte header-length prefix."""


class HeaderTooLargeError(SafetensorError):
    """The declared header length is over the 100,000,000-byte limit."""


class InvalidHeaderLengthError(SafetensorError):
    """The declared header length runs past the end of the file."""


class HeaderEncodingError(SafetensorError):
    """The header bytes are not valid UTF-8."""


class HeaderSyntaxError(SafetensorError):
    """The header is not JSON, not a JSON object, or does not begin with ``{``."""


class DuplicateTensorError(SafetensorError):
    """The header names the same tensor twice."""


class InvalidTensorEntryError(SafetensorError):
    """A tensor entry lacks ``dtype``/``shape``/``data_offsets`` or has malformed values."""


class SafetensorUnsupportedError(SafetensorError, UnsupportedError):
    """Something the drop-in cannot do: a framework it does not know, a dtype a framework
    lacks (the reference raises ``SafetensorError`` there)."""


class SafetensorArgumentError(SafetensorError, InvalidArgumentError):
    """An unusable argument where the reference raises ``SafetensorError`` (a device the
    framework does not know). Also a ``ValueError``."""


class UnknownDtypeError(SafetensorUnsupportedError):
    """A tensor entry names a dtype the format does not define."""


class InvalidMetadataError(SafetensorError):
    """``__metadata__`` is not a map of strings to strings."""


class InvalidOffsetsError(SafetensorError):
    """Tensor byte ranges overlap, leave a hole, run backwards or do not start at 0."""


class IncompleteBufferError(SafetensorError):
    """The tensor byte ranges do not end exactly at the end of the file.

    ``past_end`` names the tensors whose bytes run past the end of a file cut short (empty
    when the file is longer than its tensors)."""

    past_end: tuple[str, ...] = ()


class ValidationOverflowError(SafetensorError):
    """The element count times the dtype's bits does not fit in 64 bits."""


class TensorSizeMismatchError(SafetensorError):
    """The shape and dtype disagree with the tensor's byte length."""


class MisalignedSubByteError(SafetensorError):
    """A sub-byte tensor (F4, F6) whose total bits are not a multiple of 8."""


class MissingTensorError(SafetensorError, TensorNotFoundError):
    """The safetensors file has no tensor of the requested name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SafetensorIOError(SafetensorError, SourceError):
    """Reading the safetensors file failed (it was truncated, removed, unreadable)."""


class SafetensorNotFoundError(SafetensorIOError, SourceNotFoundError):
    """The safetensors file does not exist. Also a ``FileNotFoundError``."""


class SafetensorSliceError(SafetensorError, InvalidArgumentError):
    """A ``get_slice`` index the reference refuses (out of range, a non-empty list)."""


class ZTensorError(FormatError):
    """Anything wrong while reading or writing a zTensor file."""

    format = "ztensor"


class SafetensorChecksumError(SafetensorError, ChecksumError):
    """A safetensors tensor's digest (``tensorfile.digests`` metadata) does not match."""


class ZTensorChecksumError(ZTensorError, ChecksumError):
    """A zTensor component's stored digest does not match its stored bytes."""


class ZTensorUnsupportedError(ZTensorError, UnsupportedError):
    """A zTensor dtype, encoding, digest algorithm or major version tensorfile cannot read."""


class ZTensorMissingError(ZTensorError, TensorNotFoundError):
    """The zTensor file has no tensor (or component) of the requested name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ZTensorIOError(ZTensorError, SourceError):
    """Reading or writing the zTensor file failed (truncated, removed, unreadable)."""


class TensorFileWarning(UserWarning):
    """Base of the warnings tensorfile issues: ``warnings.simplefilter("error",
    TensorFileWarning)`` makes each of them an exception.

    Example:
        >>> import warnings
        >>> from tensorfile.errors import NoDigestsWarning, TensorFileWarning
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", TensorFileWarning)
        ...     try:
        ...         warnings.warn("m.safetensors stores no digests", NoDigestsWarning)
        ...     except TensorFileWarning as w:
        ...         print(type(w).__name__, w)
        NoDigestsWarning m.safetensors stores no digests
    """


class NoDigestsWarning(TensorFileWarning):
    """A read asked to verify (``verify=True``) a file with tensors no stored digest
    covers: the file stores no digests at all (safetensors saved without ``checksum=``,
    GGUF, npz...), or its digests leave some tensors out. Those tensors are read, but a
    changed byte inside a valid value cannot be seen. The message names them (the first
    few, and how many); turn it into an error where verification must cover every tensor::

        warnings.simplefilter("error", tensorfile.errors.NoDigestsWarning)
    """


class ZTensorWarning(TensorFileWarning):
    """A zTensor file is readable but not as the spec recommends (a newer minor version, a
    component offset that is not 64-byte aligned)."""


class GGUFError(FormatError):
    """A GGUF header is invalid, truncated, or claims more than the file holds."""

    format = "gguf"


class NpzChecksumError(FormatError, ChecksumError):
    """An ``.npz`` member's bytes do not match the CRC-32 its zip archive records for it:
    the file changed after it was written (a stored member's CRC-32 is compared whenever
    its bytes have all been read, a deflated member's as it is inflated)."""

    format = "npz"


class UnknownFormatError(FormatError):
    """The bytes are not a tensor file tensorfile knows: no known magic number and no
    safetensors header (an HTML page, a JSON document, random bytes, an empty file).

    Raised by format detection (``tensorfile.open``, the operations, the CLI); an explicit
    ``format=`` skips detection, and the format's reader then says what is wrong.

    Attributes:
        path: what messages call the file (a URL without its credentials).
        head: the first bytes of the file (at most 16).
        size: the file's size in bytes.
    """

    def __init__(
        self, message: str, *, path: str | None = None, head: bytes = b"", size: int = 0
    ) -> None:
        super().__init__(message, offset=0)
        self.path = path
        self.head = head
        self.size = size


def quoted_name(name: str) -> str:
    """A file's name for a message: as it is, or, where it holds what a terminal should not
    be sent (a line break, an escape sequence), quoted with escapes (repr-style).

    Example:
        >>> print(quoted_name("m.safetensors"), quoted_name("evil\\n\\x1b[31m.safetensors"))
        m.safetensors 'evil\\n\\x1b[31m.safetensors'
    """
    return name if name.isprintable() else repr(name)


def name_file(exc: TensorFileError, name: str) -> None:
    """Make ``exc`` name the file ``name``: ``exc.path`` becomes ``name`` unless it names a
    file already, and the message is prefixed with ``name: `` (:func:`quoted_name`) unless
    it names the file already. A source with no name of its own (bytes in memory:
    ``<memory>``) is not named.

    Example:
        >>> exc = FormatError("header too short", offset=8)
        >>> name_file(exc, "m.safetensors")
        >>> str(exc), exc.path, exc.offset
        ('m.safetensors: header too short', 'm.safetensors', 8)
        >>> name_file(exc, "other.safetensors")  # named already: unchanged
        >>> str(exc)
        'm.safetensors: header too short'
    """
    if not name or (name.startswith("<") and name.endswith(">")):
        return
    if exc.path is None:
        exc.path = name
    message = exc.args[0] if exc.args else None
    named = (name, exc.path, quoted_name(name), quoted_name(exc.path))
    if isinstance(message, str) and not any(_names(message, n) for n in named):
        exc.args = (f"{quoted_name(name)}: {message}", *exc.args[1:])


def _names(message: str, name: str) -> bool:
    """Whether ``message`` names the file ``name``: as a whole word followed by a colon, a
    quote, a bracket, the end, or a space and ``looks``/``is``/``has`` (a short file name,
    ``header``, is not named by "header length ... runs past the end")."""
    import re

    pattern = rf"(?:^|[\s'\"(]){re.escape(name)}(?::|['\")\]]|$|\s+(?:looks|is|has)\b)"
    return re.search(pattern, message) is not None


@contextmanager
def naming(name: str) -> Iterator[None]:
    """Make sure an error of tensorfile's raised in the block names the file ``name``
    (:func:`name_file`): the one place where opening a file attaches its name.

    Example:
        >>> try:
        ...     with naming("m.safetensors"):
        ...         raise InvalidArgumentError("header too short")
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        m.safetensors: header too short
    """
    try:
        yield
    except TensorFileError as exc:
        name_file(exc, name)
        raise
