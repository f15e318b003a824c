"""Issue 38's "a rank that dies mid-load makes every other rank fail with a clear error
instead of hanging (a test kills one)": 3 real gloo ranks load a checkpoint cooperatively and
rank 1 is SIGKILLed, once while it is between two of its block reads (after it has sent its
first block), once before it joins the exchange of plans. Every other rank must end on its
own (exit 0 after recording what it raised, long before the harness would kill it) with a
:class:`~tensorfile.errors.PeerError`.

One driver process (a fresh interpreter that has imported torch once) forks each scenario's
ranks (milliseconds each, where a new interpreter costs seconds here), as the crash tests of
``test_dcp_crash`` do.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from tests.distributed._ranks import Group, Rank, run_ranks, start_forked

WORLD = 3
SCENARIOS = ("mid-read", "exchange")


def _target(ctx: Rank) -> None:
    import torch.distributed as dist

    from tensorfile.distributed import _cooperate, load

    victim = ctx.rank == 1
    if victim and ctx.args["when"] == "exchange":
        os.kill(os.getpid(), signal.SIGKILL)
    if victim:
        real = _cooperate.read_regions
        calls = []

        def read_then_die(*args: object, **kwargs: object) -> int:
            calls.append(1)
            if len(calls) == 2:  # its first block was read and sent
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)  # type: ignore[arg-type]

        _cooperate.read_regions = read_then_die  # type: ignore[assignment]
    cols = 1024 // WORLD
    plan = {"w": (slice(None), slice(ctx.rank * cols, (ctx.rank + 1) * cols)), "b": None}
    try:
        load(ctx.args["path"], plan, group=dist.group.WORLD, timeout=10)
        ctx.record("outcome", "loaded")
    except Exception as exc:
        ctx.record("outcome", f"{type(exc).__name__}: {exc}")
    os._exit(0)  # (the group is broken: no teardown)


def _driver(ctx: Rank) -> None:
    """Each scenario's ranks, forked; what each group did, recorded under its name."""
    import torch.distributed  # noqa: F401  (what the ranks use: imported once, before the forks)

    import tensorfile.distributed  # noqa: F401

    for when in SCENARIOS:
        args = {"path": ctx.args["path"], "when": when}
        g = start_forked(_target, WORLD, ctx.folder / when, args=args).wait(150, grace=120)
        ctx.record(when, {"timed_out": g.timed_out, "codes": g.returncodes,
                          "records": g.records, "failure": g.failure()})  # fmt: skip


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("rank_load_kill")
    path = folder / "m.safetensors"
    g = torch.Generator().manual_seed(1)
    save_file({"w": torch.randn(2048, 1024, generator=g), "b": torch.randn(1024, generator=g)},
              str(path))  # fmt: skip
    group: Group = run_ranks(
        _driver, 1, folder / "driver", args={"path": str(path)}, timeout=400, collective=False
    )
    assert group.failure() is None, group.failure()
    return {when: group.get(when)[0] for when in SCENARIOS}


@pytest.mark.parametrize("when", SCENARIOS)
def test_a_killed_rank_fails_every_other_rank_without_a_hang(
    driver: dict[str, Any], when: str
) -> None:
    got = driver[when]
    assert not got["timed_out"], got["failure"]
    assert got["codes"][1] == -signal.SIGKILL
    assert [got["codes"][r] for r in (0, 2)] == [0, 0], got["failure"]
    for r in (0, 2):
        text = got["records"][r].get("outcome")
        assert text is not None and text.startswith("PeerError"), (r, text)
