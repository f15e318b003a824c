"""``tensorfile.open``: a tensor file, or a sharded checkpoint, as one reader.

:func:`open` reads what :func:`tensorfile.formats.open_reader` reads, and also a sharded
safetensors checkpoint (:func:`tensorfile.formats.checkpoint.open_checkpoint`): its
``*.safetensors.index.json`` (a path, an ``http(s)://`` URL or an fsspec URL) or a local
folder holding one (a folder holding no index but exactly one ``*.safetensors`` file opens
that file).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> d = tempfile.mkdtemp()
    >>> save_file({"w": np.zeros(2, np.float32)}, os.path.join(d, "m.safetensors"))
    >>> with open(d) as f:
    ...     f.keys()
    ['w']
"""

from __future__ import annotations

import glob
import os

from ..core.digests import Verify
from ..core.errors import InvalidArgumentError, SourceError
from ..core.reader import Reader
from ..sources import CacheDir, PathOrData, is_url, redact
from . import SAFETENSORS, open_reader
from ._index import INDEX_SUFFIX, is_index
from .checkpoint import open_checkpoint

__all__ = ["open"]


def _no_cache_dir(cache_dir: CacheDir, target: str) -> None:
    """Refuse ``cache_dir=`` for a remote checkpoint (its shards take
    ``$TENSORFILE_CACHE_DIR``)."""
    if cache_dir is not None:
        raise InvalidArgumentError(
            f"{redact(target)}: cache_dir= applies to single files; the shards of a checkpoint are "
            "cached through $TENSORFILE_CACHE_DIR"
        )


def _lone_file(folder: str) -> str | None:
    """The folder's one ``*.safetensors`` file; None when it has none; a
    :class:`SourceError` naming them when it has several (which one is meant is unknown)."""
    pattern = "*" + SAFETENSORS.suffixes[0]
    found = sorted(glob.glob(os.path.join(glob.escape(folder), pattern)))
    if len(found) > 1:
        names = ", ".join(os.path.basename(f) for f in found[:5])
        more = f" and {len(found) - 5:,} more" if len(found) > 5 else ""
        raise SourceError(
            f"{folder} is a directory with no *.safetensors.index.json and {len(found):,} "
            f".safetensors files ({names}{more}): pass one of them"
        )
    return found[0] if found else None


def open(
    path_or_data: PathOrData,
    *,
    format: str | None = None,
    allow_full_download: bool | None = None,
    verify: Verify = None,
    cache_dir: CacheDir = None,
    key: str | None = None,
) -> Reader:
    """Open a tensor file, or a sharded checkpoint (see the module docstring), and return a
    :class:`~tensorfile.core.reader.Reader` (a :class:`ShardedReader` for a checkpoint);
    everything else is :func:`tensorfile.formats.open_reader`'s. ``verify=True`` checks the
    digests a file records as its tensors are read (safetensors' ``tensorfile.digests``;
    zTensor checks its own unless ``verify=False``), and warns about tensors no digest
    covers (:class:`~tensorfile.errors.NoDigestsWarning`); ``verify="stored"`` checks
    without that warning. ``cache_dir`` keeps a remote file in a
    local folder, chunk by chunk (see :func:`tensorfile.sources.open_path`); the shards of
    a remote checkpoint take ``$TENSORFILE_CACHE_DIR`` (an explicit ``cache_dir`` is refused).
    ``key`` reads one dictionary of a PyTorch pickle (a training checkpoint's
    ``"model_state_dict"``), its entries named from there on; the pickle's other entries that
    are not tensors (``epoch``...) are its ``metadata`` (see
    :mod:`tensorfile.formats.torch_pickle`).

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> with tensorfile.open(save({"w": np.ones((2, 2), np.float32)})) as f:
        ...     f.format, f.info("w").shape
        ('safetensors', (2, 2))
    """
    if format is None and isinstance(path_or_data, str | os.PathLike):
        target = os.fspath(path_or_data)
        if isinstance(target, str) and target:
            from .catalogs import local_target

            target = local_target(target)  # a file:// URL keeps the local rules
            if key is not None:
                pass  # one file: a sharded checkpoint holds no pickle to pick from
            elif is_url(target):
                if is_index(target):
                    _no_cache_dir(cache_dir, target)
                    return open_checkpoint(
                        target, allow_full_download=allow_full_download, verify=verify
                    )
            elif target.endswith(INDEX_SUFFIX):
                return open_checkpoint(
                    target, allow_full_download=allow_full_download, verify=verify
                )
            elif os.path.isdir(target):
                if glob.glob(os.path.join(glob.escape(target), "*" + INDEX_SUFFIX)):
                    return open_checkpoint(
                        target, allow_full_download=allow_full_download, verify=verify
                    )  # (several indexes: an error naming them)
                path_or_data = _lone_file(target) or target  # else "is a directory"
    return open_reader(
        path_or_data,
        format=format,
        allow_full_download=allow_full_download,
        verify=verify,
        cache_dir=cache_dir,
        key=key,
    )
