"""What ``StorageReader`` refuses and how it reads (review 37a's reader findings): objects
are checked by tensorfile's own pickle reader before DCP unpickles them (``allow_pickle``),
a tensor's place never takes an object, hub-named shards without their index are refused,
the chunks of a tensor cover it exactly once at any count, a checkpoint of another
``prefix`` loads, a failed ``read_metadata`` leaves nothing behind for DCP's retry, and a
``Shard(1)`` load of a tall narrow matrix holds memory in proportion to its bytes.
Single process (DCP's no-dist mode), but the last test: 2 gloo ranks."""

from __future__ import annotations

import fractions
import io
import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    TensorProperties,
    TensorStorageMetadata,
)

from tensorfile.distributed import StorageReader, StorageWriter
from tensorfile.distributed._objects import POINTER_KEY, encode
from tensorfile.distributed.reader import _check_cover
from tensorfile.errors import FormatError, InvalidArgumentError
from tensorfile.formats.torch_pickle import check_plain

SIDE = "model.dcp-objects-0123456789abcdef.json"


def _blob(value: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _hub(folder: Path, objects: dict[str, bytes]) -> Path:
    """A one-file hub checkpoint of ``w`` whose objects file holds ``objects``."""
    folder.mkdir()
    (folder / SIDE).write_bytes(encode(objects))
    safetensors.torch.save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"),
                                metadata={"format": "pt", POINTER_KEY: SIDE})  # fmt: skip
    return folder


def _failure(exc: BaseException) -> BaseException:
    """The error a rank raised inside DCP's CheckpointException."""
    failures = getattr(exc, "failures", None)
    assert failures, exc
    return next(iter(failures.values()))[0]  # type: ignore[no-any-return]


def test_check_plain_passes_plain_values_and_refuses_anything_else() -> None:
    check_plain(_blob({"step": 3, "rng": torch.get_rng_state(), "py": random.getstate()}), "s")
    for bad in (fractions.Fraction(1, 3), np.random.get_state(), print):
        with pytest.raises(FormatError, match=r"^s: the pickle names"):
            check_plain(_blob(bad), "s")
    with pytest.raises(FormatError, match=r"^s: "):
        check_plain(b"not a pickle at all", "s")


def test_an_object_of_a_class_is_refused_unless_allow_pickle(tmp_path: Path) -> None:
    """A Fraction unpickles (torch.load runs ``fractions.Fraction``): refused by default,
    naming the object and the way out; loaded with allow_pickle=True, as DCP's own reader."""
    ck = _hub(tmp_path / "ck", {"ratio": _blob(fractions.Fraction(1, 3)), "step": _blob(7)})
    sd: dict[str, Any] = {"w": torch.zeros(2), "ratio": None, "step": 0}
    with pytest.raises(dcp.api.CheckpointException) as info:
        dcp.load(sd, storage_reader=StorageReader(ck))
    err = _failure(info.value)
    assert isinstance(err, FormatError)
    assert "'ratio'" in str(err) and "fractions.Fraction" in str(err)
    assert "allow_pickle=True" in str(err)
    assert sd["ratio"] is None and sd["step"] == 0  # (nothing unpickled before the refusal)
    dcp.load(sd, storage_reader=StorageReader(ck, allow_pickle=True))
    assert sd["ratio"] == fractions.Fraction(1, 3) and sd["step"] == 7


def test_python_and_torch_rng_states_load_by_default(tmp_path: Path) -> None:
    state = random.getstate()
    cpu = torch.get_rng_state()
    ck = _hub(tmp_path / "ck", {"py_rng": _blob(state), "both": _blob((cpu, [1, 2.5]))})
    sd: dict[str, Any] = {"w": torch.zeros(2), "py_rng": None, "both": None}
    dcp.load(sd, storage_reader=StorageReader(ck))
    assert sd["py_rng"] == state
    assert torch.equal(sd["both"][0], cpu) and sd["both"][1] == [1, 2.5]


@pytest.mark.parametrize("allow", [False, True])
def test_an_object_never_takes_a_tensors_place(tmp_path: Path, allow: bool) -> None:
    """The objects file names a tensor of the model (a plain int: it passes the pickle
    check): DCP would put the int in the tensor's place; refused, naming it."""
    ck = _hub(tmp_path / "ck", {"lm_head.weight": _blob(3)})
    sd = {"w": torch.zeros(2), "lm_head.weight": torch.full((2,), 5.0)}
    with pytest.raises(dcp.api.CheckpointException) as info:
        dcp.load(sd, storage_reader=StorageReader(ck, allow_pickle=allow))
    err = _failure(info.value)
    assert isinstance(err, FormatError) and "'lm_head.weight' as an object" in str(err)
    assert torch.equal(sd["lm_head.weight"], torch.full((2,), 5.0))


def test_hub_shards_without_their_index_are_refused(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    dcp.save({"a": torch.ones(64), "b": torch.ones(64)},
             storage_writer=StorageWriter(ck, max_shard_size=300))  # fmt: skip
    (ck / "model.safetensors.index.json").unlink()
    sd = {"a": torch.zeros(64), "b": torch.zeros(64)}
    with pytest.raises(dcp.api.CheckpointException) as info:  # (DCP's text of the error)
        dcp.load(sd, storage_reader=StorageReader(ck))
    assert "model-00001-of-00002.safetensors" in str(info.value)
    assert "not their index" in str(info.value)
    assert sd["a"].count_nonzero() == 0
    with pytest.raises(FormatError, match="not their index"):
        StorageReader(ck).read_metadata()


def test_a_checkpoint_of_another_prefix_loads_sharded(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    dcp.save({"a": torch.full((64,), 1.0), "b": torch.full((64,), 2.0)},
             storage_writer=StorageWriter(ck, max_shard_size=300, prefix="ema"))  # fmt: skip
    safetensors.torch.save_file({"a": torch.zeros(64)}, str(ck / "model.safetensors"))
    sd = {"a": torch.zeros(64), "b": torch.zeros(64)}
    dcp.load(sd, storage_reader=StorageReader(ck, prefix="ema"))
    assert torch.equal(sd["a"], torch.full((64,), 1.0))
    assert torch.equal(sd["b"], torch.full((64,), 2.0))
    for bad in ("", ".x", "a/b", "a\x00b", 3):
        with pytest.raises(InvalidArgumentError):
            StorageReader(ck, prefix=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        StorageReader(ck, allow_pickle="yes")  # type: ignore[arg-type]


def _md(size: tuple[int, ...], boxes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> Any:
    chunks = [ChunkStorageMetadata(torch.Size(o), torch.Size(s)) for o, s in boxes]
    return TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size(size), chunks)


def test_the_cover_check_is_exact_at_thousands_of_chunks() -> None:
    """A 3-D grid of 16 x 16 x 16 chunks covers its tensor; the same grid with one chunk
    moved onto its neighbour (the volume unchanged) does not."""
    grid = [((i * 2, j * 3, k), (2, 3, 1)) for i in range(16) for j in range(16) for k in range(16)]
    _check_cover("t", _md((32, 48, 16), grid), "ck")
    moved = list(grid)
    moved[2000] = (moved[2001][0], moved[2000][1])
    with pytest.raises(FormatError, match="'t' do not cover its shape"):
        _check_cover("t", _md((32, 48, 16), moved), "ck")
    empty = [*grid, ((0, 0, 0), (0, 3, 1))]  # an empty chunk overlaps nothing
    _check_cover("t", _md((32, 48, 16), empty), "ck")


def test_a_failed_read_metadata_leaves_nothing_for_the_retry(tmp_path: Path) -> None:
    """Per-rank files, the second one broken: read_metadata fails after opening the first;
    once the file is repaired, the same reader's next read_metadata (DCP retries it) works
    and does not meet the first attempt's closed files."""
    ck = tmp_path / "ck"
    ck.mkdir()
    for i in range(2):
        info = json.dumps({"w": {"saved_offsets": [2 * i]}})
        safetensors.torch.save_file({"w": torch.full((2,), float(i))},
                                    str(ck / f"shard-{i:05d}.safetensors"),
                                    metadata={"DCP_SHARDING_INFO": info})  # fmt: skip
    good = (ck / "shard-00001.safetensors").read_bytes()
    (ck / "shard-00001.safetensors").write_bytes(good[:20])
    reader = StorageReader(ck)
    with pytest.raises(FormatError):
        reader.read_metadata()
    (ck / "shard-00001.safetensors").write_bytes(good)
    md = reader.read_metadata()
    assert len(md.state_dict_metadata["w"].chunks) == 2
    dest = {"w": torch.full((4,), -1.0)}
    planner = DefaultLoadPlanner()  # (what dcp.load does next, with the same reader)
    planner.set_up_planner(dest, md, True)
    reader.set_up_storage_reader(md, True)
    reader.read_data(planner.create_local_plan(), planner).wait()
    assert dest["w"].tolist() == [0.0, 0.0, 1.0, 1.0]


# -- two gloo ranks -----------------------------------------------------------------------

_ROWS = 1 << 20


def _shard1_loads(ctx: Any) -> None:
    import resource

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard

    from tests.distributed._ranks import dtensor

    mesh = init_device_mesh("cpu", (ctx.world,))
    full = torch.arange(_ROWS * 2, dtype=torch.float32).reshape(_ROWS, 2)
    cube = torch.arange(4 * 1500 * 3, dtype=torch.int16).reshape(4, 1500, 3)
    dest = {
        name: dtensor(torch.zeros_like(t), mesh, Shard(1), ctx.rank, ctx.world)
        for name, t in (("w", full), ("cube", cube))
    }
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ctx.attempt("load", lambda: dcp.load(dest, storage_reader=StorageReader(ctx.args["ck"])))
    ctx.record("growth_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before)
    want_w = dtensor(full, mesh, Shard(1), ctx.rank, ctx.world).to_local()
    want_cube = dtensor(cube, mesh, Shard(1), ctx.rank, ctx.world).to_local()
    ctx.record("equal", [torch.equal(dest["w"].to_local(), want_w),
                         torch.equal(dest["cube"].to_local(), want_cube)])  # fmt: skip


def test_a_shard1_load_of_a_tall_narrow_matrix_holds_memory_in_proportion(
    tmp_path: Path,
) -> None:
    """(1M, 2) float32 loaded as Shard(1) by 2 ranks: a million 4-byte runs per rank, read
    as their span and copied out (a Python object per row took ~940 MiB per rank); and a
    (4, 1500, 3) int16 cube whose Shard(1) runs jump at each outer row, bit for bit."""
    from tests.distributed._ranks import run_ranks

    ck = tmp_path / "ck"
    ck.mkdir()
    full = torch.arange(_ROWS * 2, dtype=torch.float32).reshape(_ROWS, 2)
    cube = torch.arange(4 * 1500 * 3, dtype=torch.int16).reshape(4, 1500, 3)
    safetensors.torch.save_file({"w": full, "cube": cube}, str(ck / "model.safetensors"))
    group = run_ranks(_shard1_loads, 2, tmp_path / "g", args={"ck": str(ck)}, timeout=240)
    group.ok("load")
    assert group.get("equal") == [[True, True], [True, True]]
    growth = group.get("growth_mib")
    assert max(growth) < 64, f"peak memory grew by {growth} MiB loading 4 MiB shards"


def test_objects_pickled_by_python_are_refused_too(tmp_path: Path) -> None:
    """An object that is a bare pickle (not torch.save's zip) of a class: refused."""
    ck = _hub(tmp_path / "ck", {"ratio": pickle.dumps(fractions.Fraction(2, 3))})
    sd: dict[str, Any] = {"w": torch.zeros(2), "ratio": None}
    with pytest.raises(dcp.api.CheckpointException) as info:
        dcp.load(sd, storage_reader=StorageReader(ck))
    assert isinstance(_failure(info.value), FormatError)
    assert sd["ratio"] is None
