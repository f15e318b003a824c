"""``StorageReader`` on checkpoints that lie: a header whose shape disagrees with its
``data_offsets``, sizes past the end of the file, a huge claimed shape, an index naming a
missing shard or a file outside the folder, torch's per-rank files with a broken
``DCP_SHARDING_INFO`` or a missing rank, an objects sidecar that is not JSON, does not match
its digests, is missing or is named outside the folder. Each is one of tensorfile's errors
naming what is wrong (DCP wraps it in ``CheckpointException``, a BaseException, whose
``failures`` hold it), never a hang, a crash or an allocation of the claimed size.

One process (``dcp.load`` without a process group runs as a single rank): no spawn.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from tensorfile import errors
from tests.distributed._plugins import reader, writer
from tests.distributed._ranks import inner_exceptions
from tests.helpers.hostile import st_raw
from tests.helpers.locks import within

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

F32_4 = bytes(range(16))  # 4 F32 values


def _write(folder: Path, name: str, header: dict[str, Any], data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(st_raw(header, data))
    return path


def load_error(
    folder: Path, sd: dict[str, Any], kind: type[BaseException], *words: str, **options: Any
) -> str:
    """``dcp.load(sd)`` from ``folder`` fails (within a bound) with DCP's
    ``CheckpointException`` carrying a ``kind`` whose message holds every one of ``words``;
    returns that message. DCP keeps only the text of an error of ``read_metadata`` (it
    raises an AssertionError quoting it): there the type is checked on a direct call."""
    with pytest.raises(CheckpointException) as info:
        within(60, lambda: dcp.load(sd, storage_reader=reader(folder, **options)))
    found = [e for e in inner_exceptions(info.value) if isinstance(e, kind)]
    if found:
        message = str(found[0])
    else:
        with pytest.raises(kind) as direct:
            reader(folder, **options).read_metadata()
        message = str(direct.value)
        assert message in str(info.value), "DCP's error does not quote tensorfile's"
    for w in words:
        assert w in message, (w, message)
    return message


def test_shape_that_disagrees_with_data_offsets(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "model.safetensors",
        {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 16]}},
        F32_4,
    )
    load_error(tmp_path, {"w": torch.zeros(4, 4)}, errors.FormatError, "model.safetensors")


def test_data_offsets_past_the_end_of_the_file(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "model.safetensors",
        {"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}},
        F32_4,
    )
    load_error(tmp_path, {"w": torch.zeros(8)}, errors.FormatError, "model.safetensors")


def test_a_huge_claimed_shape_is_refused_before_any_allocation(tmp_path: Path) -> None:
    n = 1 << 40
    _write(
        tmp_path,
        "model.safetensors",
        {"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}},
        F32_4,
    )
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "model.safetensors")


def _index(folder: Path, weight_map: dict[str, str]) -> None:
    doc = {"metadata": {"total_size": 32}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(doc))


def test_an_index_naming_a_missing_shard(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "model-00001-of-00002.safetensors",
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        F32_4,
    )
    _index(
        tmp_path, {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}
    )
    sd = {"w": torch.zeros(4), "v": torch.zeros(4)}
    load_error(tmp_path, sd, errors.TensorFileError, "model-00002-of-00002.safetensors")


def test_an_index_naming_a_file_outside_its_folder(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "outside.safetensors",
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        F32_4,
    )
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _index(folder, {"w": "../outside.safetensors"})
    load_error(folder, {"w": torch.zeros(4)}, errors.FormatError, "outside")


def test_an_index_that_is_not_json(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "model-00001-of-00001.safetensors",
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        F32_4,
    )
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"w": ')
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "index")


def _rank_file(folder: Path, rank: int, offsets: Any, data: bytes = F32_4[:8]) -> None:
    """torch's per-rank file: ``w``'s chunk of 2 F32 at ``offsets`` (DCP_SHARDING_INFO)."""
    meta = {
        "format": "pt",
        "DCP_VERSION": "1.0",
        "DCP_SHARDING_INFO": offsets
        if isinstance(offsets, str)
        else json.dumps({"w": {"saved_offsets": offsets}}),
    }
    name = f"shard-{rank:05d}-model-00001-of-00001.safetensors"
    _write(
        folder,
        name,
        {"__metadata__": meta, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
        data,
    )


def test_per_rank_files_with_sharding_info_that_is_not_json(tmp_path: Path) -> None:
    _rank_file(tmp_path, 1, [0])
    _rank_file(tmp_path, 2, '{"w": {"saved_offsets": [2]')
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "DCP_SHARDING_INFO")


@pytest.mark.parametrize("offsets", [[-2], ["2"], [2, 0], 2])
def test_per_rank_files_with_unusable_offsets(tmp_path: Path, offsets: Any) -> None:
    _rank_file(tmp_path, 1, [0])
    _rank_file(tmp_path, 2, offsets)
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "shard-00002")


def test_per_rank_files_that_overlap(tmp_path: Path) -> None:
    _rank_file(tmp_path, 1, [0])
    _rank_file(tmp_path, 2, [1])  # rows 1-2 again; row 3 nowhere
    _rank_file(tmp_path, 3, [3], F32_4[:8])
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "'w'")


def test_a_missing_rank_file(tmp_path: Path) -> None:
    _rank_file(tmp_path, 2, [2])  # rank 1's file (rows 0-1) is gone
    load_error(tmp_path, {"w": torch.zeros(4)}, errors.FormatError, "'w'")


# -- the objects sidecar --------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path]:
    """A checkpoint saved by StorageWriter (one process) with objects; its sidecar."""
    folder = tmp_path / "ckpt"
    sd = {"w": torch.arange(4.0), "step": 7, "extra": {"lr": 0.5}}
    dcp.save(sd, storage_writer=writer(folder))
    sidecars = [p for p in folder.iterdir() if "dcp-objects" in p.name]
    assert len(sidecars) == 1, sorted(p.name for p in folder.iterdir())
    return folder, sidecars[0]


def _fresh() -> dict[str, Any]:
    return {"w": torch.zeros(4), "step": 0, "extra": {"lr": 0.0}}


def test_the_sidecar_round_trips(saved: tuple[Path, Path]) -> None:
    folder, _ = saved
    sd = _fresh()
    dcp.load(sd, storage_reader=reader(folder))
    assert sd["step"] == 7 and sd["extra"]["lr"] == 0.5 and sd["w"].tolist() == [0, 1, 2, 3]


def test_a_sidecar_that_is_not_json(saved: tuple[Path, Path]) -> None:
    folder, sidecar = saved
    sidecar.write_text('{"format": "tensorfile.dcp-objects", "objects": {')
    load_error(folder, _fresh(), errors.FormatError, sidecar.name)


def test_a_sidecar_whose_object_does_not_match_its_digest(saved: tuple[Path, Path]) -> None:
    folder, sidecar = saved
    doc = json.loads(sidecar.read_text())
    entry = doc["objects"]["step"]
    data = bytearray(base64.b64decode(entry["data"]))
    data[-2] ^= 1  # another pickled int
    entry["data"] = base64.b64encode(bytes(data)).decode()
    sidecar.write_text(json.dumps(doc))
    load_error(folder, _fresh(), errors.FormatError, sidecar.name, "step")


def test_a_missing_sidecar(saved: tuple[Path, Path]) -> None:
    folder, sidecar = saved
    sidecar.unlink()
    load_error(folder, _fresh(), errors.FormatError, sidecar.name)


@pytest.mark.parametrize("name", ["../secret.json", "/etc/passwd", ".hidden.json", ""])
def test_a_sidecar_named_outside_the_folder(tmp_path: Path, name: str) -> None:
    (tmp_path / "secret.json").write_text("{}")
    folder = tmp_path / "ckpt"
    meta = {"format": "pt", "tensorfile.dcp_objects": name}
    _write(
        folder,
        "model.safetensors",
        {"__metadata__": meta, "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        F32_4,
    )
    load_error(folder, {"w": torch.zeros(4), "step": 0}, errors.FormatError, "objects")


def test_verify_finds_a_flipped_byte(tmp_path: Path) -> None:
    """StorageWriter(checksum=) stores digests; StorageReader(verify=True) checks them (and
    without verify the flipped byte loads as it is)."""
    folder = tmp_path / "ckpt"
    w = torch.arange(64.0).reshape(8, 8)
    dcp.save({"w": w, "b": torch.ones(3)}, storage_writer=writer(folder, checksum="sha256"))
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3 * 4 - 5] ^= 0x40  # a byte of w's last row (b's 12 bytes come after it, or before)
    path.write_bytes(bytes(data))
    sd = {"w": torch.zeros(8, 8), "b": torch.zeros(3)}
    dcp.load(sd, storage_reader=reader(folder))
    assert not torch.equal(sd["w"], w) or not torch.equal(sd["b"], torch.ones(3))
    sd = {"w": torch.zeros(8, 8), "b": torch.zeros(3)}
    load_error(folder, sd, errors.ChecksumError, "model.safetensors", verify=True)
