"""The safetensors format's hooks for the registry (:mod:`tensorfile.formats`): read the
catalog, open a reader, and rewrite the ``__metadata__`` of a file.

A metadata edit whose new header fits in the old header's space is written in place (padded
with spaces, one write, the tensor bytes untouched); otherwise the file is rewritten by a
streaming copy into a temporary file that is renamed into place, the data region keeping the
alignment it had.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import load_file, save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(2, np.float32)}, path, metadata={"a": "1"})
    >>> edit_metadata(path, lambda m: {**m, "b": "2"})
    False
    >>> from tensorfile.safetensors import safe_open
    >>> safe_open(path, "np").metadata()
    {'a': '1', 'b': '2'}
"""

from __future__ import annotations

from ..core.atomic import rewrite, write_in_place
from ..core.catalog import Catalog
from ..core.source import Source
from ..formats import MetadataChange
from ..sources import LocalSource
from ._encode import encode_header
from ._parse import N_LEN
from ._reader import SafetensorsReader, catalog_of, read_header

__all__ = ["edit_metadata", "open_reader", "read_catalog"]


def read_catalog(source: Source) -> Catalog:
    """The catalog of the safetensors file in ``source``."""
    return catalog_of(read_header(source))


def open_reader(source: Source) -> SafetensorsReader:
    """A reader over ``source``."""
    return SafetensorsReader(source)


def _alignment(offset: int) -> int:
    align = 8
    while align < 4096 and offset % (align * 2) == 0:
        align *= 2
    return align


def edit_metadata(path: str, change: MetadataChange) -> bool:
    """Give the file at ``path`` the metadata ``change(old)``; True when written in place."""
    with LocalSource(path) as src:
        h = read_header(src)
        size = src.size
    items = []
    for pos, name in enumerate(h.names):
        dt, shape, start, end = h.info(pos)
        items.append((name, dt, shape, start, end))
    meta_arg = change(dict(h.metadata or {})) or None
    body = encode_header(items, meta_arg, align=8)[N_LEN:].rstrip(b" ")
    if len(body) <= h.header_size:
        write_in_place(path, size, N_LEN, body + b" " * (h.header_size - len(body)))
        return True
    new = encode_header(items, meta_arg, align=_alignment(h.data_start))
    rewrite(path, new, h.data_start, size - h.data_start, b"")
    return False
