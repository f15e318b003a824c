"""Byte sources: local files, memory buffers (and URLs, in a later module)."""

from .base import ReadStats, Source
from .local import LocalSource
from .memory import MemorySource

__all__ = ["LocalSource", "MemorySource", "ReadStats", "Source"]
