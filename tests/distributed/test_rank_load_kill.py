"""Issue 38's "a rank that dies mid-load makes every other rank fail with a clear error
instead of hanging (a test kills one)": 3 real gloo ranks load a checkpoint cooperatively and
rank 1 is SIGKILLed, once while it is between two of its block reads (after it has sent its
first block), once before it joins the exchange of plans. Every other rank must end on its
own (exit 0 after recording what it raised, long before the harness would kill it) with a
:class:`~tensorfile.errors.PeerError`.

One driver process (a fresh interpreter that has imported torch once) forks each scenario's
ranks (milliseconds each, where a new interpreter costs seconds here: :func:`run_groups`).
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
from safetensors.torch import save_file

from tests.distributed._ranks import Group, Rank, Scenario, run_groups

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


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Group]:
    folder = tmp_path_factory.mktemp("rank_load_kill")
    path = folder / "m.safetensors"
    g = torch.Generator().manual_seed(1)
    save_file({"w": torch.randn(2048, 1024, generator=g), "b": torch.randn(1024, generator=g)},
              str(path))  # fmt: skip
    scenarios = {
        when: Scenario(_target, WORLD, {"path": str(path), "when": when}, timeout=150, grace=120)
        for when in SCENARIOS
    }
    return run_groups(scenarios, folder / "driver")


@pytest.mark.parametrize("when", SCENARIOS)
def test_a_killed_rank_fails_every_other_rank_without_a_hang(
    groups: dict[str, Group], when: str
) -> None:
    group = groups[when]
    assert not group.timed_out, group.failure()
    assert group.returncodes[1] == -signal.SIGKILL
    assert [group.returncodes[r] for r in (0, 2)] == [0, 0], group.failure()
    for r, text in zip((0, 2), group.get("outcome", [0, 2]), strict=True):
        assert text.startswith("PeerError"), (r, text)
