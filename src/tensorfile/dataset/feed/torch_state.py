"""How :class:`~tensorfile.dataset.torch.TorchIterable` splits an epoch's order into steps
for ranks and DataLoader workers, and its resume state: small JSON, checked before use.

**Steps.** From a resume point ``base`` (0 at an epoch's start), ranks consume the order in
lockstep steps of ``W*B`` positions (``W`` ranks, ``B`` samples each): step ``t`` is
``[base + t*W*B, base + (t+1)*W*B)`` and rank ``r`` takes the contiguous piece
``[.. + r*B, .. + (r+1)*B)``. With ``M = N - base`` positions left, ``even=True`` (or
``"drop"``) gives every rank ``M // W``: full steps, then one short step where each rank
takes an equal contiguous piece; the last ``M % W`` positions are dropped. ``even="pad"``
gives ``ceil(M / W)`` each, positions past ``N`` wrapping to the start of the order.
``even=False`` gives counts that differ by at most one. After ``s`` steps on every rank the
samples consumed are exactly positions ``[base, base + s*W*B)`` of the order, whatever
``W``: :meth:`Split.consumed`.

Example:
    >>> s = Split(total=10, base=0, world=3, unit=2, even=True)
    >>> s.steps, [s.piece(t, 1) for t in range(s.steps)]
    (2, [(2, 4), (7, 8)])
    >>> s.consumed(1), s.consumed(2)
    (6, 10)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "FORMAT",
    "Split",
    "check_state",
    "find_loader_states",
    "find_states",
    "make_state",
    "shards_digest",
]

FORMAT = "tensorfile.dataset.torch/1"
# fields that must agree between a state and the dataset resuming from it
IDENTITY = ("total", "shards", "seed", "shuffle", "partitions", "shuffle_block", "batch_size")
WORKER_FIELDS = ("rank", "world_size", "id", "workers", "base", "next_step")
LOADER_STEPS = "_steps_since_snapshot"  # torchdata StatefulDataLoader: batches after its snapshot


@dataclass(frozen=True)
class Split:
    """The steps of one rank-split from ``base`` to the epoch's end (module docstring)."""

    total: int
    base: int
    world: int
    unit: int
    even: bool | str

    @property
    def left(self) -> int:
        """``M``: positions of the order not yet consumed."""
        return self.total - self.base

    @property
    def per_rank(self) -> int:
        """Samples each rank takes (``even=False``: the smallest rank's count)."""
        m, w = self.left, self.world
        if self.even == "pad":
            return math.ceil(m / w) if m > 0 else 0
        return m // w

    @property
    def full(self) -> int:
        """Steps in which every rank takes ``unit`` samples."""
        return self.per_rank // self.unit

    @property
    def _tail(self) -> int:
        """Positions of the last, short step (all ranks together)."""
        if self.even is False:
            return self.left - self.full * self.world * self.unit
        return (self.per_rank - self.full * self.unit) * self.world

    @property
    def steps(self) -> int:
        """Steps in all (the last may be short)."""
        return self.full + (1 if self._tail else 0)

    def piece(self, step: int, rank: int) -> tuple[int, int]:
        """``[lo, hi)``, the positions rank ``rank`` takes in ``step`` (past ``total``:
        wrapped, ``even="pad"``)."""
        w, b = self.world, self.unit
        if step < self.full:
            lo = self.base + step * w * b + rank * b
            return lo, lo + b
        start, tail = self.base + self.full * w * b, self._tail
        if self.even is False:
            return start + rank * tail // w, start + (rank + 1) * tail // w
        each = tail // w
        return start + rank * each, start + (rank + 1) * each

    def rank_steps(self, rank: int, drop_last: bool) -> int:
        """The steps in which ``rank`` takes a non-empty piece (with ``drop_last``, a full
        one)."""
        if self.steps == self.full:
            return self.full
        lo, hi = self.piece(self.full, rank)
        if hi == lo or (drop_last and hi - lo < self.unit):
            return self.full
        return self.steps

    def consumed(self, steps: int, drop_last: bool = False) -> int:
        """Positions consumed (all ranks) once ``steps`` steps are done: ``M`` (the whole
        rest of the epoch) after the last one."""
        last = self.full if drop_last else self.steps
        if steps >= last:
            return self.left
        return max(steps, 0) * self.world * self.unit


def shards_digest(paths: list[str], counts: list[int]) -> str:
    """A short digest of a dataset's shards (paths and sample counts, manifest order): a
    state of a dataset with the same total and shard count but other shards is refused.

    Example:
        >>> len(shards_digest(["a.safetensors"], [3]))
        16
        >>> shards_digest(["a", "b"], [4, 2]) == shards_digest(["a", "b"], [2, 4])
        False
    """
    text = json.dumps([[p, int(c)] for p, c in zip(paths, counts, strict=True)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_state(
    fields: dict[str, Any],
    samples: int,
    worker: dict[str, int] | None = None,
    *,
    exact_global: bool = True,
) -> dict[str, Any]:
    """The resume state: ``fields`` (:data:`IDENTITY` and ``epoch``), ``samples`` consumed
    globally, and for a DataLoader worker its own position (``exact_global`` False where its
    ``samples`` bounds nothing globally: single samples without the batch_size hint)."""
    state = {"format": FORMAT, **fields, "samples": int(samples)}
    if worker is not None:
        state["worker"] = dict(worker)
        if not exact_global:
            state["exact_global"] = False
    return state


def find_states(obj: Any) -> list[dict[str, Any]]:
    """The states in ``obj``: one state, a list of them, or a torchdata
    ``StatefulDataLoader.state_dict()`` (searched for states, up to a bounded depth).

    Example:
        >>> [s["samples"] for s in find_states({"a": [{"format": FORMAT, "samples": 3}]})]
        [3]
    """
    return [state for state, _ in find_loader_states(obj)]


def find_loader_states(
    obj: Any, depth: int = 0, after: int = 0
) -> list[tuple[dict[str, Any], int]]:
    """:func:`find_states`, each state with the batches its ``StatefulDataLoader`` yielded
    after it: a loader keeps its workers' states as of its last snapshot (every
    ``snapshot_every_n_steps`` batches) and counts the batches since in its
    ``_steps_since_snapshot`` (0 where none).

    Example:
        >>> loader = {"_snapshot": {"w": {"format": FORMAT, "samples": 8}},
        ...           "_steps_since_snapshot": 2}
        >>> [(s["samples"], n) for s, n in find_loader_states([loader])]
        [(8, 2)]
    """
    if depth > 12:
        return []
    if isinstance(obj, dict):
        if obj.get("format") == FORMAT:
            return [(obj, after)]
        since = obj.get(LOADER_STEPS)
        if isinstance(since, int | np.integer) and not isinstance(since, bool) and since > 0:
            after = int(since)
        values: Any = obj.values()  # another "format" key: someone else's, searched through
    elif isinstance(obj, (list, tuple)):
        values = obj
    else:
        return []
    found: list[tuple[dict[str, Any], int]] = []
    for v in values:
        found += find_loader_states(v, depth + 1, after)
    return found


def _int(state: dict[str, Any], key: str, where: str = "") -> int:
    value = state.get(key)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise InvalidArgumentError(
            f"the resume state's {where}{key!r} is not an integer: {value!r}"
        )
    if value < 0:
        raise InvalidArgumentError(f"the resume state's {where}{key!r} is negative: {value}")
    return int(value)


def check_state(state: Any, expect: dict[str, Any]) -> dict[str, Any]:
    """``state`` checked against ``expect`` (the resuming dataset's :data:`IDENTITY`
    fields, its digest and any fields of its own, as a mixture's): every field present and
    of the right type, the same dataset and order, and ``samples`` within the epoch. Returns
    it with a checked ``"worker"`` part (or none).

    Example:
        >>> ok = {"total": 10, "shards": 2, "seed": 0, "shuffle": False, "partitions": 64,
        ...       "shuffle_block": 8, "batch_size": 1, "digest": "0123456789abcdef"}
        >>> check_state(make_state({**ok, "epoch": 0}, 4), ok)["samples"]
        4
        >>> try:
        ...     check_state(make_state({**ok, "epoch": 0, "seed": 5}, 4), ok)
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        the resume state is of another seed (5; this dataset's: 0)
    """
    if not isinstance(state, dict):
        raise InvalidTypeError(f"a resume state is a dict, got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise InvalidArgumentError(
            f"not a state of tensorfile.dataset.torch: its format is {state.get('format')!r}, "
            f"not {FORMAT!r}"
        )
    for key, want in expect.items():  # a feed's own fields (a mixture's datasets, weights)
        if key not in IDENTITY and key != "digest" and state.get(key) != want:
            raise InvalidArgumentError(
                f"the resume state is of another {key} ({state.get(key)!r}; this feed's: {want!r})"
            )
    for key in IDENTITY:
        have, want = state.get(key), expect[key]
        if key == "shuffle":
            if not isinstance(have, bool):
                raise InvalidArgumentError(f"the resume state's 'shuffle' is not a bool: {have!r}")
        else:
            have = _int(state, key)
        if have != want:
            what = "dataset" if key in ("total", "shards") else key
            raise InvalidArgumentError(
                f"the resume state is of another {what} ({key} {have}; this dataset's: {want})"
                if what == "dataset"
                else f"the resume state is of another {key} ({have}; this dataset's: {want})"
            )
    if state.get("digest") != expect["digest"]:
        raise InvalidArgumentError(
            f"the resume state is of another dataset (shards digest {state.get('digest')!r}; "
            f"this dataset's: {expect['digest']!r}: other shard files or sample counts)"
        )
    if not isinstance(state.get("exact_global", True), bool):
        raise InvalidArgumentError(
            f"the resume state's 'exact_global' is not a bool: {state.get('exact_global')!r}"
        )
    _int(state, "epoch")
    samples = _int(state, "samples")
    if samples > expect["total"]:
        raise InvalidArgumentError(
            f"the resume state says {samples} samples were consumed; the epoch has only "
            f"{expect['total']}"
        )
    out = dict(state)
    worker = state.get("worker")
    if worker is None:
        out.pop("worker", None)
        return out
    if not isinstance(worker, dict):
        raise InvalidArgumentError(f"the resume state's 'worker' is not a dict: {worker!r}")
    checked = {k: _int(worker, k, "worker ") for k in WORKER_FIELDS}
    if checked["base"] > expect["total"]:
        raise InvalidArgumentError(
            f"the resume state's worker 'base' {checked['base']} is past the epoch's end "
            f"({expect['total']})"
        )
    if checked["workers"] < 1 or checked["world_size"] < 1:
        raise InvalidArgumentError("the resume state's worker has no workers or no world")
    out["worker"] = checked
    return out
