"""``load_file(backend="auto")`` and :mod:`tensorfile.loading`: a lazy mapping on a local disk
(read ahead in parallel when the file is cold), owned reads on network and FUSE filesystems,
the explicit backends kept, and what was chosen said.

Network and FUSE filesystems cannot be mounted here, so those tests hand the loader a mount
table (the kernel's format) that places the test folder on one; everything else is real."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch as ref
import torch

import tensorfile.loading as loading
import tensorfile.safetensors.numpy as tfnp
import tensorfile.safetensors.torch as tft
from tensorfile.core.errors import InvalidArgumentError, InvalidTypeError, SourceError
from tensorfile.sources.local import _mounts, policy
from tests.helpers.pagecache import evict as _evict


@pytest.fixture
def model(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    tensors = {
        f"w{i}": torch.from_numpy(rng.standard_normal(300_000, np.float32)) for i in range(4)
    }
    tensors["b"] = torch.arange(7, dtype=torch.int64)
    path = tmp_path / "m.safetensors"
    ref.save_file(tensors, str(path))
    return path


def _cold(path: Path) -> float:
    _evict(path)
    c = loading.choose(path)
    if c.resident_fraction is None or c.resident_fraction >= loading.WARM_FROM:
        pytest.skip("the page cache does not drop this file's pages here")
    return c.resident_fraction


def _same(got: dict[str, torch.Tensor], path: Path) -> None:
    want = ref.load_file(str(path))
    assert list(got) == list(want) or sorted(got) == sorted(want)
    for name, t in want.items():
        assert torch.equal(got[name], t), name


def test_a_warm_local_file_is_mapped_lazily(model: Path) -> None:
    _ = model.read_bytes()
    got = tft.load_file(model)
    c = loading.last()
    assert c is not None and (c.backend, c.read_ahead, c.requested) == ("mmap", False, "auto")
    if c.kind == "local":
        assert c.resident_fraction == pytest.approx(1.0, abs=0.05)
    _same(got, model)


def test_a_cold_local_file_is_read_ahead_then_mapped(model: Path) -> None:
    if loading.choose(model).kind != "local":
        pytest.skip("the test folder is not on a local disk")
    _cold(model)
    got = tft.load_file(model)
    c = loading.last()
    assert c is not None and (c.backend, c.read_ahead) == ("mmap", True)
    assert "read ahead" in c.reason
    assert loading.choose(model).resident_fraction == pytest.approx(1.0, abs=0.05)
    _same(got, model)
    got["w0"][0] = 123.0  # a private mapping: writable, and the file keeps its bytes
    assert ref.load_file(str(model))["w0"][0] != 123.0


def test_owned_loads_do_not_read_ahead(model: Path) -> None:
    if loading.choose(model).kind != "local":
        pytest.skip("the test folder is not on a local disk")
    _cold(model)
    got = tft.load_file(model, copy=True)
    c = loading.last()
    assert c is not None and not c.read_ahead and "copies" in c.reason
    _same(got, model)
    _cold(model)
    arrays = tfnp.load_file(model)  # owned numpy arrays: the reads are the copies
    assert not loading.last().read_ahead  # type: ignore[union-attr]
    assert arrays["b"].tolist() == list(range(7))


def test_a_file_larger_than_half_the_memory_is_not_read_ahead(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if loading.choose(model).kind != "local":
        pytest.skip("the test folder is not on a local disk")
    _cold(model)
    monkeypatch.setattr(policy, "_memory_bytes", lambda: 1000)
    c = loading.choose(model)
    assert (c.backend, c.read_ahead) == ("mmap", False)
    assert "half the memory" in c.reason


def _table_placing(folder: Path, fstype: str, tmp_path: Path) -> str:
    dev = os.stat(folder).st_dev
    point = str(folder).replace(" ", "\\040")
    table = tmp_path / "mountinfo"
    table.write_text(
        f"1 0 254:0 / / rw - ext4 /dev/vda rw\n"
        f"2 1 {os.major(dev)}:{os.minor(dev)} / {point} rw,relatime shared:9 - {fstype} "
        f"server:/export rw,vers=4.2\n"
    )
    return str(table)


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "fuse.sshfs", "9p", "drvfs", "cephfs"])
def test_network_and_fuse_filesystems_get_owned_reads(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fstype: str
) -> None:
    monkeypatch.setattr(_mounts, "MOUNTINFO", _table_placing(model.parent, fstype, tmp_path))
    got = tft.load_file(model)
    c = loading.last()
    assert c is not None and (c.backend, c.filesystem) == ("pread", fstype)
    assert c.kind in ("network", "fuse") and "no page-fault reads" in c.reason
    _same(got, model)
    # the explicit choice stays the caller's
    tft.load_file(model, backend="mmap")
    assert loading.last().backend == "mmap"  # type: ignore[union-attr]


def test_tmpfs_is_mapped(model: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    path = shm / f"tensorfile-loading-{os.getpid()}.safetensors"
    path.write_bytes(model.read_bytes())
    try:
        got = tft.load_file(path)
        c = loading.last()
        assert c is not None and (c.backend, c.kind, c.read_ahead) == ("mmap", "memory", False)
        _same(got, path)
    finally:
        path.unlink()


def test_explicit_backends_are_kept(model: Path) -> None:
    for backend in ("mmap", "pread"):
        got = tft.load_file(model, backend=backend)
        c = loading.last()
        assert c is not None and (c.backend, c.requested, c.reason) == (
            backend,
            backend,
            "asked for",
        )
        _same(got, model)


def test_bad_backends_and_paths(model: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="backend must be one of"):
        tft.load_file(model, backend="fast")
    with pytest.raises(InvalidArgumentError, match="backend must be one of"):
        tfnp.load_file(model, backend="MMAP")
    with pytest.raises(InvalidTypeError):
        loading.choose(model, backend=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        loading.choose(12)  # type: ignore[arg-type]
    with pytest.raises(SourceError):
        loading.choose(tmp_path / "missing.safetensors")
    with pytest.raises(SourceError, match="directory"):
        loading.choose(tmp_path)
    # load_file keeps the reference's error for a missing file
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        tft.load_file(tmp_path / "missing.safetensors")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="FIFO"):
        loading.choose(fifo)
    with pytest.raises(SourceError, match="FIFO"):
        tft.load_file(fifo)


def test_urls_are_read_in_ranged_requests_and_file_urls_are_files(model: Path) -> None:
    c = loading.choose("https://example.com/org/model.safetensors")
    assert (c.backend, c.kind, c.filesystem, c.read_ahead) == ("pread", "remote", "url", False)
    c = loading.choose(model.as_uri())
    assert c.kind != "remote" and c.path == model.as_uri()


def test_last_is_per_thread_and_logged(model: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="tensorfile.loading"):
        tft.load_file(model, backend="pread")
    assert any("backend 'pread'" in r.getMessage() for r in caplog.records)
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(loading.last()))
    t.start()
    t.join()
    assert seen == [None]
    assert loading.last() is not None
