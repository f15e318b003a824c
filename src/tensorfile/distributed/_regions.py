"""What a rank's plan asks of a checkpoint, and its results: shared by the lone and the
cooperative loads (:mod:`tensorfile.distributed._loading`, :mod:`._cooperate`).

Example:
    >>> c = LoadCounters()
    >>> c.bytes_read, c.bytes_sent
    (0, 0)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tensorfile.core import plan
from tensorfile.core.catalog import ByteRange, TensorInfo
from tensorfile.core.errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from tensorfile.core.reader import Reader, names_list
from tensorfile.core.selection import Region, region
from tensorfile.core.selection.read import Frugal, element_size, finish
from tensorfile.frameworks.torch import f4_shape, from_numpy, torch_dtype

__all__ = ["LoadCounters", "identity", "path_text", "plan_regions", "shard", "to_torch"]


@dataclass
class LoadCounters:
    """What one rank's :func:`load` did: bytes asked of storage (``bytes_read``, in
    ``reads`` planned passes or blocks), and bytes sent to and received from other ranks
    (``bytes_sent``/``messages_sent``, ``bytes_received``/``messages_received``; a broadcast
    counts once per receiver at the sender); ``bytes_sampled``: the few bytes of each file
    a cooperative load reads on every rank to tell the checkpoint apart (not in
    ``bytes_read``, which counts each byte of the tensors once over the group).

    Example:
        >>> c = LoadCounters()
        >>> c.bytes_read, c.bytes_sent
        (0, 0)
    """

    bytes_read: int = 0
    reads: int = 0
    bytes_sampled: int = 0
    bytes_sent: int = 0
    messages_sent: int = 0
    bytes_received: int = 0
    messages_received: int = 0


def path_text(path: object) -> str:
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidTypeError(
            f"a checkpoint is a path or URL, got {type(path).__name__}"
        ) from None
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("a checkpoint is a non-empty path or URL")
    return text


def shard(reader: Reader, name: str) -> Reader:
    """The reader holding ``name``'s bytes (a sharded checkpoint's shard, else ``reader``)."""
    reader_of = getattr(reader, "reader_of", None)
    found = reader_of(name) if callable(reader_of) else reader
    assert isinstance(found, Reader)
    return found


def plan_regions(reader: Reader, plan: Mapping[str, Any] | None) -> dict[str, Region]:
    """The regions of ``plan`` on ``reader``'s tensors, in file order; an error naming the
    tensor for an unknown name or a bad entry."""
    if plan is None:
        entries: dict[str, Any] = dict.fromkeys(reader.keys())
    elif isinstance(plan, Mapping):
        names_list(list(plan))  # (every key a name)
        entries = dict(plan)
    else:
        raise InvalidTypeError(
            f"a plan maps tensor names to indices (or is None), got {type(plan).__name__}"
        )
    regions = {}
    for name, entry in entries.items():
        info = reader.info(name)  # (an unknown name: the reader's error)
        regions[name] = reg = region(info.shape, entry, name, itemsize=element_size(info))
        _check_torch(info, reg)
    return dict(sorted(regions.items(), key=lambda kv: _place(reader.info(kv[0]))))


def _check_torch(info: TensorInfo, reg: Region) -> None:
    """Refuse, before anything is read, a region torch cannot hold: a dtype it lacks (the
    F6 types), an F4 region of an odd last dimension (torch packs F4 in pairs)."""
    try:
        torch_dtype(info.dtype)
        f4_shape(info.dtype, reg.result_shape, to="torch")
    except UnsupportedError as exc:
        raise UnsupportedError(f"tensor {info.name!r}: {exc}") from None


def _place(info: TensorInfo) -> tuple[str, int]:
    first = info.first
    return info.file or "", -1 if first is None else first.range.start


SAMPLES = 4
"""Places of each file whose bytes go into :func:`identity`."""

SAMPLE_BYTES = 256
"""Bytes read at each of those places."""


def identity(reader: Reader, counters: LoadCounters | None = None) -> str:
    """What tells this checkpoint apart from another: its tensors' names, dtypes, shapes,
    files and places, and the bytes at :data:`SAMPLES` places spread over each file's data
    (``SAMPLE_BYTES`` each: another step of one training run, or another fine-tune of one
    base model, has the same layout but other bytes there). The same on every rank that
    opened the same checkpoint, wherever it sits: a shard's file counts by its name in the
    checkpoint, not by the path or URL the rank reached it at. The bytes sampled are
    counted in ``counters``.

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> data = save({"w": np.zeros(3, np.float32)})
        >>> identity(tensorfile.open(data)) == identity(tensorfile.open(data))
        True
    """
    tensors = sorted(reader.catalog.tensors.items())
    files = {i.file for _, i in tensors if i.file is not None}
    cut = len(_folder(files))
    cat = [
        (n, i.stored_dtype, list(i.shape), None if i.file is None else i.file[cut:],
         [list(c.range) for c in i.components.values()])
        for n, i in tensors
    ]  # fmt: skip
    h = hashlib.sha256(repr(cat).encode())
    spans: dict[int, tuple[Reader, int, int]] = {}
    for name, info in tensors:
        if info.nbytes:
            sub = shard(reader, name)
            lo, hi = (
                min(c.range.start for c in info.components.values()),
                max(c.range.stop for c in info.components.values()),
            )
            was = spans.get(id(sub), (sub, lo, hi))
            spans[id(sub)] = (sub, min(was[1], lo), max(was[2], hi))
    samples: list[bytearray] = []
    pieces: list[plan.Piece] = []
    for sub, lo, hi in sorted(spans.values(), key=lambda s: s[1:]):
        jobs: list[plan.Job] = []
        if hi - lo <= SAMPLES * SAMPLE_BYTES:  # a small file: all of its data, at once
            places = [(lo, hi)]
        else:  # spread over the data, never overlapping
            step = (hi - lo - SAMPLE_BYTES) // (SAMPLES - 1)
            places = [(lo + k * step, lo + k * step + SAMPLE_BYTES) for k in range(SAMPLES)]
        for a, b in places:
            buf = bytearray(b - a)
            samples.append(buf)
            jobs.append((f"bytes {a}..{b}", ByteRange(a, b), memoryview(buf)))
        pieces.extend(plan.plan(Frugal(sub.source), sub.readinto, jobs))
    plan.execute(pieces)  # (every file's samples at once)
    for buf in samples:
        h.update(buf)
        if counters is not None:
            counters.bytes_sampled += len(buf)
    return h.hexdigest()


def _folder(files: set[str]) -> str:
    """The longest folder (ending at a ``/`` or the platform's separator) that holds every
    one of ``files``: where the checkpoint sits, which ranks may reach at other places."""
    if not files:
        return ""
    lo, hi = min(files), max(files)  # (what all share, these two share)
    n = next(
        (i for i, (x, y) in enumerate(zip(lo, hi, strict=False)) if x != y), min(len(lo), len(hi))
    )
    common = lo[:n]  # (characters: a URL is no path to normalize)
    return common[: max(common.rfind("/"), common.rfind(os.sep)) + 1]


def to_torch(info: TensorInfo, reg: Region, box: np.ndarray[Any, Any], device: Any) -> torch.Tensor:
    """The region's result (``reg.key`` applied to its filled box) as a torch tensor of the
    tensor's dtype, on ``device``."""
    arr = finish(reg, box).view(info.dtype.numpy).reshape(reg.result_shape)
    out = from_numpy(arr, info.dtype)
    return out if str(device) == "cpu" else out.to(device)
