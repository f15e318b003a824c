"""Convert between tensor formats, tensor by tensor: ``tensorfile.convert(src, dst)``.

Convert has no format list of its own: every source is opened through the format registry
(:mod:`tensorfile.formats`; anything ``tensorfile.open`` reads: safetensors, one file or a
sharded checkpoint, zTensor v1.0 and v2, GGUF with quantized types dequantized to float32 by
the ``gguf`` package, numpy ``.npz``/``.npy``, PyTorch pickles by
tensorfile's own pickle reader, never unpickled), and every destination is a writable registry entry
(:func:`targets`): safetensors (``shard_size``: a sharded checkpoint in a folder, as
huggingface_hub lays it out), zTensor (``zt``: v1.0, ``zt2``: v2), ``npz`` and ``npy`` (one
tensor). The output format comes from ``to`` or from ``dst``'s extension.

The digests a source stores (safetensors' ``tensorfile.digests``, zTensor's) are compared
with each tensor's bytes as they are read, the byte-for-byte copy included: a mismatch is a
:class:`~tensorfile.errors.ChecksumError` naming the tensor and the file, and nothing is
written (fresh digests never vouch for bytes the source's own prove changed).

Every write is atomic (a temporary file renamed into place; a sharded checkpoint's index is
written last), the memory in use is about the largest tensor, and a lossless conversion keeps
the content id (:func:`tensorfile.ops.content_hash`). A lone safetensors file converted to
safetensors is copied byte for byte. Metadata goes across: text values as they are, others
(GGUF arrays, zTensor v2 values) as JSON text where the destination holds only text.
Sparse zTensor tensors go to formats without sparse layouts only with ``densify=True``.
Nothing is lost silently: what the destination cannot keep (metadata in ``.npz``, GGUF's
value types, stored digests...) is said in :attr:`ConvertResult.notes`.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.ops import content_hash, convert
    >>> from tensorfile.safetensors.numpy import save_file
    >>> d = tempfile.mkdtemp()
    >>> save_file({"w": np.eye(3, dtype=np.float32)}, os.path.join(d, "m.safetensors"))
    >>> r = convert(os.path.join(d, "m.safetensors"), os.path.join(d, "m.zt"), to="zt2")
    >>> r.destination_format, r.tensors
    ('zt2', 1)
    >>> content_hash(os.path.join(d, "m.zt")) == content_hash(os.path.join(d, "m.safetensors"))
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import formats
from ..core.atomic import AtomicFile
from ..core.errors import InvalidArgumentError, SourceError
from ..formats.catalogs import index_path, local_target, locate_checkpoint
from ..sources import is_url, redact
from . import _convert_sinks as sinks
from ._convert_losses import losses, uncovered_notes
from ._convert_sources import ConvertSource, Item, open_source
from .inspect import not_tensors_text

__all__ = ["ConvertResult", "convert", "targets"]

_COPY_CHUNK = 16 << 20


def targets() -> list[str]:
    """The names ``to=`` takes: the registry's writable formats and their aliases.

    Example:
        >>> targets()
        ['safetensors', 'ztensor', 'npz', 'npy', 'zt', 'zt2']
    """
    return formats.writable_names()


@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert` did.

    Attributes:
        src / dst: the paths; a URL source as messages show it, without its credentials,
            query string or fragment (:func:`~tensorfile.sources.redact`).
        source_format / destination_format: e.g. ``safetensors``, ``gguf``, ``pytorch``;
            ``safetensors``, ``zt``, ``zt2``, ``npz``, ``npy`` (:func:`tensorfile.formats.label`).
        tensors: tensors written.
        bytes_in: tensor bytes as the source describes them (dequantized, densified sizes).
        files: the files written (one, or a checkpoint's shards and index).
        densified: sparse tensors stored dense.
        notes: anything worth knowing, every loss included: dequantized tensors, a copy
            byte for byte, metadata the destination cannot hold (none in ``.npz``, JSON
            text for values that are not text where it holds only text, GGUF's value
            types), stored digests and zTensor v2 object attributes not kept.
    """

    src: str
    dst: str
    source_format: str
    destination_format: str
    tensors: int
    bytes_in: int
    bytes_out: int
    files: tuple[str, ...]
    densified: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _destination(
    dst: str, to: str | None, shard_size: object
) -> tuple[formats.Format, dict[str, Any]]:
    if to is not None:
        return formats.destination(to)
    if shard_size is not None:
        return formats.SAFETENSORS, {}
    fmt = formats.guess(dst)
    if fmt is not None:
        return fmt, {}
    names = [x for f in formats.FORMATS.values() if f.writable for x in f.suffixes]
    raise InvalidArgumentError(
        f"cannot tell the output format from {dst!r}: name it {', '.join(names[:-1])} or "
        f"{names[-1]}, or pass to= (--to on the command line: {', '.join(targets())})"
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _source_files(src: str) -> list[str]:
    """The local files a conversion reads: a file, or a checkpoint's index and shards."""
    if is_url(src):
        return []
    index = index_path(src)
    if index is None:
        return [src]
    return [index, *locate_checkpoint(index).where.values()]


def _check_overlap(src: str, dst: str, folder: bool) -> None:
    """Refuse a destination that is, or (a folder destination: a sharded save, which
    replaces what an earlier save left there) holds, a file the conversion reads: the
    source would be overwritten or removed while it is read."""
    real = os.path.realpath(dst)
    for f in _source_files(src):
        if _same_file(f, dst):
            raise InvalidArgumentError(
                f"{dst} is {f}, which the conversion reads: choose another destination"
            )
        if folder and os.path.realpath(f).startswith(real.rstrip(os.sep) + os.sep):
            raise InvalidArgumentError(
                f"{dst} holds {f}, which the conversion reads (a sharded save replaces the "
                "checkpoint files in its folder): choose another folder"
            )


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str | None = None,
    compression: str | None = None,
    level: int | None = None,
    checksum: str | None = None,
    align: int | None = None,
    shard_size: int | str | None = None,
    densify: bool = False,
    progress: Callable[[int, int], None] | None = None,
    allow_full_download: bool | None = None,
    key: str | None = None,
) -> ConvertResult:
    """Convert ``src`` to ``dst`` (see the module docstring for sources and destinations).

    ``progress(done, total)`` is called with tensor bytes written, as the work advances.
    ``allow_full_download`` lets a remote source from a server that ignores ``Range`` be
    read whole (see :func:`tensorfile.sources.open_path`). ``key`` converts one dictionary
    of a PyTorch pickle (a training checkpoint's ``"model_state_dict"``), its tensors named
    from there on; without it, every tensor of the pickle is converted, and its entries that
    are not tensors (``epoch``...) go across as metadata where the destination holds
    metadata (the notes say which; see :mod:`tensorfile.formats.torch_pickle`).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.ops import convert
        >>> d = tempfile.mkdtemp()
        >>> np.savez(os.path.join(d, "a.npz"), w=np.ones(4, np.float16))
        >>> convert(os.path.join(d, "a.npz"), os.path.join(d, "a.safetensors")).tensors
        1
    """
    src_s, dst_s = os.fspath(src), os.fspath(dst)
    if not isinstance(src_s, str) or not isinstance(dst_s, str) or not src_s or not dst_s:
        raise InvalidArgumentError("src and dst must be non-empty paths")
    src_s, dst_s = local_target(src_s), local_target(dst_s)  # file:// URLs: local paths
    if is_url(dst_s):
        raise InvalidArgumentError(f"{redact(dst_s)}: convert writes local files only")
    fmt, implied = _destination(dst_s, to, shard_size)
    options = fmt.check_options(
        {
            **implied,
            "compression": compression,
            "level": level,
            "checksum": checksum,
            "align": align,
            "shard_size": shard_size,
        }
    )
    if not is_url(src_s) and _same_file(src_s, dst_s):
        raise InvalidArgumentError(f"{src_s}: the source and the destination are the same file")
    _check_overlap(src_s, dst_s, folder=shard_size is not None)
    source = open_source(src_s, allow_full_download=allow_full_download, key=key)
    try:
        return _run(source, src_s, dst_s, fmt, options, densify, progress)
    finally:
        source.close()


def _run(
    source: ConvertSource,
    src: str,
    dst: str,
    fmt: formats.Format,
    options: dict[str, Any],
    densify: bool,
    progress: Callable[[int, int], None] | None,
) -> ConvertResult:
    items = source.items
    total = sum(i.nbytes for i in items)
    done = 0
    notes = [f"{i.name}: {i.note}" for i in items if i.note]
    if source.not_tensors:  # a pickle's epoch, char2idx...: its metadata
        kept = "kept as metadata"  # by the tensor file formats; the numpy ones hold none
        if not (fmt is formats.ZTENSOR and options.get("version") == 2):  # (CBOR: as they are)
            kept += ", as JSON text"
        if not fmt.tensor_file:
            kept = f"not kept ({fmt.title} holds no metadata)"
        notes.append(f"not tensors, {kept}: {not_tensors_text(source.not_tensors)}")
    densified = tuple(i.name for i in items if i.layout != "dense" and not fmt.sparse)
    name = formats.label(fmt, options)

    def tick(item: Item) -> None:
        nonlocal done
        done += item.nbytes
        if progress is not None:
            progress(done, total)

    files: tuple[str, ...] = (dst,)
    if fmt is formats.SAFETENSORS and not options and source.single_safetensors is not None:
        _copy(source.single_safetensors, dst, source.in_order())
        notes.append("a lone safetensors file: copied byte for byte")
        if progress is not None:
            progress(total, total)
    else:
        written = sinks.write(
            fmt,
            dst,
            items,
            source.get,
            source.metadata,
            densify=densify,
            tick=tick,
            options=options,
            label=name,
        )
        files = tuple(written)
        notes += losses(source.kept, fmt, options, name)
    notes += uncovered_notes(source.kept, options, name)
    bytes_out = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    src = redact(src)  # the result is printed: a URL without its credentials or query
    return ConvertResult(
        src, dst, source.format, name, len(items), total, bytes_out, files, densified, tuple(notes)
    )


def _copy(src: str, dst: str, check: Any) -> None:
    """Copy ``src`` to ``dst`` byte for byte, ``check`` (an ``InOrder`` of the digests
    ``src`` stores) comparing them as the bytes pass: a mismatch leaves no ``dst``."""
    out = AtomicFile(dst)
    try:
        buf = bytearray(_COPY_CHUNK)
        pos = 0
        with open(src, "rb") as f_in, os.fdopen(os.dup(out.fd), "wb") as f_out:
            while n := f_in.readinto(buf):
                chunk = memoryview(buf)[:n]
                check.update(pos, chunk)
                f_out.write(chunk)
                pos += n
        check.close()
        out.commit()
    except OSError as exc:
        out.abort()
        raise SourceError(f"cannot copy {src} to {dst}: {exc}") from exc
    except BaseException:
        out.abort()
        raise
