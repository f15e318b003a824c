"""review38a: hostile tests of cooperative loads (``tensorfile.distributed.load`` with a
group), in one group of 3 real gloo ranks (an odd world size): plans that differ wildly
between ranks (everything, nothing, repeated/unsorted/overlapping intervals, negative steps,
``None``/``...``, 0-d, empty dims, sub-byte F4), broadcasts beside point-to-point pieces,
groups of one rank and a sub-group, a bad key on one rank, a rank on another checkpoint of
the same layout, and a rank that joins late. The oracle is numpy indexing of the tensors
written, and each rank's own lone load (``group=None``). That group and the slow owner's
are forked from one driver process (:func:`run_groups`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.distributed._ranks import Group, Rank, Scenario, raw, run_groups

WORLD = 3


def tensors(shift: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    g = np.random.default_rng(38 + shift)

    def ints(*shape: int) -> np.ndarray[Any, Any]:
        return g.integers(-6, 6, shape).astype(np.float32)

    return {
        "a": ints(12, 10),
        "b": ints(9, 16).astype(ml_dtypes.bfloat16),
        "c": ints(6, 5, 4).astype(ml_dtypes.float8_e4m3fn),
        "m": g.integers(0, 2, (7, 3)).astype(np.bool_),
        "s": np.array(2.5 + shift, np.float32),
        "e": np.zeros((0, 5), np.int8),
        "f4": (np.abs(ints(6, 8)) % 4).astype(ml_dtypes.float4_e2m1fn),
        "big": g.standard_normal((1024, 512)).astype(np.float32),  # 2 MiB: 2 blocks
    }


def hostile_plan() -> dict[str, Any]:
    from tensorfile.distributed import Intervals

    return {
        "a": Intervals(0, [(6, 8), (0, 3), (1, 4), (0, 3), (5, 5)]),
        "b": (slice(None, None, -3), [(5, 7), (0, 2), (1, 3)]),
        "c": (None, ..., 2),
        "m": (slice(-1, None, -2),),
        "s": None,
        "e": (slice(None), slice(1, 1)),
        "f4": (slice(1, 3),),
        "big": (slice(None), [(500, 512), (0, 3), (0, 3)]),
    }


def plan_a(rank: int) -> dict[str, Any] | None:
    return [None, {}, hostile_plan()][rank]


def plan_b(rank: int) -> dict[str, Any]:
    from tensorfile.distributed import Intervals

    cols = [[(0, 4), (400, 512)], [(300, 310), (0, 2)], [(511, 512), (100, 120), (100, 120)]]
    return {"a": None, "big": Intervals(1, cols[rank]), "c": (rank,), "s": None}


def expected(arr: np.ndarray[Any, Any], entry: Any) -> np.ndarray[Any, Any]:
    from tensorfile.distributed import Intervals

    if entry is None:
        return arr
    if isinstance(entry, Intervals):
        lead = (slice(None),) * (entry.dim % arr.ndim)
        return np.concatenate([arr[(*lead, slice(a, b))] for a, b in entry.intervals], entry.dim)
    items = list(entry) if isinstance(entry, tuple) else [entry]
    d = 0
    for k, item in enumerate(items):
        if isinstance(item, list):
            arr = np.concatenate([arr[(slice(None),) * d + (slice(a, b),)] for a, b in item], d)
            items[k] = slice(None)
        if item is Ellipsis:
            d = arr.ndim - sum(1 for i in items[k + 1 :] if i is not None)
        elif item is not None:
            d += 1
    return arr[tuple(items)]


def _as_numpy(t: Any) -> Any:
    return (str(t.dtype), tuple(t.shape), raw(t))


def _target(ctx: Rank) -> None:
    import torch.distributed as dist

    from tensorfile.distributed import load

    path, other = ctx.args["path"], ctx.args["other"]
    world = dist.group.WORLD
    r = ctx.rank

    def both(key: str, plan: Any, group: Any = world) -> None:
        def go() -> None:
            together = load(path, plan, group=group)
            alone = load(path, plan)
            ctx.record(key, {n: _as_numpy(t) for n, t in together.items()})
            ctx.record(key + "_alone", {n: _as_numpy(t) for n, t in alone.items()})

        ctx.attempt(key + "_ok", go)

    both("a", plan_a(r))
    both("b", plan_b(r))
    alone_groups = [dist.new_group([i]) for i in range(WORLD)]
    both("one", plan_b(r), alone_groups[r])  # a group of one rank
    sub = dist.new_group([1, 2])
    if r in (1, 2):
        both("sub", plan_a(3 - r), sub)  # global rank 1 wants nothing, rank 2 the hostile plan
    else:  # rank 0 is no member of ``sub``
        ctx.attempt("not_member", load, path, plan_b(r), group=sub)
    dist.barrier()
    # a key that is no str on rank 1: every rank fails, with a tensorfile error
    bad = {**plan_b(r), 7: None} if r == 1 else plan_b(r)
    ctx.attempt("badkey", load, path, bad, group=world)
    # rank 2 on another checkpoint of the very same layout (a later step of one run)
    ctx.attempt("same_layout", load, other if r == 2 else path, plan_b(r), group=world)
    # rank 2 reads from a server that refuses the tensors' bytes (its header is served):
    # its blocks fail to read; every rank must fail with a tensorfile error, none hang
    if r == 2:
        from tests.helpers.hostile_http import HostileServer, parse_range, reply

        data = Path(path).read_bytes()
        header = 8 + int.from_bytes(data[:8], "little")

        def respond(request: Any, conn: Any) -> bool:
            rng = parse_range(request.headers.get("range"), len(data))
            if rng is None or rng[0] >= header:
                conn.sendall(reply(403, {"Content-Length": "0"}))
                return True
            a, b = rng
            head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
            conn.sendall(reply(206, head, data[a:b]))
            return True

        with HostileServer(respond) as server:
            url = f"{server.url}/model.safetensors"
            ctx.attempt("failing_read", load, url, plan_a(0), group=world, timeout=20.0)
    else:
        ctx.attempt("failing_read", load, path, plan_a(0), group=world, timeout=20.0)
    dist.barrier()
    # rank 1 passes a device that does not exist: refused at once, and told to the others at
    # the exchange (they must not wait for a rank that left): every rank fails, in step
    bad_device = "no-such-device" if r == 1 else "cpu"
    ctx.attempt("device", load, path, plan_b(r), group=world, device=bad_device, timeout=3.0)
    dist.barrier()
    # rank 2 joins the load 4 s late; every rank allows every wait 2 s. The group is out of
    # step afterwards (a timed-out collective stays posted): the ranks leave without it.
    if r == 2:
        time.sleep(4)
    start = time.monotonic()
    ok = ctx.attempt("late", load, path, plan_b(r), group=world, timeout=2.0)
    ctx.record("late_s", (ok, time.monotonic() - start))
    ctx.attempt("after_late", load, path, plan_b(r), group=world, timeout=2.0)
    os._exit(0)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tensorfile.safetensors.numpy import save_file

    one, two = tmp_path_factory.mktemp("run1"), tmp_path_factory.mktemp("run2")
    save_file(tensors(), one / "model.safetensors")
    save_file(tensors(shift=1), two / "model.safetensors")  # same names, dtypes, shapes
    return one / "model.safetensors", two / "model.safetensors"


@pytest.fixture(scope="module")
def groups(ckpt: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Group]:
    """The module's two groups of ranks (:func:`_target`, :func:`_slow_owner_target`: each
    leaves its group out of step), forked from one driver."""
    both = {"path": str(ckpt[0]), "other": str(ckpt[1])}
    scenarios = {
        "group": Scenario(_target, WORLD, both, timeout=180, grace=30),
        "slow": Scenario(_slow_owner_target, WORLD, {"path": str(ckpt[0])}, timeout=120, grace=30),
    }
    return run_groups(scenarios, tmp_path_factory.mktemp("ranks"))


@pytest.fixture(scope="module")
def group(groups: dict[str, Group]) -> Group:
    return groups["group"]


def _check(g: Group, key: str, plans: list[Any], ranks: list[int]) -> None:
    g.ok(key + "_ok", ranks)
    full = tensors()
    for rank, plan in zip(ranks, plans, strict=True):
        (got,) = g.get(key, [rank])
        (alone,) = g.get(key + "_alone", [rank])
        names = sorted(full) if plan is None else sorted(plan)
        assert sorted(got) == names, (rank, sorted(got))
        assert got == alone, (rank, [n for n in got if got[n] != alone[n]])
        for name in names:
            if name == "f4":
                continue  # torch packs F4 in pairs: checked against the lone load above
            want = np.array(expected(full[name], None if plan is None else plan[name]), order="C")
            _, shape, data = got[name]
            assert shape == want.shape, (rank, name, shape, want.shape)
            assert data == want.tobytes(), (rank, name)


def test_wildly_different_plans_on_three_ranks(group: Group) -> None:
    _check(group, "a", [plan_a(r) for r in range(WORLD)], [0, 1, 2])


def test_broadcast_beside_interleaved_columns(group: Group) -> None:
    _check(group, "b", [plan_b(r) for r in range(WORLD)], [0, 1, 2])


def test_groups_of_one_rank_and_a_sub_group(group: Group) -> None:
    _check(group, "one", [plan_b(r) for r in range(WORLD)], [0, 1, 2])
    _check(group, "sub", [plan_a(2), plan_a(1)], [1, 2])


def test_a_key_that_is_no_str_fails_every_rank(group: Group) -> None:
    got = group.get("badkey")
    assert got[1].startswith("tensorfile.core.errors.InvalidTypeError"), got[1]
    assert all(t.startswith("tensorfile.core.errors.PeerError") for t in (got[0], got[2])), got


def test_a_rank_on_another_checkpoint_of_the_same_layout_fails_every_rank(group: Group) -> None:
    """The docstring: "every rank must load the same checkpoint"; the identity compared is
    names, dtypes, shapes, file names and offsets: a rank on another step of the same run
    (or another fine-tune of one base model) passes, and every rank gets a silent mix of
    blocks from both checkpoints."""
    got = group.get("same_layout")
    assert all("PeerError" in t for t in got), got


def test_timeout_bounds_the_wait_for_a_late_rank(group: Group) -> None:
    """``timeout`` "bounds every wait": ranks 0 and 1 give 2 s, rank 2 joins 4 s late; the
    plan exchange (``all_gather_object``) waits on the process group's own timeout instead,
    so both waited the 4 s and then loaded as if nothing happened."""
    for rank in (0, 1):
        (late,) = group.get("late", [rank])
        assert "PeerError" in late, (rank, late)


def test_a_rank_refusing_its_device_fails_every_rank_within_the_timeout(group: Group) -> None:
    """Rank 1's ``device="no-such-device"`` is refused before any read; it is told to the
    other ranks at the exchange, so they fail at once with a PeerError naming rank 1 (they
    used to wait in the exchange for the process group's own timeout)."""
    got = group.get("device")
    assert "device" in got[1] and not got[1].startswith("tensorfile.core.errors.PeerError"), got
    for r in (0, 2):
        assert got[r].startswith("tensorfile.core.errors.PeerError") and "rank 1" in got[r], got


def test_a_load_on_a_group_left_out_of_step_is_refused(group: Group) -> None:
    """After the late load timed out, the group's collectives are no longer paired: the next
    load on it is refused at once on every rank, with a PeerError saying to make a new group
    (never a collective paired with the old one, which gloo answers by aborting)."""
    for r, text in enumerate(group.get("after_late")):
        assert text.startswith("tensorfile.core.errors.PeerError"), (r, text)
        assert "make a new process group" in text, (r, text)


def test_a_failing_read_on_one_owner_fails_every_rank(group: Group) -> None:
    got = group.get("failing_read")
    assert all(t.startswith("tensorfile.") for t in got), got
    # (refused when rank 2 samples its file's bytes for the checkpoint's identity, or later)
    assert all("PeerError" in t and "rank 2" in t for t in got[:2]), got


def _slow_owner_target(ctx: Rank) -> None:
    """Rank 2 reads from a server that holds the tensors' bytes back 4 s; ranks 0 and 1
    allow 1.5 s: they time out waiting for rank 2's blocks. Then every rank loads again."""
    import threading

    import torch.distributed as dist

    from tensorfile.distributed import load
    from tests.helpers.hostile_http import HostileServer, parse_range, reply

    path, world, r = ctx.args["path"], dist.group.WORLD, ctx.rank
    data = Path(path).read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    gate = threading.Event()

    def respond(request: Any, conn: Any) -> bool:
        rng = parse_range(request.headers.get("range"), len(data))
        a, b = (0, len(data)) if rng is None else rng
        if a >= header:
            gate.wait(30)
        head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
        conn.sendall(reply(206, head, data[a:b]))
        return True

    with HostileServer(respond) as server:
        if r == 2:
            threading.Timer(4.0, gate.set).start()
            source, timeout = f"{server.url}/model.safetensors", 6.0
        else:
            source, timeout = path, 1.5
        ctx.attempt("slow", load, source, None, group=world, timeout=timeout)
        ctx.attempt("next", load, path, {"s": None}, group=world, timeout=10.0)
    if r != 2:
        os._exit(0)  # (rank 2 may be one collective behind: release it)


@pytest.fixture(scope="module")
def slow_group(groups: dict[str, Group]) -> Group:
    return groups["slow"]


def test_ranks_that_time_out_on_a_slow_owner_fail_with_peer_error(slow_group: Group) -> None:
    got = slow_group.get("slow", [0, 1])
    assert all(t.startswith("tensorfile.core.errors.PeerError") for t in got), got


def test_the_load_after_a_timed_out_load_is_not_paired_with_the_old_one(
    slow_group: Group,
) -> None:
    """Ranks 0 and 1 left the slow load at their timeout, one collective (the final
    ``all_gather_object`` of read failures) short of rank 2. Their next load's plan
    exchange is paired with rank 2's old failure exchange: rank 2 reads their plans as
    failure texts, and ranks 0 and 1 unpack rank 2's ``None`` as a plan: a bare TypeError
    escapes ``load``. Every rank should get a tensorfile error (or a clean load)."""
    for rank in range(WORLD):
        texts = slow_group.get("slow", [rank]) + slow_group.get("next", [rank])
        assert all(t == "ok" or t.startswith("tensorfile.") for t in texts), (rank, texts)


def test_a_rank_outside_the_group_gets_a_tensorfile_error(group: Group) -> None:
    """``load(group=sub)`` on a rank that is no member of ``sub``: ``get_rank(sub)`` is -1
    and torch's ``get_world_size(sub)`` raises a bare ``ValueError: Invalid process group
    specified``, which escapes ``load``; it should be a tensorfile error saying the rank is
    not in the group."""
    (got,) = group.get("not_member", [0])
    assert got.startswith("tensorfile."), got
