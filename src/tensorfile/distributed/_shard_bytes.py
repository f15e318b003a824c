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

from typing import Any

import torch

from tensorfile.core.errors import InvalidArgumentError

from ._runs import Runs

__all__ = ["shard_bytes", "spans"]


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
    if r.count == 0:
        return r, memoryview(b"")
    if t.device.type != "cpu":
        t = t.cpu()
    flat = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    return r, memoryview(flat)  # type: ignore[arg-type]


def spans(file_no: int, start: int, r: Runs, data: memoryview) -> list[tuple[int, int, memoryview]]:
    """The shard's bytes as ``(file number, absolute offset, bytes)``, a run each."""
    n = r.length
    return [
        (file_no, start + s, data[i * n : (i + 1) * n]) for i, s in enumerate(r.starts.tolist())
    ]
