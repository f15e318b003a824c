"""The zTensor v2 conformance corpus (``fixtures/v2-conformance``, from the reference's
repository, see its NOTE.md): every valid file opens, and decodes to what the corpus says
where it says; every reject file is rejected with a ZTensorError, on open or, for the data
rules, when the tensor is decoded.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import ChecksumError, UnsupportedError, ZTensorError
from tensorfile.formats.ztensor.v2 import _format as _v2_format

CORPUS = Path(__file__).resolve().parent / "fixtures" / "v2-conformance"
VALID = sorted(p.name for p in (CORPUS / "valid").glob("*.zt"))
REJECT = sorted(p.name for p in (CORPUS / "reject").glob("*.zt"))

REJECTED_ON_DECODE = {
    # file: (object, error type) -- the metadata is valid, the data breaks a rule
    "bool-invalid-byte.zt": ("t", ZTensorError),
    "f4-nonzero-odd-nibble.zt": ("t", ZTensorError),
    "verify-digest-mismatch.zt": ("t", ChecksumError),
    "csr-index-out-of-cols.zt": ("m", ZTensorError),
    "csr-indptr-not-zero-based.zt": ("m", ZTensorError),
    "csr-row-not-increasing.zt": ("m", ZTensorError),
}
FILLER = 0xAB  # what the corpus puts in every blob it does not plant


def test_the_corpus_is_all_here() -> None:
    assert len(VALID) == 19 and len(REJECT) == 57


@pytest.mark.parametrize("name", VALID)
def test_every_valid_file_opens(name: str) -> None:
    path = CORPUS / "valid" / name
    with ztensor.open(path) as f:
        assert f.catalog.version == "2"
        for tensor in f.keys():
            f.info(tensor)
    with tensorfile.open(path) as f:
        assert f.format == "ztensor"


@pytest.mark.parametrize("name", REJECT)
def test_every_reject_file_is_rejected(name: str) -> None:
    path = CORPUS / "reject" / name
    if name not in REJECTED_ON_DECODE:
        with pytest.raises(ZTensorError):
            ztensor.open(path)
        with pytest.raises(ZTensorError):
            tensorfile.open(path, format="ztensor")
        return
    tensor, error = REJECTED_ON_DECODE[name]
    with ztensor.open(path) as f:
        with pytest.raises(error) as info:
            f.get_tensor(tensor)
        assert isinstance(info.value, ZTensorError) and info.value.tensor == tensor
        assert tensor in str(info.value)


def _open(name: str) -> Any:
    return ztensor.open(CORPUS / "valid" / name)


def test_decoded_values() -> None:
    with _open("minimal.zt") as f:
        assert f.get_tensor("t").tolist() == [FILLER] * 8 and f.view("t").dtype == np.uint8
    with _open("scalar.zt") as f:
        assert f.get_tensor("s").shape == () and f.get_tensor("s").view(np.uint32) == 0xABABABAB
    with _open("zero-size-tensor.zt") as f:
        assert f.get_tensor("z").shape == (0, 4) and f.get_tensor("z").dtype == np.float32
    with _open("aliased-identical-blobs.zt") as f:
        assert f.get_tensor("a").tolist() == f.get_tensor("b").tolist() == [FILLER] * 8
    with _open("canonical-basic.zt") as f:
        assert f.get_tensor("a.bias").view(np.uint32).tolist() == [0x01010101] * 4
        weight = f.get_tensor("a.weight")
        assert weight.dtype == ml_dtypes.bfloat16 and weight.shape == (2, 4)
        assert weight.view(np.uint16).tolist() == [[0x0202] * 4] * 2
        assert f.info("tied").data.range == f.info("a.weight").data.range
        assert f.verify_all() == (3, 0)
    with _open("csr-data-valid.zt") as f:
        csr = f.get_tensor("m")
        assert isinstance(csr, ztensor.CSRTensor) and csr.shape == (2, 3)
        assert (csr.to_dense() != 0).tolist() == [[True, False, True], [False, True, False]]
    with _open("verify-ok.zt") as f:
        assert f.verify_all() == (1, 0) and f.get_tensor("t").tolist() == [FILLER] * 8
    with _open("f4-packed-odd-count.zt") as f:
        assert f.info("t").dtype.name == "F4" and f.info("t").data.range.length == 3
        with pytest.raises(ZTensorError, match="nibble"):  # the filler breaks the padding rule
            f.get_tensor("t")


def test_attributes_of_every_cbor_type() -> None:
    with _open("attributes-kitchen-sink.zt") as f:
        assert f.attributes == {
            "float": 1.25,
            "neg": -42,
            "nested": [None, True],
            "raw": b"\x00\x01\x02",
        }
        assert f.metadata == {
            "float": "1.25",
            "neg": "-42",
            "nested": "[null,true]",
            "raw": '"000102"',
        }


def test_unknown_layouts_types_and_encodings_are_structural() -> None:
    with _open("unknown-layout-structural.zt") as f:
        value = f.get_tensor("q")
        assert isinstance(value, ztensor.ExtensionTensor) and value.layout == "x.custom/1"
        assert {k: v.size for k, v in value.components.items()} == {"data": 32, "scales": 104}
    with _open("unknown-ltype-structural.zt") as f:
        assert f.info("t").data.logical == "x.future/1"
        with pytest.raises(UnsupportedError, match=r"x\.future/1"):
            f.get_tensor("t")
        with pytest.raises(UnsupportedError):
            f.view("t")
        assert f.read_stored("t", "data").tolist() == [FILLER] * 8
    with _open("view-unknown-encoding-refused.zt") as f:
        for read in (f.view, f.get_tensor):
            with pytest.raises(UnsupportedError, match=r"x\.z/1"):
                read("t")
        assert f.read_stored("t", "data").size == 5


def test_a_data_shard_opens_with_no_tensors() -> None:
    with _open("data-shard.zt") as f:
        assert f.keys() == [] and f.is_data_shard and f.attributes == {}


@pytest.mark.parametrize(
    "name",
    [
        "shards-table.zt",
        "shard-reference-is-a-valid-image.zt",
        "local-and-foreign-parts-together.zt",
    ],
)
def test_parts_in_a_missing_shard_are_a_clear_error(name: str) -> None:
    with _open(name) as f:
        foreign = "there" if "here" in f.keys() else "t"
        if "here" in f.keys():
            assert f.get_tensor("here").tolist() == [FILLER] * 8
        with pytest.raises(ZTensorError, match="shard 'base'") as info:
            f.get_tensor(foreign)
        assert info.value.tensor == foreign
    with ztensor.open((CORPUS / "valid" / name).read_bytes()) as f:  # not a local file
        with pytest.raises(ZTensorError, match="not a local path"):
            f.get_tensor(foreign)


def _data_shard(size: int, payload: bytes) -> bytes:
    magic = _v2_format.MAGIC
    body = bytearray(size - 40)
    body[:8] = magic
    body[4096 : 4096 + len(payload)] = payload
    return bytes(body) + struct.pack("<QQQII", 0, 0, 0, 2, 0) + magic


def _root_naming(shard: bytes, dst: Path) -> None:
    """The corpus root with its shard table's digest made the true one of ``shard``."""
    from tensorfile.formats.ztensor import _cbor
    from tensorfile.formats.ztensor.v2._format import Hasher

    data = (CORPUS / "valid" / "local-and-foreign-parts-together.zt").read_bytes()
    start, length = struct.unpack_from("<QQ", data, len(data) - 40)
    root = _cbor.decode(data[start : start + length], deterministic=True)
    hasher = Hasher("xxh3")
    hasher.update(shard)
    root["shards"]["base"]["digest"] = hasher.value()
    manifest = _cbor.encode(root, deterministic=True)
    footer = _v2_format.encode_footer(start, len(manifest), _v2_format.manifest_hash(manifest))
    dst.write_bytes(data[:start] + manifest + footer)


def test_parts_in_a_shard_are_read_from_the_sibling_file(tmp_path: Path) -> None:
    root = tmp_path / "model.zt"
    shard = _data_shard(1 << 20, bytes(range(8)))
    _root_naming(shard, root)
    (tmp_path / "model-base.zt").write_bytes(shard)
    with ztensor.open(root) as f:
        assert f.get_tensor("there").tolist() == list(range(8))
        assert f.get_tensor("here").tolist() == [FILLER] * 8
        assert f.info("there").data.shard == "base"
        f.verify_shards()
    (tmp_path / "model-base.zt").write_bytes(_data_shard(1 << 19, b""))  # not the named file
    with ztensor.open(root) as f, pytest.raises(ZTensorError, match="should be 1,048,576 bytes"):
        f.get_tensor("there")


def test_a_shard_whose_digest_is_not_the_tables_never_gives_its_values(tmp_path: Path) -> None:
    """The shard table records each shard's whole-file digest: a shard corrupted (same
    size) or swapped is a ChecksumError naming it on first use, and verify --deep fails,
    naming the tensor (it used to print OK and get_tensor returned the corrupted values)."""
    from tensorfile.ops import verify

    root = tmp_path / "model.zt"
    good = _data_shard(1 << 20, bytes(range(8)))
    _root_naming(good, root)
    bad = bytearray(good)
    bad[4096] ^= 0xFF  # the first value of "there": same size, other bytes
    (tmp_path / "model-base.zt").write_bytes(bytes(bad))
    with ztensor.open(root) as f:
        assert f.get_tensor("here").tolist() == [FILLER] * 8  # in the root: readable
        with pytest.raises(ChecksumError, match="shard 'base'"):
            f.get_tensor("there")
        with pytest.raises(ChecksumError, match="shard 'base'"):
            f.verify_shards()
    with ztensor.open(root, verify=False) as f:  # the caller's choice: unchecked
        assert f.get_tensor("there")[0] == 0xFF
    report = verify(str(root), deep=True)
    assert [(x.subject, x.rule) for x in report.failures] == [("there", "digest")]
    cli = subprocess.run(
        [sys.executable, "-m", "tensorfile.cli.app", "verify", "--deep", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 1 and "there" in cli.stdout + cli.stderr


def test_the_content_id_reads_a_part_in_a_shard_from_the_shard(tmp_path: Path) -> None:
    from tensorfile.ops import content_hash
    from tensorfile.safetensors.numpy import save_file

    root = tmp_path / "model.zt"
    shard = _data_shard(1 << 20, bytes(range(8)))
    _root_naming(shard, root)
    (tmp_path / "model-base.zt").write_bytes(shard)
    with ztensor.open(root) as f:
        same = {name: f.get_tensor(name) for name in f.keys()}
    save_file(same, str(tmp_path / "same.safetensors"))
    assert content_hash(str(root)) == content_hash(str(tmp_path / "same.safetensors"))
