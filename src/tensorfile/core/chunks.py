"""What a chunk of a streamed tensor may look like (``StreamWriter.write``,
``ztensor.Writer.add_stream``).

Byte buffers are flat runs of bytes and only their count is checked. An array chunk says
more, so it must mean what its shape says: a stack of whole sub-blocks of the tensor (its
trailing dimensions are the tensor's), starting on a sub-block boundary. A 1-D array (or a
0-d one) is a flat run of elements and fits anywhere. For a ``(4, 4)`` tensor, ``(2, 4)``
and ``(8,)`` chunks are fine; an ``(8, 2)`` or ``(2, 3)`` chunk is refused, naming the chunk.

Example:
    >>> check_chunk("w", (4, 4), (2, 4), index=0, done=0)
    >>> try:
    ...     check_chunk("w", (4, 4), (8, 2), index=1, done=8)
    ... except InvalidArgumentError as exc:
    ...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
    tensor 'w' (shape [4, 4]): chunk 1 has shape [8, 2]; an array chunk is rows of shape
    [4] (or a flat 1-D run of elements)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import InvalidArgumentError
from .slicing import shape_text

__all__ = ["check_chunk"]


def check_chunk(
    name: str, shape: Sequence[int], chunk: Sequence[int], *, index: int, done: int
) -> None:
    """Refuse array chunk number ``index`` (from 0) of shape ``chunk`` unless it is whole
    sub-blocks of a tensor of ``shape`` starting at element ``done``."""
    if len(chunk) <= 1:
        return
    where = f"tensor {name!r} (shape {shape_text(shape)}): chunk {index}"
    rows = tuple(chunk[1:])
    if len(chunk) > len(shape) or tuple(shape[len(shape) - len(rows) :]) != rows:
        allowed = tuple(shape[1:])
        raise InvalidArgumentError(
            f"{where} has shape {shape_text(chunk)}; an array chunk is rows of shape "
            f"{shape_text(allowed)} (or a flat 1-D run of elements)"
        )
    block = math.prod(rows)
    if block and done % block:
        raise InvalidArgumentError(
            f"{where} is rows of shape {shape_text(rows)}, but the {done:,} elements written "
            f"before it end inside such a row; write a flat 1-D chunk to finish the row first"
        )
