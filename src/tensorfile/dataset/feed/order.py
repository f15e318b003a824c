"""The order in which an epoch visits a dataset's samples: a function of the dataset's shard
sizes, the seed and the epoch only (never of the number of nodes, ranks or workers), with
random access to any stretch of it.

A sample's **global id** is its position in the manifest-order concatenation of the shards'
real samples (``counts[i]`` of shard ``i``). ``N`` is their total. Without ``shuffle`` the
epoch's order ``S`` is ``0 .. N-1``. With ``shuffle``:

1. **Shards permuted.** ``default_rng([seed, epoch, 0]).permutation(n_shards)``; ``Q`` is
   the samples of the shards in that order, each shard's rows in order.
2. **Canonical partitions.** ``Q`` is cut into ``P = min(partitions, max(1, N // L))``
   contiguous partitions (``L`` = ``shuffle_block``), partition ``p`` being
   ``Q[p*N//P : (p+1)*N//P]``: never finer than the shuffle block, so a dataset of at most
   ``2*L - 1`` samples is one partition shuffled whole (a true permutation) and locality
   partitions appear only for datasets of many blocks. ``P`` depends on ``N``,
   ``partitions`` (fixed by the caller, default 64) and ``L`` only, never on the world
   size: that is what keeps the order the same when the number of nodes, ranks or workers
   changes (MosaicML Streaming's ``num_canonical_nodes`` idea).
3. **Bounded shuffle.** Inside a partition, blocks of ``L`` positions; block ``b`` of
   partition ``p`` is permuted by ``default_rng([seed, epoch, 1, p, b]).permutation(len)``.
   Samples never move out of their block: the **shuffle window** is
   ``min(L, N / P)`` positions of ``Q`` (the permuted shards), and a block spans a few
   shards, so a batch drawn from it touches only those.
4. **Round-robin interleave.** ``S`` takes the partitions in turn, ``unit`` (``B``)
   samples at a time: round ``k`` is, for ``p = 0 .. P-1``, partition ``p``'s positions
   ``[k*B, (k+1)*B)`` (fewer or none where it has ended). Every partition holds ``N//P``
   or ``N//P + 1`` samples, so all rounds but the last are full: a position's partition
   and offset are arithmetic there and an ``O(P)`` walk in the last round. With ``B`` the
   per-rank batch and ``P`` a multiple of the world size, each rank's batches come from a
   fixed subset of the partitions (the same shards stay on the same node); nothing depends
   on it for correctness.

:meth:`EpochOrder.ids` gives any stretch ``S[start:stop]`` at a cost of ``O(shards + P +
the blocks touched + (stop - start))``, never ``O(N)``: a mid-epoch resume seeks with it.

Example:
    >>> order = EpochOrder([3, 0, 4], seed=1, shuffle=True, partitions=2, shuffle_block=2)
    >>> len(order), sorted(order.ids(0, 7).tolist())
    (7, [0, 1, 2, 3, 4, 5, 6])
    >>> order.ids(2, 5).tolist() == epoch_order([3, 0, 4], seed=1, shuffle=True,
    ...                                         partitions=2, shuffle_block=2)[2:5].tolist()
    True
    >>> [a.tolist() for a in order.locate(np.array([0, 3, 6]))]
    [[0, 2, 2], [0, 0, 3]]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ...core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["EpochOrder", "SampleOrder", "epoch_order", "partition_count"]

NDArray = np.ndarray[Any, Any]
MAX_PARTITIONS = 1 << 24
MAX_SAMPLES = 1 << 62  # the largest total, shuffle block or unit (int64 arithmetic stays exact)
_PERM_CACHE_ENTRIES = 1 << 22  # block permutations kept, in positions (int32: 16 MiB)


class SampleOrder(Protocol):
    """What the feed needs of an epoch's order: its length and any stretch of it
    (:class:`EpochOrder`; a mixture's: :class:`~tensorfile.dataset.feed.mix_order.MixtureOrder`)."""

    def __len__(self) -> int: ...

    def ids(self, start: int, stop: int) -> NDArray:
        """The global sample ids at positions ``[start, stop)``."""
        ...


def check_int(value: Any, what: str, low: int, high: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"{what} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidArgumentError(f"{what} must be {bound}, got {value}")
    return int(value)


def check_counts(counts: Sequence[int] | NDArray) -> NDArray:
    """``counts`` (samples per shard) checked: a 1-D sequence of integers, none negative,
    the total at most :data:`MAX_SAMPLES`; as int64."""
    try:
        arr = np.asarray(counts)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"counts must be a sequence of integers: {exc}") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidTypeError(
            f"counts must be a 1-D sequence of integers (samples per shard), got {arr.dtype} "
            f"of shape {arr.shape}"
        )
    if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
        raise InvalidArgumentError(f"counts must not be negative, shard {int(arr.argmin())} is")
    if arr.size and int(arr.max()) > MAX_SAMPLES:
        raise InvalidArgumentError(
            f"counts must be at most {MAX_SAMPLES} samples each, shard {int(arr.argmax())} "
            f"claims {int(arr.max())}"
        )
    arr = arr.astype(np.int64)
    total = sum(int(c) for c in arr.tolist())  # Python ints: no silent int64 wrap-around
    if total > MAX_SAMPLES:
        raise InvalidArgumentError(
            f"counts must total at most {MAX_SAMPLES} samples, they claim {total}"
        )
    return arr


def partition_count(total: int, partitions: int, shuffle_block: int) -> int:
    """``P``, the partitions an epoch of ``total`` samples is cut into (module docstring):
    never finer than the shuffle block.

    Example:
        >>> partition_count(1000, 64, 1 << 18), partition_count(10 << 18, 64, 1 << 18)
        (1, 10)
    """
    return max(1, min(partitions, total // shuffle_block))


class EpochOrder:
    """The order of one epoch (see the module docstring): ``len(order)`` samples,
    :meth:`ids` for any stretch of it, :meth:`locate` from ids to ``(shard, row)``."""

    def __init__(
        self,
        counts: Sequence[int] | NDArray,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = False,
        partitions: int = 64,
        shuffle_block: int = 1 << 18,
        unit: int = 1,
    ) -> None:
        self.counts = check_counts(counts)
        self.seed = check_int(seed, "seed", 0)
        self.epoch = check_int(epoch, "epoch", 0)
        self.shuffle = bool(shuffle)
        self.partitions = check_int(partitions, "partitions", 1, MAX_PARTITIONS)
        self.block = check_int(shuffle_block, "shuffle_block", 1, MAX_SAMPLES)
        self.unit = check_int(unit, "unit", 1, MAX_SAMPLES)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.total = int(self.starts[-1])
        self._perms: OrderedDict[tuple[int, int], NDArray] = OrderedDict()
        self._perm_entries = 0
        self.permutations = 0
        """Block permutations drawn so far (a counter, for tests and benchmarks)."""
        if not self.shuffle or self.total == 0:
            return
        n = self.total
        p = partition_count(n, self.partitions, self.block)
        self._p = p
        idx = np.arange(p + 1, dtype=np.int64)
        # p*N//P without overflow: p*(N//P) + p*(N%P)//P (p*(N%P) < P*P <= 2**48)
        self._pstart = idx * (n // p) + (idx * (n % p)) // p
        plen = np.diff(self._pstart)
        b = self.unit
        self._full_rounds = int(plen.min()) // b
        self._full = self._full_rounds * p * b  # positions in the full rounds
        rest = plen - self._full_rounds * b  # each at most B: one more round, partial
        self._rest_starts = np.concatenate([[0], np.cumsum(rest)]).astype(np.int64)
        self._plen = plen
        shard_perm = np.random.default_rng([self.seed, self.epoch, 0]).permutation(self.counts.size)
        self._shard_perm = shard_perm.astype(np.int64)
        permuted = self.counts[self._shard_perm]
        self._qstarts = np.concatenate([[0], np.cumsum(permuted)]).astype(np.int64)

    def __len__(self) -> int:
        return self.total

    def ids(self, start: int, stop: int) -> NDArray:
        """The global sample ids at positions ``[start, stop)`` of the epoch's order.

        Example:
            >>> EpochOrder([2, 2]).ids(1, 4).tolist()
            [1, 2, 3]
        """
        start = check_int(start, "start", 0, self.total)
        stop = check_int(stop, "stop", start, self.total)
        if not self.shuffle or start == stop:
            return np.arange(start, stop, dtype=np.int64)
        pos = np.arange(start, stop, dtype=np.int64)
        part, off = self._partition_of(pos)
        return self._id_of(self._within(part, off))

    def locate(self, ids: NDArray) -> tuple[NDArray, NDArray]:
        """``(shard index, row)`` arrays of global sample ``ids`` (manifest order; rows
        count real samples only).

        Example:
            >>> [a.tolist() for a in EpochOrder([2, 0, 3]).locate(np.array([1, 2, 4]))]
            [[0, 2, 2], [1, 0, 2]]
        """
        try:
            arr = np.asarray(ids)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(
                f"sample ids must be integers in [0, {self.total}): {exc}"
            ) from None
        exotic = arr.dtype.kind == "O" and not all(
            isinstance(v, int) and not isinstance(v, bool) for v in arr.flat
        )
        if arr.size and (arr.dtype.kind not in "iuO" or exotic):
            raise InvalidArgumentError(
                f"sample ids must be integers in [0, {self.total}), got {arr.dtype}"
            )
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.total):
            raise InvalidArgumentError(f"sample ids must lie in [0, {self.total})")
        ids = arr.astype(np.int64)
        shard = np.searchsorted(self.starts[1:], ids, side="right").astype(np.int64)
        return shard, ids - self.starts[shard]

    # -- the shuffled order -------------------------------------------------------------

    def _partition_of(self, pos: NDArray) -> tuple[NDArray, NDArray]:
        """``(partition, offset inside it)`` of each position of ``S``."""
        p, b = self._p, self.unit
        part = np.empty_like(pos)
        off = np.empty_like(pos)
        early = pos < self._full
        if self._full:  # full rounds exist: p*b <= N, no overflow
            s = pos[early]
            rnd, r = np.divmod(s, p * b)
            part[early] = r // b
            off[early] = rnd * b + r % b
        late = ~early
        if late.any():
            t = pos[late] - self._full
            k = np.searchsorted(self._rest_starts[1:], t, side="right")
            part[late] = k
            off[late] = self._full_rounds * b + t - self._rest_starts[k]
        return part, off

    def _within(self, part: NDArray, off: NDArray) -> NDArray:
        """Positions in ``Q`` of partition offsets, through each block's permutation."""
        blk = off // self.block
        order = np.lexsort((blk, part))
        sp, sb = part[order], blk[order]
        cut = np.flatnonzero((np.diff(sp) != 0) | (np.diff(sb) != 0)) + 1
        q = np.empty_like(off)
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, order.size], strict=True):
            pp, bb = int(sp[lo]), int(sb[lo])
            where = order[lo:hi]
            first = bb * self.block
            perm = self._perm(pp, bb)
            q[where] = self._pstart[pp] + first + perm[off[where] - first]
        return q

    def _perm(self, part: int, blk: int) -> NDArray:
        key = (part, blk)
        hit = self._perms.get(key)
        if hit is not None:
            self._perms.move_to_end(key)
            return hit
        first = blk * self.block
        size = min(self.block, int(self._plen[part]) - first)
        rng = np.random.default_rng([self.seed, self.epoch, 1, part, blk])
        perm = rng.permutation(size)
        perm = perm.astype(np.int32 if size < 2**31 else np.int64)
        self.permutations += 1
        self._perms[key] = perm
        self._perm_entries += size
        while self._perm_entries > _PERM_CACHE_ENTRIES and len(self._perms) > 1:
            _, old = self._perms.popitem(last=False)
            self._perm_entries -= old.size
        return perm

    def _id_of(self, q: NDArray) -> NDArray:
        """Global ids of positions in ``Q`` (the shards in their permuted order)."""
        j = np.searchsorted(self._qstarts[1:], q, side="right")
        shard = self._shard_perm[j]
        return self.starts[shard] + (q - self._qstarts[j])


def epoch_order(
    counts: Sequence[int] | NDArray,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = False,
    partitions: int = 64,
    shuffle_block: int = 1 << 18,
    unit: int = 1,
) -> NDArray:
    """Every global sample id in the epoch's order (:class:`EpochOrder`; for tests and
    benchmarks: it costs ``O(N)``).

    Example:
        >>> epoch_order([2, 3]).tolist()
        [0, 1, 2, 3, 4]
        >>> sorted(epoch_order([2, 3], shuffle=True, seed=4).tolist())
        [0, 1, 2, 3, 4]
    """
    order = EpochOrder(
        counts,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
        partitions=partitions,
        shuffle_block=shuffle_block,
        unit=unit,
    )
    return order.ids(0, len(order))
