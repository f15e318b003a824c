"""Real ranks for the tests of :mod:`tensorfile.distributed`: a module-level function run in N
processes joined by ``torch.distributed`` (gloo on 127.0.0.1), its records brought back to
the test, and the tensors those ranks hold.

* :func:`run_ranks`: ``target(rank)`` in ``world`` fresh interpreters (one spawn group: each
  costs seconds of import on this machine, so a test module runs one group and checks many
  things in it). Rendezvous through a file of the group's folder (no port to race for);
  gloo talks over the loopback (``GLOO_SOCKET_IFNAME=lo``). A hard timeout kills every rank
  and fails the test (a hang never hangs the suite); a rank that fails gets its peers killed
  after a grace period (they would wait in the next collective).
* :func:`fork_ranks`, :func:`start_forked`: the same from inside a process that has imported
  torch already (the crash tests' driver): ranks are forked, which costs milliseconds, so a
  test can run many short-lived groups (and SIGKILL them).
* :func:`run_groups`: several groups, one after another, forked from one such driver: a
  module whose scenarios need groups of their own (one that leaves its group out of step, a
  rank that is killed) pays for one new interpreter, not one per rank and group.
* :func:`dtensor`, :func:`local_chunk`: DTensors built without a collective (gloo cannot
  scatter every dtype): ``torch.chunk``'s split, as DTensor's ``Shard`` makes it, trailing
  ranks with empty shards.
* :func:`raw`, :func:`mismatches`: bit-exact comparison through the raw bytes (BF16, F8 and
  BOOL included; NaNs compare as their bits).

Run ``target`` only as a module-level function: the rank processes import it by name.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
PG_TIMEOUT_S = 60  # a collective whose peer died fails after this (gloo notices sooner)
_RECORDS = ".records"


@dataclass
class Rank:
    """What ``target`` gets: its rank, the world size, the group's folder (shared by every
    rank and the test) and ``args`` (JSON values given to :func:`run_ranks`)."""

    rank: int
    world: int
    folder: Path
    args: dict[str, Any] = field(default_factory=dict)

    def record(self, key: str, value: Any) -> None:
        """Hand ``value`` (picklable) to the test at once: what a rank recorded before it
        hung or died still reaches the test."""
        where = self.folder / _RECORDS
        where.mkdir(exist_ok=True)
        tmp = where / f".{self.rank}.{key}.{os.getpid()}.tmp"
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, where / f"{self.rank}.{key}.pkl")

    def attempt(self, key: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """``call(*args, **kwargs)``; records ``"ok"`` under ``key`` or the text of what it
        raised (``CheckpointException`` is a BaseException: caught too); whether it
        returned."""
        try:
            call(*args, **kwargs)
        except BaseException as exc:
            self.record(key, describe(exc))
            return False
        self.record(key, "ok")
        return True


def describe(exc: BaseException) -> str:
    """The exception's type and text, and for DCP's ``CheckpointException`` the type and text
    of each rank's own exception and of its causes (``__cause__`` / ``__context__``)."""
    parts = [f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"]
    for inner in inner_exceptions(exc):
        if inner is not exc:
            parts.append(f"{type(inner).__module__}.{type(inner).__qualname__}: {inner}")
    return "\n".join(parts)[-6000:]


def inner_exceptions(exc: BaseException) -> list[BaseException]:
    """``exc``, the exceptions each rank raised when ``exc`` is DCP's ``CheckpointException``
    (its ``failures``), and every cause and context of those, in order."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e in out:
            continue
        out.append(e)
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo += [pair[0] for pair in failures.values() if isinstance(pair, tuple)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return out


# -- the processes ------------------------------------------------------------------------


@dataclass
class Group:
    """What a group of ranks left in its folder: each rank's records, exit codes, logs."""

    folder: Path
    world: int
    records: list[dict[str, Any]]
    returncodes: list[int | None]
    logs: list[str]
    timed_out: bool
    seconds: float

    def failure(self) -> str | None:
        """None when every rank exited 0; else what went wrong, with each rank's log tail."""
        if not self.timed_out and all(rc == 0 for rc in self.returncodes):
            return None
        head = (
            "the group hung: ranks killed at the timeout"
            if self.timed_out
            else f"rank exit codes {self.returncodes}"
        )
        tails = "\n".join(f"--- rank {r} log ---\n{log[-4000:]}" for r, log in enumerate(self.logs))
        return f"{head}\n{tails}"

    def get(self, key: str, ranks: Sequence[int] | None = None) -> list[Any]:
        """The value each rank of ``ranks`` (all by default) recorded under ``key``; fails the
        test, saying why the group stopped, when one did not record it."""
        out = []
        for r in range(self.world) if ranks is None else ranks:
            if key not in self.records[r]:
                raise AssertionError(
                    f"rank {r} recorded no {key!r}: {self.failure() or 'it never got there'}"
                )
            out.append(self.records[r][key])
        return out

    def ok(self, key: str, ranks: Sequence[int] | None = None) -> None:
        """Assert that every rank of ``ranks`` recorded ``"ok"`` under ``key``
        (:meth:`Rank.attempt`)."""
        got = self.get(key, ranks)
        bad = {r: v for r, v in zip(ranks or range(self.world), got, strict=True) if v != "ok"}
        assert not bad, f"{key}: " + "\n".join(f"rank {r}: {v}" for r, v in bad.items())


def _env() -> dict[str, str]:
    import tensorfile

    src = str(Path(tensorfile.__file__).resolve().parents[1])  # the tensorfile under test
    path = os.pathsep.join(p for p in (src, str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONWARNINGS": "ignore",
    }


def _read_records(folder: Path, world: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{} for _ in range(world)]
    for p in sorted((folder / _RECORDS).glob("*.pkl")) if (folder / _RECORDS).exists() else []:
        rank, key = p.name[: -len(".pkl")].split(".", 1)
        out[int(rank)][key] = pickle.loads(p.read_bytes())
    return out


def _wait(
    poll: Callable[[int], int | None],
    kill: Callable[[int], None],
    n: int,
    timeout: float,
    grace: float,
) -> tuple[list[int | None], bool]:
    """Wait for ``n`` processes; kill all at ``timeout``, and the rest ``grace`` seconds
    after one failed. Returns the exit codes and whether the timeout struck."""
    start = time.monotonic()
    failed_at: float | None = None
    codes: list[int | None] = [None] * n
    while True:
        for i in range(n):
            if codes[i] is None:
                codes[i] = poll(i)
        if all(c is not None for c in codes):
            return codes, False
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        hung = now - start > timeout
        if hung or (failed_at is not None and now - failed_at > grace):
            for i in range(n):
                if codes[i] is None:
                    kill(i)
            time.sleep(0.2)
            for i in range(n):
                if codes[i] is None:
                    codes[i] = poll(i)
            return codes, hung
        time.sleep(0.05)


def run_ranks(
    target: Callable[[Rank], None],
    world: int,
    folder: Path,
    *,
    args: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
    grace: float = 15.0,
    collective: bool = True,
) -> Group:
    """Run ``target(Rank(...))`` in ``world`` new interpreters joined in one gloo group
    (``collective=False``: no group, e.g. a driver that forks its own); returns the
    :class:`Group` (never raises for what the ranks did: the test asserts on it)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / f".rendezvous-{uuid.uuid4().hex}"
    argv = [target.__module__, target.__qualname__, str(world), str(folder), str(store)]
    argv += [json.dumps(dict(args or {})), "1" if collective else "0"]
    logs = [folder / f".rank{r}.log" for r in range(world)]
    start = time.monotonic()
    procs = []
    for r in range(world):
        with open(logs[r], "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.distributed._ranks", str(r), *argv],
                    env=_env(),
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a rank's own children go with it
                )
            )

    def kill(i: int) -> None:
        try:
            os.killpg(procs[i].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    codes, hung = _wait(lambda i: procs[i].poll(), kill, world, timeout, grace)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    return Group(
        folder,
        world,
        _read_records(folder, world),
        codes,
        [p.read_text(errors="replace") for p in logs],
        hung,
        round(time.monotonic() - start, 2),
    )


def _in_rank(target: Callable[[Rank], None], ctx: Rank, store: Path | None) -> None:
    torch.set_num_threads(1)
    if store is None:
        target(ctx)
        return
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=ctx.rank,
        world_size=ctx.world,
        timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
    )
    target(ctx)
    dist.barrier()  # gloo aborts at exit when a peer is torn down first
    dist.destroy_process_group()


class Forked:
    """Ranks forked by :func:`start_forked`, running; :meth:`wait` for them."""

    def __init__(self, folder: Path, pids: list[int]) -> None:
        self.folder, self.pids, self.start = folder, pids, time.monotonic()

    def poll(self, i: int) -> int | None:
        pid, status = os.waitpid(self.pids[i], os.WNOHANG)
        if pid == 0:
            return None
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def kill(self, i: int) -> None:
        try:
            os.kill(self.pids[i], signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float = 60.0, grace: float = 5.0) -> Group:
        """Their :class:`Group` once all have ended (killed at ``timeout``, or ``grace``
        seconds after one failed); exit codes are ``-signal`` for a rank a signal ended;
        their output went to the caller's."""
        n = len(self.pids)
        codes, hung = _wait(self.poll, self.kill, n, timeout, grace)
        for i, c in enumerate(codes):
            if c is None:  # killed just now: reap it
                os.waitpid(self.pids[i], 0)
                codes[i] = -signal.SIGKILL
        seconds = round(time.monotonic() - self.start, 2)
        return Group(self.folder, n, _read_records(self.folder, n), codes, [""] * n, hung, seconds)


def start_forked(
    target: Callable[[Rank], None],
    world: int,
    folder: Path,
    *,
    args: Mapping[str, Any] | None = None,
) -> Forked:
    """Fork ``world`` ranks of a new gloo group running ``target`` (the caller must hold no
    process group and no threads that matter), each in ``folder`` (its records there);
    from a process :func:`run_ranks` started with ``collective=False``, which has imported
    torch already: a fork costs milliseconds where a new interpreter costs seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / f".rendezvous-{uuid.uuid4().hex}"
    pids = []
    for r in range(world):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the rank
            code = 1
            try:
                _in_rank(target, Rank(r, world, folder, dict(args or {})), store)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    return Forked(folder, pids)


def fork_ranks(
    target: Callable[[Rank], None],
    world: int,
    folder: Path,
    *,
    args: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> Group:
    """:func:`start_forked`, then wait for the ranks (:meth:`Forked.wait`)."""
    return start_forked(target, world, folder, args=args).wait(timeout)


@dataclass
class Scenario:
    """One group of :func:`run_groups`: ``target`` in ``world`` forked ranks, with ``args``;
    killed at ``timeout``, or ``grace`` seconds after a rank failed (:meth:`Forked.wait`);
    the ranks' folder is ``folder`` (default: the scenario's name in the driver's)."""

    target: Callable[[Rank], None]
    world: int
    args: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    grace: float = 5.0
    folder: Path | None = None


DCP = (
    "safetensors.torch",
    "torch._dynamo",  # (for DTensor.from_local: seconds)
    "torch.distributed.checkpoint",
    "torch.distributed.device_mesh",
    "torch.distributed.tensor",
    "tensorfile.distributed.reader",
    "tensorfile.distributed.writer",
)
"""What ranks that save or load with ``torch.distributed.checkpoint`` import: a ``preload``
of :func:`run_groups`."""


def _groups_driver(ctx: Rank) -> None:
    # what the ranks use: imported once, before the forks
    for module in ("torch.distributed", "tensorfile.distributed", *ctx.args["preload"]):
        importlib.import_module(module)
    for name, (module, qualname, world, args, timeout, grace, where) in ctx.args["groups"].items():
        target = getattr(importlib.import_module(module), qualname)
        forked = start_forked(target, world, Path(where) if where else ctx.folder / name, args=args)
        ctx.record(name, forked.wait(timeout, grace))


def run_groups(
    scenarios: Mapping[str, Scenario], folder: Path, preload: Sequence[str] = ()
) -> dict[str, Group]:
    """Each scenario's group of ranks, in order, forked from one driver (a new interpreter
    that imports torch, ``tensorfile.distributed`` and the modules of ``preload`` once,
    :func:`run_ranks` with ``collective=False``); the :class:`Group` of each (their output
    went to the driver's log, ``folder/.rank0.log``). A driver that fails fails the test."""
    groups = {
        name: (s.target.__module__, s.target.__qualname__, s.world, dict(s.args), s.timeout,
               s.grace, str(s.folder) if s.folder else None)
        for name, s in scenarios.items()
    }  # fmt: skip
    limit = sum(s.timeout for s in scenarios.values()) + 60
    args = {"groups": groups, "preload": list(preload)}
    driver = run_ranks(_groups_driver, 1, folder, args=args, timeout=limit, collective=False)
    assert driver.failure() is None, driver.failure()
    return {name: driver.get(name)[0] for name in scenarios}


def _main() -> None:
    rank, module, name, world, folder, store, args, collective = sys.argv[1:9]
    target = getattr(importlib.import_module(module), name)
    ctx = Rank(int(rank), int(world), Path(folder), json.loads(args))
    try:
        _in_rank(target, ctx, Path(store) if collective == "1" else None)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip gloo's teardown: the peers are stuck or gone
    sys.stdout.flush()
    sys.stderr.flush()


# -- tensors ----------------------------------------------------------------------------------


def local_chunk(full: torch.Tensor, placement: Any, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s local tensor of ``full`` under ``placement`` (None: a plain tensor,
    ``Replicate()``, or ``Shard(d)``: ``torch.chunk``'s split along d, as DTensor makes it;
    ranks past the last chunk get an empty one). A view of ``full`` where the split is one
    (dim-0 chunks are views at a storage offset, dim-1 chunks non-contiguous views)."""
    from torch.distributed.tensor import Shard

    if not isinstance(placement, Shard):
        return full.clone()
    parts = torch.chunk(full, world, placement.dim)
    if rank < len(parts):
        return parts[rank]
    return full.narrow(placement.dim, full.shape[placement.dim], 0)


def dtensor(full: torch.Tensor, mesh: Any, placement: Any, rank: int, world: int) -> Any:
    """``full`` as rank ``rank`` of ``world`` holds it on the 1-D ``mesh``: a DTensor built
    with ``from_local`` (no collective), or a plain clone when ``placement`` is None."""
    from torch.distributed.tensor import DTensor

    local = local_chunk(full, placement, rank, world)
    if placement is None:
        return local
    return DTensor.from_local(
        local, mesh, [placement], run_check=False, shape=full.shape, stride=full.stride()
    )


def raw(t: Any) -> bytes:
    """The bytes of a tensor (a DTensor: its local tensor; a numpy array: its buffer)."""
    if hasattr(t, "to_local"):
        t = t.to_local()
    if not isinstance(t, torch.Tensor):
        import numpy as np

        return bytes(np.ascontiguousarray(t).tobytes())
    t = t.detach().cpu().contiguous()
    if t.numel() == 0:
        return b""
    return bytes(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def mismatches(got: Mapping[str, Any], want: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Name -> what differs (missing, dtype, shape, the first differing byte) for each
    tensor of ``want`` that ``got`` does not hold bit for bit (DTensors: local tensors)."""
    out = {}
    for name, w in want.items():
        if name not in got:
            out[name] = "missing"
            continue
        g = got[name]
        g = g.to_local() if hasattr(g, "to_local") else g
        gd = str(getattr(g, "dtype", type(g)))
        if isinstance(g, torch.Tensor) and g.dtype != w.dtype:
            out[name] = f"dtype {gd}, want {w.dtype}"
        elif tuple(g.shape) != tuple(w.shape):
            out[name] = f"shape {tuple(g.shape)}, want {tuple(w.shape)}"
        else:
            a, b = raw(g), raw(w)
            if a != b:
                first = (
                    next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if a and b else 0
                )
                out[name] = f"bytes differ from byte {first} ({len(a)} vs {len(b)} bytes)"
    return out


if __name__ == "__main__":
    _main()
