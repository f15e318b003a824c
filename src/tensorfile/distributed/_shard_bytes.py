"""A rank's shard as bytes at their places in a file: the runs of its box, and the shard's
bytes as one flat view (copied only where the shard is not contiguous, or not on the CPU).

Example:
    >>> import torch
    >>> from tensorfile.distributed._runs import runs
    >>> r, data = shard_bytes("w", torch.arange(6, dtype=torch.int8).reshape(2, 3)[:, 1:],
    ...                       torch.int8, (2, 2), runs((2, 3), (0, 1), (2, 2), 1))
    >>> r.starts.tolist(), bytes(data)
    ([1, 4], b'\\x01\\x02\\x04\\x05')
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from tensorfile.core.errors import InvalidArgumentError

from ._runs import Runs

__all__ = ["Span", "shard_bytes", "spans"]

Span = tuple[int, int, memoryview]
"""Bytes of a shard in a file: ``(file number, absolute offset, bytes)``."""


def shard_bytes(
    fqn: str, tensor: Any, dtype: torch.dtype, sizes: tuple[int, ...], r: Runs
) -> tuple[Runs, memoryview]:
    """``r`` and the shard's bytes in the order of its runs, after checking that
    ``tensor`` is the shard the plan says (``dtype``, ``sizes``)."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError(f"{fqn!r}: the planner gave {type(tensor).__name__}")
    t = tensor.detach()
    if t.dtype != dtype or tuple(t.shape) != tuple(sizes):
        raise InvalidArgumentError(
            f"{fqn!r}: the shard is {t.dtype} {list(t.shape)}; the plan says {dtype} {list(sizes)}"
        )
    if t.device.type == "meta":
        raise InvalidArgumentError(f"{fqn!r}: a 'meta' tensor has no data to save")
    if r.count == 0:
        return r, memoryview(b"")
    try:
        if t.device.type != "cpu":
            t = t.cpu()
        flat = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{fqn!r}: the bytes of this {type(tensor).__name__} cannot be taken "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    return r, memoryview(flat)  # type: ignore[arg-type]


def spans(file_no: int, start: int, r: Runs, data: memoryview) -> Iterator[Span]:
    """The shard's bytes as ``(file number, absolute offset, bytes)``, a run each, made
    one at a time (a ``Shard(1)`` shard has a run per row: none is held)."""
    n = r.length
    for i, s in enumerate(r.starts):
        yield file_no, start + int(s), data[i * n : (i + 1) * n]
