"""Reproducers of defects found by hostile testing of the concurrent dataset writers and of
content id v2. Each test fails while its defect is there."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile.dataset.writer as writer_module
from tensorfile import dataset
from tensorfile.dataset.index import read_index
from tensorfile.dataset.manifest import read_manifest
from tensorfile.errors import ConcurrentWriteError, TensorFileError
from tensorfile.ops import content_hash
from tests.dataset.test_ds_concurrent import Job
from tests.helpers.datasets import cols_a, cols_b

INDEX = "_tensor_index.parquet"


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> str:
    """A safetensors file written by hand: name -> (dtype, shape, data bytes)."""
    header: dict[str, Any] = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


# -- concurrent writers ------------------------------------------------------------------------


def test_a_deeply_nested_forged_job_marker_is_a_tensorfile_error(tmp_path: Path) -> None:
    """A job marker of 4,000 nested ``[`` (under the 4 KiB limit) made json raise a
    RecursionError out of commit instead of a tensorfile error."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    job = Job(store, cols_b(3), "append")
    Path(store.path(f"_staging/{job.job}/_JOB")).write_text("[" * 4000)
    with pytest.raises(TensorFileError, match="job marker"):
        job.commit()
    with dataset.open(store) as ds:
        assert sorted(int(s["id"]) for s in ds) == [0, 1, 2, 3]


@pytest.mark.parametrize("columns_change", [False, True])
def test_an_append_overtaken_while_it_reads_the_old_dataset_is_a_concurrent_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns_change: bool
) -> None:
    """An append checks the manifest's version, then reads the old dataset. An overwrite that
    commits in between (deleting the old shards, or changing the columns) made the append fail
    with a FormatError ("the manifest lists part-..., which is missing": the dataset looks
    damaged, and it is not) or an InvalidArgumentError about columns, instead of the
    ConcurrentWriteError a caller retries on. Seen with 6 processes writing at once."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    other = {"y": np.ones((3, 2), np.float32)} if columns_change else cols_b(3)
    winner = Job(store, other, "overwrite")
    loser = Job(store, {"id": np.arange(50, 53), "x": np.ones((3, 2), np.float32)}, "append")
    real = writer_module.read_manifest

    def overtaken(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(writer_module, "read_manifest", real)
        if columns_change:  # commits before the loser reads the old manifest
            winner.commit()
            return real(*args, **kwargs)
        old = real(*args, **kwargs)
        winner.commit()  # commits (deleting the old shards) before the loser checks them
        return old

    monkeypatch.setattr(writer_module, "read_manifest", overtaken)
    with pytest.raises(ConcurrentWriteError, match="another writer committed"):
        loser.commit()
    assert not {n for n in os.listdir(store.root) if n.endswith(".safetensors")} & loser.shards


def test_an_index_asked_for_is_not_removed_by_a_racing_overwrites_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An overwrite without generate_index removes the index after its commit point, outside
    any lock: an append with generate_index that commits in between (building on the
    overwrite) has its fresh index deleted, so the final dataset has none though the append
    asked for one and succeeded."""
    d = str(tmp_path / "ds")
    dataset.write(cols_a(4), d, batch_size=2, generate_index=True)
    real = writer_module._remove_index

    def racing(store: Any) -> None:
        monkeypatch.setattr(writer_module, "_remove_index", real)
        dataset.write(cols_b(4), d, mode="append", batch_size=2, generate_index=True)
        real(store)

    monkeypatch.setattr(writer_module, "_remove_index", racing)
    dataset.write(cols_a(6), d, mode="overwrite", batch_size=2)
    manifest = read_manifest(d)
    assert manifest is not None
    assert read_index(d, manifest) is not None  # the append's index


def test_a_late_index_does_not_replace_the_index_of_a_later_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is written after the manifest, unconditionally: when a second append commits
    (with its index) between the first's manifest and the first's index, the first's index
    lands last and describes a manifest that is no longer current (stale: readers fall back
    to reading every shard header, and it stays so until the next write)."""
    d = str(tmp_path / "ds")
    dataset.write(cols_a(4), d, batch_size=2, generate_index=True)
    real = writer_module.index_bytes
    calls = {"n": 0}

    def slow_index(rows: Any) -> bytes:
        out = real(rows)
        calls["n"] += 1
        if calls["n"] == 1:  # the first append: its manifest is about to be published
            monkeypatch.setattr(writer_module, "index_bytes", real)
            real_write_if = writer_module.LocalStore.write_if

            def write_if(self: Any, name: str, data: bytes, expected: Any) -> None:
                real_write_if(self, name, data, expected)
                monkeypatch.setattr(writer_module.LocalStore, "write_if", real_write_if)
                dataset.write(cols_b(2), d, mode="append", batch_size=2, generate_index=True)

            monkeypatch.setattr(writer_module.LocalStore, "write_if", write_if)
        return out

    monkeypatch.setattr(writer_module, "index_bytes", slow_index)
    dataset.write(cols_b(3), d, mode="append", batch_size=2, generate_index=True)
    manifest = read_manifest(d)
    assert manifest is not None and manifest.total_samples == 4 + 3 + 2
    assert read_index(d, manifest) is not None


# -- content id v2 -----------------------------------------------------------------------------


def test_converting_bool_bytes_to_ztensor_v2_keeps_the_content_id(tmp_path: Path) -> None:
    """A safetensors BOOL tensor whose bytes are not all 0/1 (``[0, 2, 1]``): the content id
    hashes the stored bytes, ``convert --to zt2`` normalises them to ``[0, 1, 1]``, so the
    converted file has another content id (zTensor v1.0, npz and safetensors keep it), though
    convert promises that the id is kept."""
    src = _safetensors(tmp_path / "b.safetensors", {"b": ("BOOL", [3], bytes([0, 2, 1]))})
    dst = str(tmp_path / "b.zt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cli = [sys.executable, "-c", "from tensorfile.cli.app import main; main()"]
    done = subprocess.run([*cli, "convert", src, dst, "--to", "zt2"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert content_hash(dst) == content_hash(src)


CORPUS = Path(__file__).resolve().parents[1] / "ztensor" / "fixtures" / "v2-conformance"


@pytest.mark.parametrize(
    "fixture", ["reject/bool-invalid-byte.zt", "reject/f4-nonzero-odd-nibble.zt"]
)
@pytest.mark.parametrize("verify", [False, True])
def test_the_content_id_refuses_ztensor_v2_data_every_read_refuses(
    fixture: str, verify: bool
) -> None:
    """A zTensor v2 part whose decoded bytes break its logical type's rule (a bool byte of
    2, an f4_e2m1 pad nibble that is not zero) is refused by every read (get_tensor, convert),
    as a CSR part that breaks its rules is refused by the content id too; but the content id
    hashes these bytes as they are stored (even with verify=True), so it gives an id to data
    no reader hands out, and one that depends on bits that carry no value (the pad nibble)."""
    from tensorfile.errors import ZTensorError

    with pytest.raises(ZTensorError, match=r"bool bytes are 0 or 1|nibble"):
        content_hash(str(CORPUS / fixture), verify=verify)


def test_the_message_of_an_oversized_job_marker_reads_as_english(tmp_path: Path) -> None:
    """Every store's read_bounded said "... is over 4096 bytes; it is not a dataset's the job
    marker" (``what`` comes with its article)."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    job = Job(store, cols_b(3), "append")
    Path(store.path(f"_staging/{job.job}/_JOB")).write_text(" " * 5000)
    with pytest.raises(TensorFileError, match="job marker") as caught:
        job.commit()
    assert "dataset's the" not in str(caught.value)
