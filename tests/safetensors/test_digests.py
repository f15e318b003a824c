"""Per-tensor digests in safetensors files (``checksum=``): stored as text under the
``tensorfile.digests`` metadata key, so the reference library loads the file unchanged, and
checked by ``verify`` and by ``load_file``/``safe_open``/``tensorfile.open`` with
``verify=True``: a flipped byte is a ChecksumError naming the tensor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as ref_numpy
import safetensors.torch as ref_torch
import torch

import tensorfile
from tensorfile import ChecksumError
from tensorfile.errors import InvalidMetadataError, SafetensorChecksumError
from tensorfile.ops import verify
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tensorfile.safetensors import torch as st_torch
from tests.helpers.cli import run_proc
from tests.helpers.digests import flip_byte

ARRAYS = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.int16)}


@pytest.mark.parametrize("algorithm", ["xxh3", "crc32c", "sha256"])
def test_the_reference_loads_a_file_with_digests_unchanged(tmp_path: Path, algorithm: str) -> None:
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(ARRAYS, str(path), metadata={"format": "np"}, checksum=algorithm)
    loaded = ref_numpy.load_file(str(path))
    assert all(np.array_equal(loaded[k], v) for k, v in ARRAYS.items())
    with tensorfile.open(str(path)) as f:
        digests = json.loads(f.metadata["tensorfile.digests"])
    assert sorted(digests) == ["a", "b"] and all(
        d.startswith(algorithm + ":") for d in digests.values()
    )
    assert tensorfile.open(str(path), verify=True).get_tensor("a").tolist() == ARRAYS["a"].tolist()
    assert verify(str(path)).digests_checked == 2


def test_a_flipped_byte_is_caught_by_verify_and_by_every_verified_load(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(ARRAYS, str(path), checksum="xxh3")
    flip_byte(path, "b")
    report = verify(str(path))
    assert [(f.subject, f.rule) for f in report.failures] == [("b", "digest")]
    cli = run_proc("verify", path)
    assert cli.code == 1 and "'b'" in cli.err
    for load in (
        lambda: st_numpy.load_file(str(path), verify=True),
        lambda: st_numpy.load_file(str(path), verify=True, copy=False),
        lambda: st_torch.load_file(str(path), verify=True),
        lambda: st_torch.load_file(str(path), verify=True, backend="pread"),
        lambda: tensorfile.open(str(path), verify=True).get_tensor("b"),
        lambda: tensorfile.open(str(path), verify=True).view("b"),
        lambda: tensorfile.open(str(path), verify=True).read_slice("b", (slice(0, 1),)),
        lambda: safe_open(str(path), "np", verify=True).get_slice("b")[:1],
    ):
        with pytest.raises(SafetensorChecksumError, match="tensor 'b'") as err:
            load()
        assert isinstance(err.value, ChecksumError)
    # unverified loads read it (the reference's behaviour); the intact tensor verifies
    assert st_numpy.load_file(str(path))["b"][0] != 1
    assert tensorfile.open(str(path), verify=True).get_tensor("a").sum() == 15.0


def test_torch_saves_digests_too(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    st_torch.save_file({"w": torch.arange(8, dtype=torch.bfloat16)}, str(path), checksum="sha256")
    assert torch.equal(ref_torch.load_file(str(path))["w"], torch.arange(8, dtype=torch.bfloat16))
    assert verify(str(path)).ok and verify(str(path)).digests_checked == 1
    blob = st_torch.save({"w": torch.ones(2)}, checksum="crc32c")
    assert b"tensorfile.digests" in blob


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        '["a"]',
        '{"a": "md5:00"}',
        '{"a": "xxh3:123"}',
        '{"zz": "crc32c:00000000"}',
        '{"a": 5}',
    ],
)
def test_lying_digest_metadata_is_an_invalid_metadata_error(tmp_path: Path, value: str) -> None:
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(ARRAYS, str(path), metadata={"tensorfile.digests": value})
    assert st_numpy.load_file(str(path))["a"].sum() == 15.0  # unverified: just metadata
    with pytest.raises(InvalidMetadataError, match=r"tensorfile\.digests"):
        tensorfile.open(str(path), verify=True)


def test_an_unknown_checksum_is_refused_before_writing(tmp_path: Path) -> None:
    from tensorfile import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="md5"):
        st_numpy.save_file(ARRAYS, str(tmp_path / "m.safetensors"), checksum="md5")
    assert not (tmp_path / "m.safetensors").exists()


def test_convert_writes_digests_that_verify_and_keep_the_content_id(tmp_path: Path) -> None:
    from tensorfile import ztensor
    from tensorfile.cli.app import main
    from tensorfile.ops import content_hash, convert

    src = tmp_path / "m.zt"
    ztensor.save_file({"w": np.ones(4, np.float32), "v": np.arange(3, dtype=np.int8)}, src)
    out = tmp_path / "o.safetensors"
    convert(str(src), str(out), checksum="sha256")
    assert verify(str(out)).digests_checked == 2
    assert content_hash(str(out)) == content_hash(str(src))
    assert sorted(ref_numpy.load_file(str(out))) == ["v", "w"]
    assert main(["convert", str(src), str(tmp_path / "c.safetensors"), "--checksum", "crc32c"]) == 0
    assert verify(str(tmp_path / "c.safetensors")).digests_checked == 2
    convert(str(src), str(tmp_path / "ck"), checksum="xxh3", shard_size="16B")
    report = verify(str(tmp_path / "ck"))
    assert report.ok and report.digests_checked == 2
    assert content_hash(str(tmp_path / "ck")) == content_hash(str(src))


def test_the_streaming_writer_digests_as_the_data_streams(tmp_path: Path) -> None:
    """StreamWriter writes the header first: placeholders of the digests' fixed length,
    rewritten in place with the real digests before the file appears; the bytes equal a
    one-shot save's."""
    from tensorfile.safetensors import StreamWriter

    path = tmp_path / "s.safetensors"
    with StreamWriter(str(path), {"a": ("F32", (2, 3)), "b": ("I16", (4,))}, checksum="xxh3") as w:
        w.write("b", ARRAYS["b"])
        w.write("a", ARRAYS["a"][:1])
        w.write("a", ARRAYS["a"][1:])
    st_numpy.save_file(ARRAYS, str(tmp_path / "one.safetensors"), checksum="xxh3")
    assert path.read_bytes() == (tmp_path / "one.safetensors").read_bytes()
    assert verify(str(path)).digests_checked == 2
    from tensorfile import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="not completely written"):
        with StreamWriter(
            str(tmp_path / "x.safetensors"), {"a": ("F32", (2,))}, checksum="xxh3"
        ) as w:
            w.write("a", np.ones(1, np.float32))  # incomplete: no file, no placeholder seen
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_sharded_saves_digest_every_shard(tmp_path: Path, framework: str) -> None:
    arrays = {f"t{i}": np.full(64, i, np.float32) for i in range(5)}
    if framework == "numpy":
        st_numpy.save_sharded(arrays, tmp_path, max_shard_size="600B", checksum="sha256")
    else:
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
        st_torch.save_sharded(tensors, tmp_path, max_shard_size="600B", checksum="sha256")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1
    for shard in shards:  # each shard names only its own tensors
        with tensorfile.open(str(shard), verify=True) as f:
            assert sorted(json.loads(f.metadata["tensorfile.digests"])) == sorted(f.keys())
        ref_numpy.load_file(str(shard))
    assert verify(str(tmp_path)).digests_checked == 5
    flip_byte(shards[0], sorted(tensorfile.open(str(shards[0])).keys())[0])
    assert [f.rule for f in verify(str(tmp_path)).failures] == ["digest"]
