"""``MemorySource`` against the Source conformance suite."""

from __future__ import annotations

from tensorfile.sources import MemorySource, Source
from tests.sources.conformance import SourceConformance


class TestMemorySource(SourceConformance):
    source_cls = MemorySource

    def make(self, data: bytes) -> Source:
        return MemorySource(data)


class TestMemorySourceOverBytearray(SourceConformance):
    """A writable buffer is served as well (without a copy)."""

    source_cls = MemorySource

    def make(self, data: bytes) -> Source:
        return MemorySource(bytearray(data))
