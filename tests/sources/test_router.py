"""The one URL router: what a path or URL names, for every entry point alike.

What must hold: a known protocol is a URL, always (a folder named ``memory:`` or ``s3:`` in the
working directory shadows nothing, and ``tensorfile.open``, ``dataset.write`` and
``dataset.open`` reach fsspec's filesystem); a local name holding ``://`` stays reachable
(``./memory://...``, an unknown scheme that exists); ``file://`` URLs are local paths, so the
local path rules (symlinks, "inside the folder") hold for them as for plain paths; options
given with a local path are refused, not ignored.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import dataset
from tensorfile.dataset.layout.storage import check_shard
from tensorfile.errors import FormatError, InvalidArgumentError, SourceError
from tensorfile.safetensors.numpy import save, save_file
from tensorfile.sources import (
    FsspecStore,
    LocalSource,
    LocalStore,
    Route,
    is_url,
    local_path_of,
    open_path,
    route,
    store_for,
)
from tests.helpers.datasets import cols_a
from tests.helpers.samples import assert_samples, expected_rows

fsspec = pytest.importorskip("fsspec")


@pytest.mark.parametrize(
    ("target", "want"),
    [
        ("m.safetensors", Route("local", "m.safetensors", "")),
        ("/abs/m.safetensors", Route("local", "/abs/m.safetensors", "")),
        ("file:///abs/m.safetensors", Route("local", "/abs/m.safetensors", "file")),
        ("file://localhost/abs/m", Route("local", "/abs/m", "file")),
        ("file:///a%20b/m?x=1#f", Route("local", "/a b/m", "file")),
        ("FILE://rel/m", Route("local", "rel/m", "file")),
        ("local:///abs/m", Route("local", "/abs/m", "local")),
        ("https://h/m", Route("http", "https://h/m", "https")),
        ("HTTP://h/m", Route("http", "HTTP://h/m", "http")),
        ("memory://b/m", Route("memory", "memory://b/m", "memory")),
        ("s3://b/m", Route("fsspec", "s3://b/m", "s3")),
        ("simplecache::s3://b/m", Route("fsspec", "simplecache::s3://b/m", "simplecache::s3")),
        ("no scheme://x", Route("local", "no scheme://x", "")),
        ("weird-proto://x", Route("fsspec", "weird-proto://x", "weird-proto")),
    ],
)
def test_routes(target: str, want: Route) -> None:
    assert route(target) == want


def test_bad_targets_are_tensorfile_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        route(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="needs a path"):
        route("file://")
    assert is_url("file://") and not is_url(b"s3://x") and not is_url(None)


def test_local_path_of() -> None:
    assert local_path_of("file:///x/m.index.json") == "/x/m.index.json"
    assert local_path_of("x/m") == "x/m"
    assert local_path_of("memory://x") is None and local_path_of("https://h/x") is None


def _tensors(value: float) -> dict[str, Any]:
    return {"w": np.full(3, value, np.float32)}


@pytest.mark.parametrize("scheme", ["memory", "s3"])
def test_a_local_folder_named_like_a_scheme_shadows_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    monkeypatch.chdir(tmp_path)
    local = tmp_path / f"{scheme}:" / "b" / "m.safetensors"  # what "memory://b/m..." names
    local.parent.mkdir(parents=True)
    save_file(_tensors(1.0), str(local))
    url = f"{scheme}://b/m.safetensors"
    assert os.path.exists(url)  # the trap: the URL is also a local path
    assert is_url(url) and route(url).kind != "local"
    assert isinstance(store_for(f"{scheme}://b/ds"), FsspecStore)
    # still reachable as a local file
    with tensorfile.open(f"./{url}") as f:
        assert f.get_tensor("w")[0] == 1.0
    assert isinstance(open_path(f"./{url}"), LocalSource)


def test_memory_urls_reach_fsspec_memory_despite_a_memory_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = f"rt-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "memory:" / bucket / "m.safetensors"
    local.parent.mkdir(parents=True)
    save_file(_tensors(1.0), str(local))
    fs = fsspec.filesystem("memory")
    fs.pipe(f"/{bucket}/m.safetensors", save(_tensors(2.0)))
    with tensorfile.open(f"memory://{bucket}/m.safetensors") as f:
        assert f.get_tensor("w")[0] == 2.0  # fsspec's, not the local file
    # the dataset layer: written to and read from fsspec's memory filesystem
    url = f"memory://{bucket}/ds"
    (tmp_path / "memory:" / bucket / "ds").mkdir()
    dataset.write(cols_a(4), url, batch_size=2)
    assert fs.exists(f"/{bucket}/ds/dataset_manifest.json")
    assert os.listdir(tmp_path / "memory:" / bucket / "ds") == []
    with dataset.open(url) as ds:
        assert_samples(list(ds), expected_rows(cols_a(4), 4))
    fs.rm(f"/{bucket}", recursive=True)


def test_s3_urls_reach_s3_despite_an_s3_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3: Any
) -> None:
    bucket = s3.bucket()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:" / bucket / "ds").mkdir(parents=True)
    url = s3.url(bucket, "ds")
    dataset.write(cols_a(3), url, batch_size=2, storage_options=s3.options)
    assert os.listdir(tmp_path / "s3:" / bucket / "ds") == []  # the options were used
    with dataset.open(url, storage_options=s3.options) as ds:
        assert len(ds) == 3


def test_options_with_a_local_path_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file(_tensors(1.0), str(path))
    with pytest.raises(InvalidArgumentError, match="token"):
        open_path(str(path), token="secret")
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        store_for(tmp_path, {"key": "k"})
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        dataset.open(f"file://{tmp_path}", storage_options={"anon": True})


def test_an_unknown_scheme_that_exists_locally_is_a_local_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zzunknown:").mkdir()
    save_file(_tensors(3.0), str(tmp_path / "zzunknown:" / "m.safetensors"))
    assert not is_url("zzunknown://m.safetensors")
    with tensorfile.open("zzunknown://m.safetensors") as f:
        assert f.get_tensor("w")[0] == 3.0


def test_file_urls_open_local_files(tmp_path: Path) -> None:
    path = tmp_path / "a b.safetensors"
    save_file(_tensors(4.0), str(path))
    for url in (
        f"file://{path}",
        f"file://localhost{path}",
        "file://" + str(path).replace(" ", "%20"),
    ):
        src = open_path(url)
        assert isinstance(src, LocalSource) and src.size == path.stat().st_size
        src.close()


# -- the local path rules hold for file:// URLs as for plain paths -------------------------------


def _dataset_with_a_shard_leading_out(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "ds"
    dataset.write(cols_a(4), str(folder), batch_size=4)
    (shard,) = sorted(folder.glob("part-*.safetensors"))
    victim = tmp_path / "victim.safetensors"
    victim.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(victim)
    return folder, victim


@pytest.mark.parametrize("how", ["path", "file-url", "file-localhost-url"])
def test_a_shard_linked_out_of_the_dataset_is_refused_by_every_local_route(
    tmp_path: Path, how: str
) -> None:
    folder, _victim = _dataset_with_a_shard_leading_out(tmp_path)
    target = {
        "path": str(folder),
        "file-url": f"file://{folder}",
        "file-localhost-url": f"file://localhost{folder}",
    }[how]
    with pytest.raises(FormatError, match="outside the dataset folder"):
        with dataset.open(target) as ds:
            list(ds)


def test_local_store_reads_and_writes_stay_in_the_folder(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"secret")
    (root / "link.bin").symlink_to(outside / "secret.bin")
    (root / "dir").symlink_to(outside)
    store = LocalStore(str(root))
    with pytest.raises(SourceError, match="outside"):
        store.open_source("link.bin")
    with pytest.raises(SourceError, match="outside"):
        store.write_atomic("dir/new.bin", b"x")
    with pytest.raises(SourceError, match="outside"):
        store.write_atomic("dir/sub/new.bin", b"x")
    assert sorted(os.listdir(outside)) == ["secret.bin"]
    with pytest.raises(FormatError, match="outside"):
        check_shard(store, "link.bin", 6)
