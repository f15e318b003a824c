"""Read a safetensors file: its header into a :class:`Catalog`, its tensors through a Reader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
from tensorfile.core.digests import Digest
from tensorfile.core.errors import (
    HeaderTooLargeError,
    InvalidTensorEntryError,
    MissingTensorError,
    SafetensorIOError,
    SourceError,
    TensorFileError,
)
from tensorfile.core.plan import Job
from tensorfile.core.reader import Reader, digest_covers_data
from tensorfile.core.source import Source
from tensorfile.formats._sniff import resemblance
from tensorfile.formats.safetensors._digests import InOrder, check, compare, parse_digests
from tensorfile.formats.safetensors._parse import (
    MAX_HEADER_SIZE,
    N_LEN,
    Header,
    parse_header,
    parse_header_length,
)

__all__ = ["SafetensorsReader", "catalog_of", "read_header"]

_CHUNK = 16 << 20  # bytes hashed at a time when a tensor is checked without being copied


def read_header(source: Source) -> Header:
    """Read and validate the header of the safetensors file in ``source`` (two reads)."""
    size = source.size
    try:
        prefix = source.read(0, min(N_LEN, size))
        try:
            n = parse_header_length(prefix, size)
        except HeaderTooLargeError as exc:
            raise _not_safetensors(source, prefix, exc) from None
        data = source.read(N_LEN, n)
    except SourceError as exc:
        raise SafetensorIOError(f"cannot read the header of {source.name}: {exc}") from exc
    return parse_header(data, size)


def _not_safetensors(
    source: Source, prefix: bytes, exc: HeaderTooLargeError
) -> HeaderTooLargeError:
    """``exc`` (a header length over the limit), saying what the file looks like when its
    first bytes are something else (a Git LFS pointer, an HTML page, a JSON error body: what
    a failed download leaves), still a :class:`HeaderTooLargeError`."""
    what = resemblance(source, "a safetensors file")
    if what is None:
        return exc
    n = int.from_bytes(prefix[:N_LEN], "little")
    return HeaderTooLargeError(
        f"{what} (read as a safetensors header length, bytes 0-7 say {n}: over the "
        f"{MAX_HEADER_SIZE}-byte limit)",
        offset=exc.offset,
    )


class _Tensors(Mapping[str, TensorInfo]):
    """The header's tensors as TensorInfo records, built on first access (file order)."""

    __slots__ = ("_cache", "_header")

    def __init__(self, header: Header) -> None:
        self._header = header
        self._cache: dict[str, TensorInfo] = {}

    def _build(self, name: str, pos: int) -> TensorInfo:
        h = self._header
        dt, shape, start, end = h.info(pos)
        base = h.data_start
        data = Component(ByteRange(base + start, base + end), dt)
        info = TensorInfo(name, dt, shape, {"data": data}, offset_base=base)
        self._cache[name] = info
        return info

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._cache.get(name)
        return info if info is not None else self._build(name, self._header.position(name))

    def values(self) -> Iterator[TensorInfo]:  # type: ignore[override]
        """Every tensor, in file order (built without name lookups)."""
        names, cache = self._header.names, self._cache
        for pos in self._header.order:
            name = names[pos]
            info = cache.get(name)
            yield info if info is not None else self._build(name, pos)

    def items(self) -> Iterator[tuple[str, TensorInfo]]:  # type: ignore[override]
        """``(name, info)`` pairs, in file order."""
        for info in self.values():
            yield info.name, info

    def __contains__(self, name: object) -> bool:
        return name in self._header

    def __iter__(self) -> Iterator[str]:
        return iter(self._header.offset_names())

    def __len__(self) -> int:
        return len(self._header)


def catalog_of(header: Header) -> Catalog:
    """The format-neutral catalog of a validated header."""
    return Catalog(
        format="safetensors",
        metadata=dict(header.metadata or {}),
        tensors=_Tensors(header),
        header_size=header.header_size,
        data_start=header.data_start,
    )


class SafetensorsReader(Reader):
    """A :class:`Reader` whose every error is a :class:`SafetensorError`.

    With ``verify=True``, the digests the file records in its ``tensorfile.digests``
    metadata are checked as tensors are read (a :class:`SafetensorChecksumError` naming the
    tensor): every owned read, the first zero-copy view of a tensor and the first slice of
    it (which reads the whole tensor once to check it).
    """

    def __init__(
        self, source: Source, header: Header | None = None, *, verify: bool = False
    ) -> None:
        self.header = read_header(source) if header is None else header
        super().__init__(source, catalog_of(self.header), not_found=MissingTensorError)
        self.verify = verify
        self._recorded: dict[str, str] | None = None
        self.digests = self.recorded() if verify else {}
        self._checked: set[str] = set()

    def recorded(self) -> dict[str, str]:
        """The digests the file's ``tensorfile.digests`` metadata records, by tensor name,
        parsed on first use (an :class:`~tensorfile.errors.InvalidMetadataError` when the
        value is not what tensorfile writes)."""
        if self._recorded is None:
            meta, names = self.catalog.metadata, self.header.names
            self._recorded = parse_digests(meta, names, self.source.name)
        return self._recorded

    def stored_digest(self, name: str, algorithm: str) -> str | None:
        """The digest ``algorithm`` the metadata records for ``name``'s stored bytes (a
        safetensors tensor is stored raw: they are its data bytes); None when it records
        none of that algorithm."""
        if not digest_covers_data(self.info(name)):  # (an unknown name: this format's error)
            return None
        digest = self.recorded().get(name)
        return digest if digest is not None and digest.startswith(algorithm + ":") else None

    def _after_read(self, jobs: list[Job]) -> None:
        for name, _rng, buf in jobs:
            digest = self.digests.get(name)
            if digest is not None:
                check(self.source.name, name, buf, digest)
                self._checked.add(name)

    def check_stored(self, name: str) -> None:
        """Check ``name``'s recorded digest against its stored bytes, once."""
        digest = self.digests.get(name)
        if digest is None or name in self._checked:
            return
        rng = self.info(name).byte_range
        d = Digest(digest.partition(":")[0])
        for pos in range(rng.start, rng.stop, _CHUNK):
            d.update(self.source.read(pos, min(_CHUNK, rng.stop - pos)))
        compare(self.source.name, name, d.value(), digest)
        self._checked.add(name)

    def in_order(self) -> InOrder:
        """A check of the digests this reader compares (none without ``verify``) over the
        file's bytes as they stream past in order: a copy of the whole file."""
        spans = [(n, *self.info(n).byte_range, d) for n, d in self.digests.items()]
        return InOrder(self.source.name, spans)

    def checks_digest(self, name: str) -> bool:
        """Whether reading ``name`` compares the digest the file's metadata records."""
        return self.verify and name in self.digests

    def expected_digest(self, name: str) -> str | None:
        """The digest the file's metadata records for ``name``, when reads compare it."""
        return self.digests.get(name) if self.verify else None

    def compare_digest(self, name: str, got: str) -> None:
        """A :class:`~tensorfile.errors.SafetensorChecksumError` unless ``got`` is the
        recorded digest of ``name``'s bytes."""
        digest = self.expected_digest(name)
        if digest is not None:
            compare(self.source.name, name, got, digest)
            self._checked.add(name)

    def view(self, name: str) -> Any:
        """A zero-copy view (its digest checked first, once, with ``verify=True``)."""
        if self.digests:
            self.check_stored(name)
        return super().view(name)

    def read_slice(self, name: str, key: Any) -> Any:
        """Part of the tensor (with ``verify=True``, the whole tensor is checked once)."""
        if self.digests:
            self.check_stored(name)
        return super().read_slice(name, key)

    def keys(self) -> list[str]:
        """Tensor names in file order."""
        return self.header.offset_names()

    def _unholdable(self, info: TensorInfo, exc: BaseException) -> TensorFileError:
        return InvalidTensorEntryError(
            f"tensor {info.name!r}: numpy cannot hold a tensor of {len(info.shape)} "
            f"dimensions and {info.numel:,} elements: {exc}",
            tensor=info.name,
        )

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        try:
            self.source.readinto(offset, buffers)
        except SourceError as exc:
            raise SafetensorIOError(str(exc)) from exc
