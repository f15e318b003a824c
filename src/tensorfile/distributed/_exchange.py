"""The exchanges of a cooperative load, and the state of its process group.

:func:`gather` hands every rank's small value (its plan, how its reads went) to every rank,
each wait bounded by the load's ``timeout``, marked with the load's phase so that a rank
left behind by an earlier failed load is told apart; :func:`broken` notes a group on which a
load failed out of step (its next load is refused: gloo aborts the process on a collective
paired with another); :func:`membership` and :func:`comm_device` say where this rank stands.

Example:
    >>> is_broken(object())
    False
"""

from __future__ import annotations

import datetime
import pickle
from typing import Any

import torch
import torch.distributed as dist

from tensorfile.core.errors import InvalidArgumentError, PeerError

__all__ = ["broken", "comm_device", "gather", "is_broken", "membership"]


_BROKEN: set[int] = set()
"""The groups (by ``id``) on which a cooperative load of this process failed out of step
with the other ranks (a transfer or an exchange that failed or timed out): their pending
collectives would pair with the next load's, so the next load refuses them."""


def is_broken(group: Any) -> bool:
    """Whether a load of this process left ``group`` out of step (see :func:`broken`)."""
    return id(group) in _BROKEN


def broken(group: Any, exc: BaseException) -> PeerError:
    """Note that ``group`` is out of step; the error to raise."""
    _BROKEN.add(id(group))
    return exc if isinstance(exc, PeerError) else PeerError(str(exc))


def membership(group: Any) -> tuple[int, int]:
    """This rank's rank in ``group`` and the group's size; an
    :class:`~tensorfile.errors.InvalidArgumentError` when this rank is not in it."""
    try:
        me = dist.get_rank(group)
        world = dist.get_world_size(group) if me >= 0 else 0
    except (ValueError, RuntimeError) as exc:
        raise InvalidArgumentError(f"load(group=...): not a usable process group: {exc}") from exc
    if me < 0:
        raise InvalidArgumentError(
            f"load(group=...): this process (global rank {dist.get_rank()}) is not a member of "
            "the group; only its members call load with it"
        )
    return me, world


def comm_device(group: Any) -> torch.device | None:
    """Where the backend sends from: None for the CPU (gloo), else the current CUDA device."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def gather(
    value: Any, group: Any, phase: str, wait: datetime.timedelta, comm: torch.device | None
) -> list[Any]:
    """Every rank's ``value`` (pickled; the ranks are one job), each wait bounded by
    ``wait``; the ``phase`` is sent along, and a rank at another phase (one left behind by
    an earlier load that failed) is a :class:`~tensorfile.errors.PeerError`, never a value
    taken for another."""
    what = {"plans": "exchange their plans", "outcome": "tell each other how their reads went"}
    data = pickle.dumps((_PHASE, phase, value))
    world = dist.get_world_size(group)
    try:
        size = torch.tensor([len(data)], dtype=torch.int64, device=comm)
        sizes = [torch.zeros(1, dtype=torch.int64, device=comm) for _ in range(world)]
        dist.all_gather(sizes, size, group=group, async_op=True).wait(wait)
        n = max(int(t.item()) for t in sizes)
        mine = torch.zeros(n, dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        mine = mine if comm is None else mine.to(comm)
        outs = [torch.empty(n, dtype=torch.uint8, device=comm) for _ in range(world)]
        dist.all_gather(outs, mine, group=group, async_op=True).wait(wait)
    except Exception as exc:
        raise broken(
            group,
            PeerError(
                f"the group's ranks could not {what.get(phase, phase)} within "
                f"{wait.total_seconds():g} s (a rank stopped, is late, or is out of step): {exc}"
            ),
        ) from exc
    heard = []
    for r, (t, k) in enumerate(zip(outs, sizes, strict=True)):
        try:
            tag, got, value = pickle.loads(t.cpu().numpy()[: int(k.item())].tobytes())
        except Exception:
            tag, got, value = None, None, None
        if tag != _PHASE or got != phase:
            raise broken(
                group,
                PeerError(
                    f"rank {r} of the group is out of step with this one (it is at another step "
                    "of a load: an earlier load on this group failed on some rank); make a new "
                    "process group"
                ),
            )
        heard.append(value)
    return heard


_PHASE = "tensorfile.distributed.load"
"""Marks the values of a load's exchanges (see :func:`gather`)."""
