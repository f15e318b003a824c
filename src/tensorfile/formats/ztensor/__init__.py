"""tensorfile.formats.ztensor: see the package docstring of tensorfile.formats."""

from tensorfile.formats.ztensor._codecs import MAX_ZSTD_RATIO

__all__ = ["MAX_ZSTD_RATIO"]
