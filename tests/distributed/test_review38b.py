"""review38b: second hostile tests of cooperative loads (``tensorfile.distributed.load`` with
a group), after the review38a fixes, in one group of 3 real gloo ranks (forked from a
driver process: :func:`run_groups`): strided sparse rows of every sign of step against
numpy, the storage bytes the guide promises (each byte read by one rank), and a load that
takes longer than ``timeout`` in all while no single wait does (put last: it leaves the
group out of step).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.distributed._ranks import Group, Rank, Scenario, run_groups

WORLD = 3


def tensors() -> dict[str, np.ndarray[Any, Any]]:
    g = np.random.default_rng(3802)
    return {
        "wide": g.standard_normal((64, 20000)).astype(np.float32),  # 80 kB rows: sparse steps
        "norm": g.standard_normal(300).astype(np.float32),
        "big": g.standard_normal((3072, 1024)).astype(np.float32),  # 12 MiB: several blocks
    }


def sparse_plan(rank: int) -> dict[str, Any]:
    return {
        "wide": [
            (slice(None, None, -3),),
            (slice(1, None, 2), slice(5, 100)),
            (slice(-1, 0, -5), slice(None, None, -7)),
        ][rank]
    }


def zt_plan(rank: int) -> Any:
    from tensorfile.distributed import Intervals

    return [(slice(None, None, -2), slice(3, 9)), Intervals(1, [(0, 2), (6, 12)]), (4,)][rank]


def _as_numpy(t: Any) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(t.numpy())


def _target(ctx: Rank) -> None:
    import torch.distributed as dist

    from tensorfile.distributed import Intervals, LoadCounters, load

    path = ctx.args["path"]
    world = dist.group.WORLD
    r = ctx.rank

    def sparse() -> None:
        got = load(path, sparse_plan(r), group=world, timeout=60.0)
        ctx.record("sparse", {n: _as_numpy(t) for n, t in got.items()})

    ctx.attempt("sparse_ok", sparse)
    dist.barrier()

    def packed() -> None:  # a compressed tensor: read whole by its owner, sliced for each
        got = load(ctx.args["zt"], {"z": zt_plan(r)}, group=world, timeout=60.0)
        ctx.record("zt", _as_numpy(got["z"]))

    ctx.attempt("zt_ok", packed)
    dist.barrier()

    # every rank wants every tensor whole: the guide says each byte is read from storage
    # by exactly one rank, so the ranks' bytes_read sum to the checkpoint's tensor bytes
    counters = LoadCounters()
    ctx.attempt("whole_ok", load, path, None, group=world, timeout=60.0, counters=counters)
    ctx.record("whole_read", counters.bytes_read)
    dist.barrier()

    # rank 0 wants rows 0..1023 of "big", listed one by one (adjacent intervals: one
    # byte range); ranks 1 and 2 want nothing. Alone, rank 0 reads them in a few requests;
    # cooperatively, the rows it reads itself should not cost more requests than that.
    if r == 0:
        from tests.helpers.hostile_http import HostileServer, parse_range, reply

        blob = Path(path).read_bytes()
        header = 8 + int.from_bytes(blob[:8], "little")
        hits = [0]

        def count(request: Any, conn: Any) -> bool:
            rng = parse_range(request.headers.get("range"), len(blob))
            a, b = (0, len(blob)) if rng is None else rng
            if a >= header:
                hits[0] += 1
            head = {"Content-Range": f"bytes {a}-{b - 1}/{len(blob)}", "Content-Length": str(b - a)}
            conn.sendall(reply(206, head, blob[a:b]))
            return True

        rows = {"big": Intervals(0, [(i, i + 1) for i in range(1024)])}
        with HostileServer(count) as server:
            url = f"{server.url}/model.safetensors"
            load(url, rows)
            alone, hits[0] = hits[0], 0
            ctx.attempt("rows_ok", load, url, rows, group=world, timeout=60.0)
            ctx.record("rows_requests", (alone, hits[0]))
    else:
        ctx.attempt("rows_ok", load, path, {}, group=world, timeout=60.0)
    dist.barrier()

    # every rank passes a timeout of no bound (inf) or no number (nan): the guide says a bad
    # timeout is refused, and told to the group; every rank raises before any collective
    # here, so the group stays in step
    for key, bad in (("inf", float("inf")), ("nan", float("nan"))):
        ctx.attempt(key, load, path, {"norm": None}, group=world, timeout=bad)
    dist.barrier()

    # rank 1 reads from a server that takes 1 s per data request (each block read well
    # inside the 3 s timeout); ranks 0 and 2 want nothing and read their share of the
    # blocks rank 1 wants from the local file, send them, then wait at the final exchange
    # for rank 1 to finish its reads: about 5 s in all.
    plan = {"big": None} if r == 1 else {}
    if r == 1:
        from tests.helpers.hostile_http import HostileServer, parse_range, reply

        data = Path(path).read_bytes()

        def respond(request: Any, conn: Any) -> bool:
            rng = parse_range(request.headers.get("range"), len(data))
            a, b = (0, len(data)) if rng is None else rng
            if b - a > 100_000:
                time.sleep(1.0)
            head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
            conn.sendall(reply(206, head, data[a:b]))
            return True

        with HostileServer(respond) as server:
            start = time.monotonic()
            ctx.attempt("long", load, f"{server.url}/model.safetensors", plan, group=world,
                        timeout=3.0)  # fmt: skip
            ctx.record("long_s", time.monotonic() - start)
    else:
        start = time.monotonic()
        ctx.attempt("long", load, path, plan, group=world, timeout=3.0)
        ctx.record("long_s", time.monotonic() - start)
    os._exit(0)  # (the group may be out of step: leave without it)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tensorfile.safetensors.numpy import save_file

    path = tmp_path_factory.mktemp("ckpt38b") / "model.safetensors"
    save_file(tensors(), path)
    return path


@pytest.fixture(scope="module")
def zt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tensorfile.ztensor as tz

    path = tmp_path_factory.mktemp("zt38b") / "z.zt"
    tz.save_file({"z": tensors()["big"][:40, :12].copy()}, str(path), compression="zstd")
    return path


@pytest.fixture(scope="module")
def group(ckpt: Path, zt: Path, tmp_path_factory: pytest.TempPathFactory) -> Group:
    args = {"path": str(ckpt), "zt": str(zt)}
    scenario = Scenario(_target, WORLD, args, timeout=180, grace=30)
    return run_groups({"group": scenario}, tmp_path_factory.mktemp("ranks38b"))["group"]


def test_sparse_strided_rows_of_every_sign_equal_numpy(group: Group) -> None:
    group.ok("sparse_ok")
    full = tensors()["wide"]
    for rank in range(WORLD):
        (got,) = group.get("sparse", [rank])
        want = full[sparse_plan(rank)["wide"]]
        assert got["wide"].shape == want.shape and np.array_equal(got["wide"], want), rank


def test_slices_of_a_compressed_tensor_equal_numpy(group: Group) -> None:
    group.ok("zt_ok")
    full = tensors()["big"][:40, :12]
    from tensorfile.distributed import Intervals

    for rank in range(WORLD):
        (got,) = group.get("zt", [rank])
        entry = zt_plan(rank)
        if isinstance(entry, Intervals):
            want = np.concatenate([full[:, a:b] for a, b in entry.intervals], 1)
        else:
            want = full[entry]
        assert got.shape == want.shape and np.array_equal(got, want), rank


def test_every_byte_is_read_from_storage_by_exactly_one_rank(group: Group) -> None:
    group.ok("whole_ok")
    total = sum(a.nbytes for a in tensors().values())
    assert sum(group.get("whole_read")) == total


def test_adjacent_intervals_cost_no_more_requests_together_than_alone(group: Group) -> None:
    group.ok("rows_ok")
    from tensorfile.distributed._regions import SAMPLES

    (alone, together) = group.get("rows_requests", [0])[0]
    # (a cooperative load also samples the file's bytes for its identity: SAMPLES requests)
    assert together <= 2 * alone + 2 + SAMPLES, (alone, together)


def test_a_timeout_of_inf_or_nan_is_a_tensorfile_error_with_a_group(group: Group) -> None:
    for key in ("inf", "nan"):
        got = group.get(key)
        assert all(t.startswith("tensorfile.") for t in got), (key, got)


def test_a_load_longer_than_timeout_whose_waits_are_each_shorter_succeeds(group: Group) -> None:
    got = group.get("long")
    assert got == ["ok"] * WORLD, (got, group.get("long_s"))
