"""The order in which an epoch of a mixture of datasets visits their samples: a function of
the datasets' shard sizes, the draws per dataset, the seed and the epoch only (never of the
number of nodes, ranks or workers), with random access to any stretch of it.

A sample's **global id** is its place in the concatenation of the datasets' samples: sample
``j`` of dataset ``i`` is ``offsets[i] + j``. An epoch has ``N`` positions, of which dataset
``i`` takes ``n_i`` (its **draws**; ``sum(n_i) = N``: :func:`apportion` of ``N`` by the
weights).

1. **Each dataset's draws.** Dataset ``i``'s ``k``-th draw (``0 <= k < n_i``) is position
   ``k mod len_i`` of its own :class:`~tensorfile.dataset.order.EpochOrder` (its shards'
   counts; the options' ``shuffle``, ``partitions``, ``shuffle_block`` and batch) with seed
   ``seed + i * 2**64`` and epoch ``epoch + (k // len_i) * 2**64``: a dataset drawn past its
   length repeats whole passes, each visiting every sample once (in another order when
   shuffling), and one drawn less takes a prefix of its order (another prefix each epoch
   when shuffling). Dataset 0's first pass is the order the dataset alone has.
2. **How many of each, where.** The positions are cut into blocks of ``L = shuffle_block``.
   Among the first ``p`` positions dataset ``i`` has ``C_i(p)`` draws, a chain of floors:
   from ``r = p`` and ``R = N``, each dataset in turn takes ``C_i(p) = r * n_i // R`` of
   the ``r`` positions left, then ``r -= C_i(p)`` and ``R -= n_i``; the last dataset
   takes the ``r`` left. ``C_i`` is non-decreasing, exact
   (``C_i(N) = n_i``, ``sum_i C_i(p) = p``) and within a few samples of ``p * n_i / N``:
   block ``b`` holds ``C_i(end) - C_i(start)`` draws of dataset ``i``, ``O(datasets)`` to
   compute.
3. **Inside a block.** With ``shuffle``, the block's labels (``c_i`` of dataset ``i``, in
   dataset order) are permuted by ``default_rng([seed, epoch, 2, b])``; without, they are
   a fixed smooth interleave (dataset ``i``'s ``j``-th label at ``(j + 1/2) / c_i`` of the
   block, ties by dataset). A dataset's draws come in position order: the ``r``-th label
   ``i`` of block ``b`` is its draw ``C_i(start) + r``.

:meth:`MixtureOrder.ids` gives any stretch at a cost of ``O(datasets + the blocks touched
+ (stop - start))`` (and each dataset's :class:`EpochOrder` costs), never ``O(N)``.

Example:
    >>> apportion(10, [1, 1, 2])
    [3, 2, 5]
    >>> order = MixtureOrder([[3, 2], [4]], [5, 6], options=FeedOptions(shuffle=True, seed=1))
    >>> ids = order.ids(0, len(order)).tolist()
    >>> len(ids), sum(i < 5 for i in ids), sorted(i for i in ids if i >= 5)  # 4 + 2 more
    (11, 5, [5, 6, 7, 7, 8, 8])
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ...core.errors import InvalidArgumentError, InvalidTypeError
from .options import FeedOptions
from .order import MAX_SAMPLES, EpochOrder, check_counts, check_int

__all__ = ["MixtureOrder", "apportion"]

NDArray = np.ndarray[Any, Any]
PASS_STRIDE = 1 << 64
"""Dataset ``i``'s seed is ``seed + i * PASS_STRIDE``; its pass ``p``'s epoch ``epoch + p *
PASS_STRIDE`` (distinct from every seed and epoch a run uses)."""
_BLOCKS_KEPT = 4  # block labels cached (sequential reads touch one or two at a time)
_WINDOW = 1 << 14  # a dataset's draws computed at once (128 KiB of ids)


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """The draws per dataset: ``total`` apportioned by ``weights`` (finite, non-negative,
    not all 0) by the largest remainder, exactly: each gets the floor of its quota
    ``total * w_i / sum(w)``, and the samples left go one each to the largest remainders,
    ties to the lower index. A weight of 0 gets nothing.

    Example:
        >>> apportion(7, [1.0, 1.0]), apportion(5, [0, 3]), apportion(4, [1, 1, 1])
        ([4, 3], [0, 5], [2, 1, 1])
    """
    exact = [Fraction(float(w)) for w in weights]
    whole = sum(exact)
    quotas = [total * w / whole for w in exact]
    draws = [math.floor(q) for q in quotas]
    left = total - sum(draws)
    ranked = sorted(range(len(draws)), key=lambda i: (draws[i] - quotas[i], i))
    for i in ranked[:left]:
        draws[i] += 1
    return draws


class MixtureOrder:
    """The order of one epoch of a mixture (see the module docstring): ``counts[i]`` the
    samples per shard of dataset ``i``, ``draws[i]`` its positions in the epoch, ``options``
    the feed's (:class:`~tensorfile.dataset.torch.FeedOptions`: its ``seed``, ``shuffle``,
    ``partitions``, ``shuffle_block`` and batch size are what the order depends on).
    ``len(order)`` is ``sum(draws)``; :meth:`ids` gives any stretch."""

    def __init__(
        self,
        counts: Sequence[Sequence[int]],
        draws: Sequence[int],
        *,
        epoch: int = 0,
        options: FeedOptions | None = None,
    ) -> None:
        opts = FeedOptions() if options is None else options
        if not isinstance(opts, FeedOptions):
            raise InvalidTypeError(f"options must be a FeedOptions, got {type(opts).__name__}")
        if len(counts) != len(draws) or not draws:
            raise InvalidArgumentError(
                f"a mixture needs one draw count per dataset, got {len(draws)} for "
                f"{len(counts)} datasets"
            )
        self.draws = [check_int(n, f"draws of dataset {i}", 0) for i, n in enumerate(draws)]
        self.total = sum(self.draws)
        if self.total > MAX_SAMPLES:
            raise InvalidArgumentError(f"a mixture's epoch must be at most {MAX_SAMPLES} samples")
        self.epoch = check_int(epoch, "epoch", 0)
        self._keywords = opts.order_keywords()  # (checked when the options were made)
        self.seed, self.shuffle, self.block = opts.seed, opts.shuffle, opts.shuffle_block
        self.counts = [check_counts(c) for c in counts]
        self.lengths = [int(c.sum()) for c in self.counts]
        for i, (n, length) in enumerate(zip(self.draws, self.lengths, strict=True)):
            if n and not length:
                raise InvalidArgumentError(f"dataset {i} has no samples but {n} draws")
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self._passes: dict[int, tuple[int, EpochOrder]] = {}  # dataset -> its current pass
        self._windows: dict[int, tuple[int, NDArray]] = {}  # dataset -> (first draw, ids)
        self._blocks: OrderedDict[int, tuple[NDArray, NDArray, NDArray]] = OrderedDict()

    def __len__(self) -> int:
        return self.total

    def cumulative(self, p: int) -> list[int]:
        """``C_i(p)``: the draws of each dataset among the first ``p`` positions.

        Example:
            >>> MixtureOrder([[2], [4]], [2, 4]).cumulative(3)
            [1, 2]
        """
        out: list[int] = []
        rest, room = p, self.total
        for n in self.draws[:-1]:
            c = rest * n // room if room else 0
            out.append(c)
            rest, room = rest - c, room - n
        out.append(rest)
        return out

    def ids(self, start: int, stop: int) -> NDArray:
        """The global sample ids at positions ``[start, stop)`` of the epoch's order.

        Example:
            >>> MixtureOrder([[2], [2]], [2, 2]).ids(0, 4).tolist()
            [0, 2, 1, 3]
        """
        start = check_int(start, "start", 0, self.total)
        stop = check_int(stop, "stop", start, self.total)
        if start == stop:
            return np.empty(0, dtype=np.int64)
        labels, draws = [], []
        for b in range(start // self.block, (stop - 1) // self.block + 1):
            lab, rank, before = self._block(b)
            lo = max(start - b * self.block, 0)
            hi = min(stop - b * self.block, lab.size)
            labels.append(lab[lo:hi])
            draws.append(before[lab[lo:hi]] + rank[lo:hi])
        lab, k = np.concatenate(labels), np.concatenate(draws)
        by = np.argsort(lab, kind="stable")  # each dataset's draws, in order: consecutive
        cut = np.flatnonzero(np.diff(lab[by])) + 1
        out = np.empty(lab.size, dtype=np.int64)
        for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, lab.size].tolist(), strict=True):
            where = by[lo:hi]
            first = int(k[where[0]])
            out[where] = self._draw_ids(int(lab[where[0]]), first, first + hi - lo)
        return out

    def _draw_ids(self, i: int, first: int, stop: int) -> NDArray:
        """Global ids of dataset ``i``'s draws ``[first, stop)``, from a window of its next
        draws computed at once (reads go forward: a batch takes a few of each dataset's)."""
        kept = self._windows.get(i)
        if kept is None or not kept[0] <= first <= stop <= kept[0] + kept[1].size:
            end = min(max(stop, first + _WINDOW), self.draws[i])
            kept = (first, self._compute_draws(i, first, end))
            self._windows[i] = kept
        return kept[1][first - kept[0] : stop - kept[0]]

    def _compute_draws(self, i: int, first: int, stop: int) -> NDArray:
        """Global ids of dataset ``i``'s draws ``[first, stop)``, pass by pass."""
        length = self.lengths[i]
        parts, k = [], first
        while k < stop:
            p, at = divmod(k, length)
            end = min(stop - k, length - at) + at
            parts.append(self._pass(i, p).ids(at, end))
            k += end - at
        out: NDArray = np.concatenate(parts) + self.offsets[i]
        return out

    def _pass(self, i: int, p: int) -> EpochOrder:
        """Dataset ``i``'s order in its pass ``p`` of this epoch (its latest one kept)."""
        kept = self._passes.get(i)
        if kept is not None and kept[0] == p:
            return kept[1]
        seed, epoch = self.seed + i * PASS_STRIDE, self.epoch + p * PASS_STRIDE
        order = EpochOrder(self.counts[i], **{**self._keywords, "seed": seed, "epoch": epoch})
        self._passes[i] = (p, order)
        return order

    def _block(self, b: int) -> tuple[NDArray, NDArray, NDArray]:
        """Block ``b``'s ``(labels, rank of each among its dataset's, draws before it)``."""
        hit = self._blocks.get(b)
        if hit is not None:
            self._blocks.move_to_end(b)
            return hit
        start = b * self.block
        stop = min(start + self.block, self.total)
        before = np.asarray(self.cumulative(start), dtype=np.int64)
        here = np.asarray(self.cumulative(stop), dtype=np.int64) - before
        datasets = np.arange(here.size, dtype=np.int32)
        labels = np.repeat(datasets, here)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, 2, b])
            labels = labels[rng.permutation(labels.size)]
        else:  # the j-th of c at (j + 1/2) / c of the block, ties by dataset
            at = np.concatenate([(np.arange(c) + 0.5) / c for c in here.tolist() if c])
            labels = labels[np.lexsort((labels, at))]
        by = np.argsort(labels, kind="stable")
        firsts = np.concatenate([[0], np.cumsum(here)[:-1]])
        rank = np.empty(labels.size, dtype=np.int64)
        rank[by] = np.arange(labels.size) - firsts[labels[by]]
        self._blocks[b] = (labels, rank, before)
        while len(self._blocks) > _BLOCKS_KEPT:
            self._blocks.popitem(last=False)
        return labels, rank, before
