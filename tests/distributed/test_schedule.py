"""The cooperative load's schedule, simulated without processes: for random plans of 1 to 4
ranks, every block read from the tensor and every piece cut out of it and placed where the
schedule says gives each rank exactly numpy's result; each byte some rank wants is read
once (blocks never overlap), and blocks hold nothing no rank wants where wants split rows
or columns."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.core.selection import Intervals, region
from tensorfile.core.selection.runs import take
from tensorfile.distributed._cooperate import _extract
from tensorfile.distributed._schedule import Tensor, schedule


@st.composite
def _entry(draw: Any, shape: tuple[int, ...]) -> Any:
    kind = draw(st.sampled_from(["none", "rows", "cols", "intervals", "basic"]))
    if kind == "none" or not shape:
        return None
    n = shape[0]
    a, b = sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=2)))
    if kind == "rows":
        return (slice(a, b),)
    if kind == "cols" and len(shape) > 1:
        c, d = sorted(draw(st.lists(st.integers(0, shape[1]), min_size=2, max_size=2)))
        return (slice(a, b), slice(c, d))
    if kind == "intervals":
        dim = draw(st.integers(0, len(shape) - 1))
        cuts = sorted(draw(st.lists(st.integers(0, shape[dim]), min_size=2, max_size=6)))
        pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
        return Intervals(dim, draw(st.permutations(pairs)))
    return (slice(a, b, draw(st.sampled_from([1, 2, -1]))),)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple),
       world=st.integers(1, 4), block=st.sampled_from([4, 16, 64, 1 << 20]))  # fmt: skip
def test_the_schedule_moves_each_ranks_region_to_it(data: Any, shape: tuple[int, ...],
                                                     world: int, block: int) -> None:  # fmt: skip
    full = (np.arange(math.prod(shape), dtype=np.int32) * 7 + 1).reshape(shape)
    raw = full.reshape(-1).view(np.uint8).reshape(*shape, 4)
    plans = [data.draw(st.one_of(st.just({}), _entry(shape).map(lambda e: {"t": e})))
             for _ in range(world)]  # fmt: skip
    regions = [{n: region(shape, e, n) for n, e in p.items()} for p in plans]
    wants = [{n: r.dims for n, r in rs.items()} for rs in regions]
    s = schedule(wants, [Tensor("t", shape, 4, True)], block)
    boxes = [{n: np.full((*r.box_shape, 4), 0xAB, np.uint8) for n, r in rs.items()}
             for rs in regions]  # fmt: skip
    for b in s.blocks:
        buf = np.empty((*(sum(y - x for x, y in iv) for iv in b.dims), 4), np.uint8)
        take(raw, b.dims, buf)
        for p in b.pieces:
            box = boxes[p.rank][b.name]
            flat = box.reshape(-1)
            per = flat.size // max(box.shape[0], 1) if box.ndim > 1 else flat.size
            dest = flat[p.rows[0] * per : p.rows[1] * per] if box.ndim > 1 else flat
            dest[...] = _extract(buf, p, None)
    for rank, rs in enumerate(regions):
        for n, r in rs.items():
            got = boxes[rank][n]
            got = got if r.key is None else got[(*r.key, Ellipsis)]
            want = np.ascontiguousarray(_numpy(full, plans[rank][n]))
            assert got.reshape(-1).tobytes() == want.reshape(-1).view(np.uint8).tobytes(), (
                rank,
                plans,
            )
    # each wanted byte read once: the blocks of a tensor never overlap
    seen = np.zeros(shape, bool) if shape else np.zeros((), bool)
    for b in s.blocks:
        mask = np.zeros_like(seen)
        idx = np.ix_(*[np.concatenate([np.arange(x, y) for x, y in iv]) for iv in b.dims])
        mask[idx if shape else ()] = True
        assert not (seen & mask).any()
        seen |= mask


def _numpy(full: np.ndarray, entry: Any) -> np.ndarray:
    if entry is None:
        return full
    if isinstance(entry, Intervals):
        idx = [np.arange(a, b) for a, b in entry.intervals]
        return np.take(full, np.concatenate(idx or [np.zeros(0, int)]).astype(int), axis=entry.dim)
    return full[entry]


def test_split_rows_and_split_columns_read_only_what_is_wanted() -> None:
    shape = (40, 30)
    for split in ("rows", "cols", "diagonal"):
        wants = []
        for r in range(3):
            lo, hi = r * 10, r * 10 + 10
            entry = {"rows": (slice(lo, hi),), "cols": (slice(None), slice(lo, hi)),
                     "diagonal": (slice(lo, hi), slice(lo, hi))}[split]  # fmt: skip
            wants.append({"t": region(shape, entry).dims})
        s = schedule(wants, [Tensor("t", shape, 4, True)], 400)
        wanted = sum(math.prod(sum(b - a for a, b in iv) for iv in w["t"]) for w in wants) * 4
        assert sum(b.nbytes for b in s.blocks) == wanted, split
