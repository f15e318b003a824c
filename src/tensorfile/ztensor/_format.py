"""The zTensor format's hooks for the registry (:mod:`tensorfile.formats`): read the catalog,
open a reader, and rewrite the manifest's ``attributes``.

The manifest ends the file, so an edit whose new manifest is not longer than the old one is
written in place (zero padding before it, then the manifest and the footer); otherwise the
data is copied into a temporary file that gets the new manifest and is renamed into place.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> ztensor.save_file({"w": np.zeros(2, np.float32)}, path, attributes={"a": "1"})
    >>> edit_metadata(path, lambda m: {})
    True
    >>> ztensor.open(path).attributes
    {}
"""

from __future__ import annotations

import struct

from ..core.atomic import rewrite, write_in_place
from ..core.catalog import Catalog
from ..core.source import Source
from ..formats import MetadataChange
from ..sources import LocalSource
from . import _cbor
from ._manifest import FOOTER_SIZE
from ._reader import ZTensorReader, read_catalog

__all__ = ["edit_metadata", "open_reader", "read_catalog"]


def open_reader(source: Source) -> ZTensorReader:
    """A reader over ``source``."""
    return ZTensorReader(source)


def edit_metadata(path: str, change: MetadataChange) -> bool:
    """Give the file at ``path`` the attributes ``change(old)``; True when written in place."""
    with LocalSource(path) as src:
        cat: Catalog = read_catalog(src)
        size = src.size
        start = size - FOOTER_SIZE - cat.header_size
        root = _cbor.decode(src.read(start, cat.header_size))
    root["attributes"] = dict(sorted(change(dict(root.get("attributes") or {})).items()))
    manifest = _cbor.encode(root)
    footer = struct.pack("<Q", len(manifest))
    if len(manifest) <= cat.header_size:
        tail = bytes(cat.header_size - len(manifest)) + manifest + footer
        write_in_place(path, size, start, tail)
        return True
    rewrite(path, b"", 0, start, manifest + footer)
    return False
