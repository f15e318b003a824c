"""Read a safetensors file: its header into a :class:`Catalog`, its tensors through a Reader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
from tensorfile.core.errors import (
    InvalidTensorEntryError,
    MissingTensorError,
    SafetensorIOError,
    SourceError,
    TensorFileError,
)
from tensorfile.core.reader import Reader
from tensorfile.core.source import Source
from tensorfile.formats.safetensors._parse import N_LEN, Header, parse_header, parse_header_length

__all__ = ["SafetensorsReader", "catalog_of", "read_header"]


def read_header(source: Source) -> Header:
    """Read and validate the header of the safetensors file in ``source`` (two reads)."""
    size = source.size
    try:
        prefix = source.read(0, min(N_LEN, size))
        n = parse_header_length(prefix, size)
        data = source.read(N_LEN, n)
    except SourceError as exc:
        raise SafetensorIOError(f"cannot read the header of {source.name}: {exc}") from exc
    return parse_header(data, size)


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
        info = TensorInfo(
            name, dt, shape, {"data": Component(ByteRange(base + start, base + end), dt)}
        )
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
    """A :class:`Reader` whose every error is a :class:`SafetensorError`."""

    def __init__(self, source: Source, header: Header | None = None) -> None:
        self.header = read_header(source) if header is None else header
        super().__init__(source, catalog_of(self.header), not_found=MissingTensorError)

    def keys(self) -> list[str]:
        """Tensor names in file order."""
        return self.header.offset_names()

    def _unholdable(self, info: TensorInfo, exc: BaseException) -> TensorFileError:
        return InvalidTensorEntryError(
            f"tensor {info.name!r}: numpy cannot hold a tensor of {len(info.shape)} "
            f"dimensions and {info.numel:,} elements: {exc}",
            tensor=info.name,
        )

    def _readinto(self, offset: int, buffers: list[memoryview]) -> None:
        try:
            self.source.readinto(offset, buffers)
        except SourceError as exc:
            raise SafetensorIOError(str(exc)) from exc
