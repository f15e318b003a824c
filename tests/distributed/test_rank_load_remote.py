"""Issue 38's rank-aware loading from remote storage: ``tensorfile.distributed.load`` in 4 real
gloo ranks from ``http://127.0.0.1`` (the Range-honouring test server, which logs the body
bytes of every reply) and from ``s3://`` (the moto server, whose recorder logs each GET's
range), with :mod:`test_rank_load`'s tensor-parallel checkpoint and plans (rows, columns,
interleaved intervals of a fused weight, replicated tensors, per-rank experts, every dtype;
the 3 MiB weight cut into several 1 MiB blocks); and ``safe_open(url).prefetch(plan)`` over
HTTP.

What is checked: every rank's results equal the reference's ``get_slice`` on the same file
bit for bit; cooperatively, all ranks together fetch at most :data:`TARGET` times the
checkpoint's tensor bytes (each file's first read, one per rank, which fetches the header
and a little more, counted apart), where ranks loading alone fetch the replicated tensors
once each; a server that truncates a reply, answers with another range, or dies mid-load
on ONE rank's URL fails every rank with a clear tensorfile error (that rank: the HTTP
error naming the URL; the others: :class:`~tensorfile.errors.PeerError`), never a hang;
and a prefetch plan reads only the planned rows.

Each rank loads from URLs of its own (symlinks to one checkpoint folder on the HTTP
server, copies on S3), so the logs count each rank's bytes and a fault can target one
rank. One group of 4 processes (forked from a driver: :func:`run_groups`) runs every load,
after :mod:`test_rank_load`'s local loads (:func:`make_setup`, the ``rank_load`` fixture of
``tests/distributed/conftest.py``: both modules share the group); each outcome is checked
by its own test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import safetensors
import torch
from huggingface_hub import save_torch_state_dict

from tests.distributed._ranks import Group, Rank, Scenario, raw, run_groups
from tests.distributed.test_rank_load import (
    _check,
    _tensor_bytes,
    full_tensors,
    local_loads,
    plan_for,
    write_checkpoints,
)
from tests.helpers.hostile_http import HostileServer, Request, parse_range, reply, serve_bytes
from tests.helpers.servers import Logged, start_range_server

WORLD = 4
TARGET = 1.05  # all ranks together fetch at most this times the checkpoint's tensor bytes
GAP_WASTE = 0.10  # the read planner reads over a gap while it wastes at most this
INDEX = "model.safetensors.index.json"
FAULTS = ("truncated", "wrong_range", "dies")
VICTIM = 1  # the rank whose URL the hostile server breaks


# -- the ranks ------------------------------------------------------------------------------


def _results(got: dict[str, torch.Tensor]) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    return {n: (str(t.dtype), tuple(t.shape), raw(t)) for n, t in got.items()}


def _loads(ctx: Rank) -> None:
    """:mod:`test_rank_load`'s local loads (:func:`local_loads`), then every load of this
    module: alone and cooperatively over HTTP, cooperatively from S3, then cooperatively
    from the hostile server (``<case>``: what ``load`` raised)."""
    import torch.distributed as dist

    from tensorfile.distributed import LoadCounters, load

    local_loads(ctx)
    rank, a = ctx.rank, ctx.args
    plan = plan_for(rank)
    ctx.record("hostile", a["hostile"])
    world = dist.group.WORLD
    alone = load(f"{a['http']}/alone-r{rank}/{INDEX}", plan)
    ctx.record("http_alone", _results(alone))
    dist.barrier()
    counts = LoadCounters()
    together = load(f"{a['http']}/coop-r{rank}/{INDEX}", plan, group=world, counters=counts)
    ctx.record("http", _results(together))
    ctx.record("http_counts", counts)
    dist.barrier()
    os.environ.update(a["s3_env"])
    counts = LoadCounters()
    together = load(f"s3://{a['bucket']}/r{rank}/{INDEX}", plan, group=world, counters=counts)
    ctx.record("s3", _results(together))
    ctx.record("s3_counts", counts)
    for case in FAULTS:
        dist.barrier()
        try:
            load(f"{a['hostile']}/{case}/r{rank}/{INDEX}", plan, group=world, timeout=60)
            ctx.record(case, "loaded")
        except Exception as exc:
            ctx.record(case, f"{type(exc).__name__}: {exc}")


# -- the hostile server ---------------------------------------------------------------------


class Faulty:
    """Serves ``/<case>/r<rank>/<file>`` from the checkpoint folder, honestly but for the
    victim rank's reads of tensor data (a range past the file's start, after the first
    read): ``truncated`` sends half the body its ``Content-Length`` promises and closes;
    ``wrong_range`` sends another range of the same length, its ``Content-Range`` saying
    so; ``dies`` serves one such read, then closes every connection without a reply."""

    def __init__(self, folder: Path) -> None:
        self.files = {p.name: p.read_bytes() for p in folder.iterdir()}
        self.faults: dict[str, int] = {}  # case -> the victim's data reads it saw
        self.lock = threading.Lock()

    def respond(self, request: Request, conn: socket.socket) -> bool:
        case, who, name = request.target.lstrip("/").split("/", 2)
        data = self.files[name]
        rng = parse_range(request.headers.get("range"), len(data))
        if who != f"r{VICTIM}" or not name.endswith(".safetensors") or not rng or rng[0] == 0:
            return serve_bytes(data)(request, conn)
        with self.lock:
            seen = self.faults[case] = self.faults.get(case, 0) + 1
        start, stop = rng
        if case == "truncated":
            head = {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
                    "Content-Length": str(stop - start)}  # fmt: skip
            conn.sendall(reply(206, head, data[start : start + (stop - start) // 2]))
            return False
        if case == "wrong_range":
            shift = 4096 if stop + 4096 <= len(data) else -min(4096, start)
            a, b = start + shift, stop + shift
            head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
            conn.sendall(reply(206, head, data[a:b]))
            return True
        if seen > 1:  # dies: the server is gone for this rank
            return False
        return serve_bytes(data)(request, conn)


# -- the test process -----------------------------------------------------------------------


@dataclass
class Setup:
    group: Group
    ckpt: Path
    files: list[str]  # the checkpoint's safetensors files
    http: list[Logged]  # the range server's log, in order
    s3_reads: list[tuple[str, int, int]]  # (object path, first byte, bytes) of each S3 GET
    bucket: str
    faults: dict[str, int]

    def http_bytes(self, prefix: str, first_reads: bool = False) -> int:
        """Body bytes sent for URLs under ``prefix``: of each file's first read (the
        ranges from byte 0) when ``first_reads``, else of the others."""
        return sum(
            x.body_bytes
            for x in self.http
            if x.uri.startswith(prefix) and x.range.startswith("bytes=0-") == first_reads
        )


def _s3_reads(s3: Any, recorded: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Each GET the S3 recorder saw, as (object path, first byte, bytes fetched)."""
    out = []
    for r in recorded:
        if r["method"] != "GET":
            continue
        rng = {k.lower(): v for k, v in r["headers"].items()}.get("range", "")
        first = int(rng[6:].partition("-")[0] or 0) if rng.startswith("bytes=") else 0
        for path, n in s3.bytes_read([r]).items():
            out.append((path, first, n))
    return out


def make_setup(tmp_path_factory: pytest.TempPathFactory, s3: Any) -> Setup:
    """The servers, the checkpoint on them, and the group of ranks that ran every load of
    this module and of :mod:`test_rank_load` (the ``rank_load`` fixture)."""
    tmp = tmp_path_factory.mktemp("rank_load")
    root = tmp / "www"
    ckpt, other = write_checkpoints(root)  # (the local loads read these folders themselves)
    files = sorted(n for n in os.listdir(ckpt) if n.endswith(".safetensors"))
    for r in range(WORLD):
        for phase in ("alone", "coop"):
            os.symlink(ckpt, root / f"{phase}-r{r}")
    os.symlink(ckpt, root / "prefetch")
    bucket = s3.bucket()
    for r in range(WORLD):
        for n in os.listdir(ckpt):
            s3.fs.put_file(str(ckpt / n), f"{bucket}/r{r}/{n}")
    s3_env = {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": s3.options["key"],
        "AWS_SECRET_ACCESS_KEY": s3.options["secret"],
        "AWS_REGION": "us-east-1",
    }
    http, stop = start_range_server(root, tmp / "access.log")
    faulty = Faulty(ckpt)
    try:
        with HostileServer(faulty.respond) as hostile, s3.recording() as recorded:
            args = {"http": http.url, "hostile": hostile.url, "bucket": bucket, "s3_env": s3_env,
                    "path": str(ckpt), "other": str(other)}  # fmt: skip
            scenario = Scenario(_loads, WORLD, args, timeout=240, grace=60, folder=tmp / "ranks")
            group = run_groups({"group": scenario}, tmp / "driver")["group"]
        log = http.requests()
    finally:
        stop.terminate()
    return Setup(group, ckpt, files, log, _s3_reads(s3, recorded), bucket, faulty.faults)


@pytest.fixture(scope="module")
def setup(rank_load: Setup) -> Setup:
    return rank_load


def test_every_rank_gets_the_references_slices_over_http_and_s3(setup: Setup) -> None:
    for key in ("http_alone", "http", "s3"):
        _check(setup.group, key, setup.ckpt)


def _first_reads_are_one_per_rank_and_file(n: int, setup: Setup) -> None:
    assert n == WORLD * (len(setup.files) + 1), n  # each shard and the index, once a rank


def test_cooperative_http_fetches_each_byte_once(setup: Setup) -> None:
    """The server's log: all ranks together fetched at most TARGET times the tensor bytes
    (each file's first read apart: one per rank and file, the header and what follows it);
    every rank fetched its share; the per-rank counters agree with the log."""
    s = setup
    per_rank = [s.http_bytes(f"/coop-r{r}/") for r in range(WORLD)]
    total = sum(per_rank)
    assert total <= TARGET * _tensor_bytes(), (per_rank, _tensor_bytes())
    assert all(n > _tensor_bytes() / (4 * WORLD) for n in per_rank), per_rank
    # a rank's counter holds what its log lines hold, and what it found in a first read
    counts = s.group.get("http_counts")
    counted = [c.bytes_read + c.bytes_sampled for c in counts]  # (the identity's samples too)
    assert all(log <= c for c, log in zip(counted, per_rank, strict=True)), (counted, per_rank)
    assert sum(c.bytes_read for c in counts) <= TARGET * _tensor_bytes(), counted
    firsts = [x for x in s.http if x.uri.startswith("/coop-") and x.range.startswith("bytes=0-")]
    _first_reads_are_one_per_rank_and_file(len(firsts), s)


def test_ranks_loading_alone_fetch_the_replicated_tensors_each(setup: Setup) -> None:
    s = setup
    alone = sum(s.http_bytes(f"/alone-r{r}/") for r in range(WORLD))
    together = sum(s.http_bytes(f"/coop-r{r}/") for r in range(WORLD))
    t = full_tensors()
    replicated = sum(
        t[n].numel() * t[n].element_size()
        for n, entry in plan_for(0).items()
        if entry is None and not n.startswith("experts.")
    )
    assert alone >= together + (WORLD - 1) * replicated, (alone, together, replicated)


def test_cooperative_s3_fetches_each_byte_once(setup: Setup) -> None:
    """The S3 server's recorder: the same target as over HTTP, and every rank fetched from
    its own copy."""
    s = setup
    per_rank = [
        sum(n for path, first, n in s.s3_reads if path.startswith(f"/{s.bucket}/r{r}/") and first)
        for r in range(WORLD)
    ]
    assert sum(per_rank) <= TARGET * _tensor_bytes(), (per_rank, _tensor_bytes())
    assert all(n > _tensor_bytes() / (4 * WORLD) for n in per_rank), per_rank
    counted = [c.bytes_read for c in s.group.get("s3_counts")]
    assert sum(counted) <= TARGET * _tensor_bytes(), counted
    firsts = [p for p, first, _ in s.s3_reads if p.startswith(f"/{s.bucket}/") and not first]
    _first_reads_are_one_per_rank_and_file(len(firsts), s)


@pytest.mark.parametrize(
    ("case", "what"),
    [
        ("truncated", r"short read: expected \d+ bytes, got \d+"),
        (
            "wrong_range",
            r"asked for bytes=\d+-\d+, the server sent bytes .*Content-Range disagrees",
        ),
        ("dies", "(closed connection without response|Connection reset|Connection refused)"),
    ],
)
def test_a_hostile_server_on_one_ranks_url_fails_every_rank(
    setup: Setup, case: str, what: str
) -> None:
    """The victim raises the HTTP error naming its URL; the others a PeerError naming the
    victim; nobody hangs (the group ended on its own) and nobody loaded anything."""
    s = setup
    # (it dies mid-load: after serving the victim one read of tensor data)
    assert s.faults.get(case, 0) >= (2 if case == "dies" else 1), s.faults
    got = s.group.get(case)
    victim = got[VICTIM]
    assert victim.startswith("SafetensorIOError"), victim
    m = re.search(
        rf"{re.escape(s.group.records[0]['hostile'])}/{case}/r{VICTIM}/\S+: .*{what}", victim
    )
    assert m, victim
    for r, text in enumerate(got):
        if r != VICTIM:  # the victim's error, passed on
            assert text.startswith(f"PeerError: rank {VICTIM} of the group"), (r, text)
            assert m.group(0) in text, (r, text)
    assert not s.group.timed_out and s.group.failure() is None, s.group.failure()


PREFETCH: dict[str, Any] = {
    "layers.0.up.weight": slice(200, 392),  # alone in its file
    "layers.0.down.weight": slice(300, 500),  # among small tensors that are not planned
    "layers.0.qkv.weight": slice(-64, None),
    "embed.weight": None,
}


@pytest.mark.parametrize("names", [["layers.0.up.weight"], list(PREFETCH)[1:]])
def test_prefetch_over_http_reads_only_the_planned_rows(setup: Setup, names: list[str]) -> None:
    """``safe_open(url).prefetch(plan)`` of one shard: the reference's results, and the
    server sends the file's first read (the header and what follows it), then at most the
    planned bytes and the read planner's allowed gap waste."""
    from tensorfile.safetensors import safe_open

    s = setup
    (file,) = {f for f in s.files for n in names if n in _names(s.ckpt / f)}
    plan = {n: PREFETCH[n] for n in names}
    http, stop = start_range_server(s.ckpt.parent, s.ckpt.parent.parent / f"{file}.log")
    try:
        with safe_open(f"{http.url}/prefetch/{file}", framework="pt") as f:
            f.prefetch(plan)
            got = {n: f.get_tensor(n) for n in plan}
        log = http.requests()
    finally:
        stop.terminate()
    with safetensors.safe_open(str(s.ckpt / file), framework="pt") as ref:
        want = {n: ref.get_slice(n)[r] if r else ref.get_tensor(n) for n, r in plan.items()}
    for n in plan:
        assert got[n].dtype == want[n].dtype and raw(got[n]) == raw(want[n]), n
    planned = sum(t.numel() * t.element_size() for t in want.values())
    (first,) = [x.body_bytes for x in log if x.range.startswith("bytes=0-")]
    rest = sum(x.body_bytes for x in log if not x.range.startswith("bytes=0-"))
    assert first <= 100_000 and planned <= first + rest, (first, rest, planned)
    assert rest <= (1 + GAP_WASTE) * planned, (rest, planned, log)


def _names(path: Path) -> list[str]:
    with safetensors.safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def test_one_checkpoint_reached_at_two_places_is_the_same_checkpoint(tmp_path: Path) -> None:
    """The ranks compare what they opened by :func:`identity`: a sharded checkpoint copied to
    another folder (another node's disk, another URL) is the same checkpoint; the same
    tensors split into other files are not (a shard's file counts by its name in the
    checkpoint, not by the path the rank reached it at)."""
    import tensorfile
    from tensorfile.distributed._regions import identity

    for folder, most in (("a", "2MB"), ("c", "500KB")):
        (tmp_path / folder).mkdir()
        save_torch_state_dict(full_tensors(), tmp_path / folder, max_shard_size=most)
    shutil.copytree(tmp_path / "a", tmp_path / "elsewhere" / "b")
    ids = []
    for folder in ("a", "elsewhere/b", "c"):
        with tensorfile.open(str(tmp_path / folder / INDEX)) as reader:
            ids.append(identity(reader))
    assert ids[0] == ids[1] != ids[2]
