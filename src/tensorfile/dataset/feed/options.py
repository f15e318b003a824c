"""How a feed runs, as one typed value: :class:`FeedOptions`, the order (``shuffle``,
``seed``, ``partitions``, ``shuffle_block``), the split between ranks (``rank``,
``world_size``, ``even``, ``drop_last``) and the batches (``batch_size``, ``per_sample``).

:meth:`~tensorfile.dataset.Dataset.to_torch` takes these as keywords, makes one
:class:`FeedOptions` of them (every check is made here, once, when it is made) and hands it to
the feed (:class:`~tensorfile.dataset.torch.TorchIterable`). It imports neither torch nor
numpy's heavier parts, so bad options are refused before torch is loaded.

Example:
    >>> opts = FeedOptions(batch_size=4, shuffle=True, seed=7, even="drop")
    >>> opts.even, opts.batched, opts.unit
    (True, True, 4)
    >>> FeedOptions(partitions=0)
    Traceback (most recent call last):
    ...
    tensorfile.core.errors.InvalidArgumentError: partitions must be between 1 and 16777216, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidArgumentError
from .order import MAX_PARTITIONS, MAX_SAMPLES, check_int

__all__ = ["FeedOptions"]


@dataclass(frozen=True)
class FeedOptions:
    """The options of a feed (see :mod:`tensorfile.dataset.torch` for what each does),
    checked when made: an integer that is not one raises
    :class:`~tensorfile.errors.InvalidTypeError`, one out of range (or ``even`` other than
    ``True``, ``False``, ``"drop"``, ``"pad"``) :class:`~tensorfile.errors.InvalidArgumentError`.
    ``even="drop"`` is kept as ``True`` (its meaning). ``rank``/``world_size`` left ``None`` are
    ``torch.distributed``'s when the feed runs.

    Example:
        >>> FeedOptions(rank=1, world_size=2) == FeedOptions(world_size=2, rank=1)
        True
    """

    shuffle: bool = False
    seed: int = 0
    rank: int | None = None
    world_size: int | None = None
    even: bool | str = True
    batch_size: int | None = None
    per_sample: bool | None = None
    drop_last: bool = False
    partitions: int = 64
    shuffle_block: int = 1 << 18

    def __post_init__(self) -> None:
        even = self.even
        if not (
            even is True or even is False or (isinstance(even, str) and even in ("drop", "pad"))
        ):
            raise InvalidArgumentError(f"even must be True, False, 'drop' or 'pad', got {even!r}")
        if self.batch_size is None and self.per_sample is False:
            raise InvalidArgumentError("per_sample=False (batches) needs a batch_size")
        checked: dict[str, object] = {
            "shuffle": bool(self.shuffle),
            "seed": check_int(self.seed, "seed", 0),
            "even": True if even == "drop" else even,
            "shuffle_block": check_int(self.shuffle_block, "shuffle_block", 1, MAX_SAMPLES),
            "partitions": check_int(self.partitions, "partitions", 1, MAX_PARTITIONS),
            "batch_size": _optional(self.batch_size, "batch_size", 1),
            "drop_last": bool(self.drop_last),
        }
        rank = checked["rank"] = _optional(self.rank, "rank", 0)
        world_size = checked["world_size"] = _optional(self.world_size, "world_size", 1)
        if rank is not None and world_size is not None:
            check_rank(rank, world_size)
        for name, value in checked.items():
            object.__setattr__(self, name, value)  # frozen: the checked values, once

    @property
    def batched(self) -> bool:
        """Whether the feed yields ready batches (``batch_size`` given, not ``per_sample``)."""
        return self.batch_size is not None and not self.per_sample

    @property
    def unit(self) -> int:
        """``B``: the samples of one rank's piece of a step (``batch_size``, or 1)."""
        return self.batch_size or 1

    def order_keywords(self) -> dict[str, Any]:
        """The keywords of an epoch's order (:class:`~tensorfile.dataset.order.EpochOrder`)
        these options give, the epoch aside.

        Example:
            >>> FeedOptions(batch_size=8, seed=2).order_keywords()["unit"]
            8
        """
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "partitions": self.partitions,
            "shuffle_block": self.shuffle_block,
            "unit": self.unit,
        }


def check_rank(rank: int, world_size: int) -> None:
    """Refuse a rank that is not below the world size (given, or ``torch.distributed``'s)."""
    if rank >= world_size:
        raise InvalidArgumentError(f"rank {rank} is not below world_size {world_size}")


def _optional(value: int | None, what: str, low: int) -> int | None:
    return None if value is None else check_int(value, what, low)
