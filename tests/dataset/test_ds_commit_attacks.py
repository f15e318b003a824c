"""Commits delete only what provably belongs to the previous dataset: a lying previous
manifest (listing the manifest, the index, paths outside the folder, symlinks, folders,
FIFOs, names that are not shard names) makes an ``overwrite`` delete nothing but the previous
dataset's own shards, and a folder in the way fails a write before anything changes."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.dataset.layout.files import SHARD_NAME, deletable, delete_previous
from tensorfile.errors import FormatError, SourceError
from tests.helpers.checkpoints import shard_files, snapshot
from tests.helpers.lying_datasets import INDEX, MANIFEST, edit_manifest, fifo_guard, shard_name
from tests.helpers.manifests import STAGING, assert_valid_manifest, listed_shards
from tests.helpers.samples import assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]


def cols(n: int, base: int = 0) -> dict[str, NDArray]:
    return {"id": np.arange(base, base + n, dtype=np.int64)}


def entry(path: str, size: int = 1) -> dict[str, Any]:
    return {"shard_path": path, "samples_count": 0, "bytes": size}


def plant(path: Path, data: bytes = b"precious") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- the decision, alone ------------------------------------------------------------------------


def test_deletable_allows_only_regular_shard_files_in_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    outside = tmp_path / "outside"
    mine = plant(folder / shard_name(0))
    kept = plant(folder / shard_name(1))
    victim = plant(outside / shard_name(2))
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    link = folder / shard_name(3)
    link.symlink_to(victim)
    inner_link = folder / shard_name(4)
    inner_link.symlink_to(mine)  # even a symlink to a shard of the folder: not a shard file
    a_dir = folder / shard_name(5)
    a_dir.mkdir()
    fifo = folder / shard_name(6)
    os.mkfifo(fifo)
    plant(folder / MANIFEST)
    plant(folder / INDEX)
    odd = ["notes.safetensors", "part-1-2-x.safetensors", mine.name.upper(), mine.name + ".tmp"]
    for name in odd:
        plant(folder / name)
    listed: list[object] = [
        mine.name,
        kept.name,
        MANIFEST,
        INDEX,
        "./" + MANIFEST,
        f"../outside/{victim.name}",
        str(victim),
        f"sub/{victim.name}",
        link.name,
        inner_link.name,
        a_dir.name,
        fifo.name,
        *odd,
        f"{STAGING}/{mine.name}",
        None,
        7,
        ["list"],
        "",
    ]
    with fifo_guard(fifo):
        assert deletable(str(folder), listed, keep={kept.name}) == [mine.name]


def test_shard_name_pattern() -> None:
    assert SHARD_NAME.fullmatch(shard_name(3, 12))
    assert SHARD_NAME.fullmatch("part-123456-12345-" + shard_name()[16:])  # wide ids
    for bad in ["part-0-0-x.safetensors", shard_name()[:-1], "x/" + shard_name(), MANIFEST]:
        assert not SHARD_NAME.fullmatch(bad)


def test_delete_previous_deletes_what_deletable_allows(tmp_path: Path) -> None:
    mine = plant(tmp_path / shard_name())
    stray = plant(tmp_path / "mine.safetensors")
    assert delete_previous(str(tmp_path), [mine.name, stray.name]) == [mine.name]
    assert not mine.exists()
    assert stray.read_bytes() == b"precious"
    assert delete_previous(str(tmp_path / "missing"), [mine.name]) == []


# -- overwrite over a lying previous manifest ------------------------------------------------


def _attack(kind: str, folder: Path, outside: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """Entries to add to the previous manifest, and the files that must survive."""
    if kind == "manifest":
        return [entry(MANIFEST), entry("./" + MANIFEST)], []
    if kind == "index":
        return [entry(INDEX)], []
    if kind == "parent":
        victim = plant(folder.parent / shard_name())
        return [entry(f"../{victim.name}")], [victim]
    if kind == "absolute":
        victim = plant(outside / shard_name())
        return [entry(str(victim))], [victim]
    if kind == "symlinked_folder":
        victim = plant(outside / shard_name())
        (folder / "sub").symlink_to(outside, target_is_directory=True)
        return [entry(f"sub/{victim.name}")], [victim]
    if kind == "symlink_shard":
        victim = plant(outside / "weights.safetensors")
        link = folder / shard_name()
        link.symlink_to(victim)
        return [entry(link.name)], [victim, link]
    if kind == "directory":
        a_dir = folder / shard_name()
        inner = plant(a_dir / "inside.txt")
        return [entry(a_dir.name)], [inner]
    if kind == "not_a_shard_name":
        names = ["model.safetensors", "part-00000-0000-abc.safetensors", "README.md"]
        return [entry(n) for n in names], [plant(folder / n) for n in names]
    raise AssertionError(kind)


ATTACKS = [
    "manifest",
    "index",
    "parent",
    "absolute",
    "symlinked_folder",
    "symlink_shard",
    "directory",
    "not_a_shard_name",
]


@pytest.mark.parametrize("consistent", [True, False], ids=["totals-fixed", "totals-wrong"])
@pytest.mark.parametrize("kind", ATTACKS)
def test_overwrite_deletes_only_the_previous_shards(
    tmp_path: Path, kind: str, consistent: bool
) -> None:
    folder, outside = tmp_path / "ds", tmp_path / "outside"
    outside.mkdir()
    dataset.write(cols(7), folder, batch_size=3)
    old = listed_shards(folder)
    extra, survivors = _attack(kind, folder, outside)
    before = {p: p.read_bytes() for p in survivors if p.is_file()}

    def lie(doc: dict[str, Any]) -> None:
        doc["shards"] += extra
        if consistent:
            doc["total_bytes"] += len(extra)

    edit_manifest(folder, lie)
    dataset.write(cols(4, 100), folder, batch_size=2, generate_index=True)
    doc = assert_valid_manifest(folder)  # planted files may remain beside the shards
    assert doc["total_samples"] == 4
    assert (folder / MANIFEST).is_file()
    assert (folder / INDEX).is_file()
    assert not set(old) & set(shard_files(folder))  # the previous shards are gone
    for p in survivors:
        assert os.path.lexists(p), p
    for p, data in before.items():
        assert p.read_bytes() == data
    assert_samples(list(dataset.open(folder)), expected_rows(cols(4, 100), 4))


def test_overwrite_leaves_a_fifo_named_like_a_shard(tmp_path: Path) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    fifo = tmp_path / shard_name(9)
    os.mkfifo(fifo)
    edit_manifest(tmp_path, lambda doc: doc["shards"].append(entry(fifo.name)))
    with fifo_guard(fifo):
        dataset.write(cols(3, 50), tmp_path, batch_size=2)
    assert fifo.is_fifo()
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols(3, 50), 3))


@pytest.mark.parametrize(
    "manifest",
    [b"", b"{not json", b"[" * 100_000, b'{"shards": 5}', b"\xff\xfe"],
    ids=["empty", "syntax", "deep", "shards-not-a-list", "bytes"],
)
def test_overwrite_over_an_unreadable_manifest_deletes_nothing(
    tmp_path: Path, manifest: bytes
) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    old = listed_shards(tmp_path)
    (tmp_path / MANIFEST).write_bytes(manifest)
    dataset.write(cols(3, 50), tmp_path, batch_size=2)
    assert set(old) < set(shard_files(tmp_path))  # nothing proves they were the dataset's
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols(3, 50), 3))


@pytest.mark.parametrize("what", ["fifo", "directory"])
def test_overwrite_over_a_manifest_that_is_not_a_file(tmp_path: Path, what: str) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    path = tmp_path / MANIFEST
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with fifo_guard(path):
        # a write never replaces a node that is not a regular file (a rename over a FIFO or a
        # device would replace the node itself): refused, and the node is left as it was
        with pytest.raises(SourceError, match=r"directory|FIFO"):
            dataset.write(cols(3, 50), tmp_path, batch_size=2)
    assert path.is_dir() if what == "directory" else stat.S_ISFIFO(os.lstat(path).st_mode)


# -- things in the way ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_an_index_folder_in_the_way_fails_before_anything_changes(
    tmp_path: Path, mode: str
) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    (tmp_path / INDEX).mkdir()
    plant(tmp_path / INDEX / "keep.txt")
    before = snapshot(tmp_path)
    with pytest.raises(SourceError, match="index"):
        dataset.write(cols(3, 50), tmp_path, batch_size=2, mode=mode, generate_index=True)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("what", ["fifo", "directory", "symlink"])
def test_overwrite_without_index_leaves_what_is_not_an_index_file(
    tmp_path: Path, what: str
) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    path, target = tmp_path / INDEX, plant(tmp_path.parent / f"{tmp_path.name}-elsewhere.bin")
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        path.symlink_to(target)
    with fifo_guard(path):
        dataset.write(cols(3, 50), tmp_path, batch_size=2)
    assert target.read_bytes() == b"precious"  # a symlink loses the link, never the target
    assert os.path.lexists(path) == (what != "symlink")
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols(3, 50), 3))


@pytest.mark.parametrize("what", ["file", "symlink"])
def test_a_staging_entry_in_the_way(tmp_path: Path, what: str) -> None:
    folder, elsewhere = tmp_path / "ds", tmp_path / "elsewhere"
    elsewhere.mkdir()
    dataset.write(cols(5), folder, batch_size=2)
    if what == "file":
        plant(folder / STAGING)
    else:
        (folder / STAGING).symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(folder, dirs=False)
    with pytest.raises(SourceError, match="staging"):
        dataset.write(cols(3, 50), folder, batch_size=2)
    assert snapshot(folder, dirs=False) == before
    assert os.listdir(elsewhere) == []  # nothing was staged outside the dataset


def test_a_file_in_place_of_the_dataset_folder(tmp_path: Path) -> None:
    plant(tmp_path / "ds")
    with pytest.raises(SourceError, match="ds"):
        dataset.write(cols(3), tmp_path / "ds", batch_size=2)
    assert (tmp_path / "ds").read_bytes() == b"precious"


# -- append over a lie ------------------------------------------------------------------------


LIES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("negative", lambda d: d["shards"][0].update(samples_count=-1)),
    ("manifest", lambda d: d["shards"].append(entry(MANIFEST))),
    ("outside", lambda d: d["shards"].append(entry("../" + shard_name()))),
]


@pytest.mark.parametrize(("name", "lie"), LIES, ids=[name for name, _ in LIES])
def test_append_over_a_lying_manifest_fails_and_changes_nothing(
    tmp_path: Path, name: str, lie: Callable[[dict[str, Any]], None]
) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    edit_manifest(tmp_path, lie)
    before = snapshot(tmp_path)
    with pytest.raises(FormatError):
        dataset.write(cols(3, 50), tmp_path, batch_size=2, mode="append")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("what", ["missing", "fifo", "more-rows"])
def test_append_to_a_dataset_whose_shards_lie_changes_nothing(tmp_path: Path, what: str) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    shard = tmp_path / listed_shards(tmp_path)[0]
    if what == "more-rows":

        def more(d: dict[str, Any]) -> None:
            d["shards"][0]["samples_count"] += 100
            d["total_samples"] += 100

        edit_manifest(tmp_path, more)
    else:
        shard.unlink()
        if what == "fifo":
            os.mkfifo(shard)
    before = snapshot(tmp_path)
    with fifo_guard(shard), pytest.raises((FormatError, SourceError), match=shard.name):
        dataset.write(cols(3, 50), tmp_path, batch_size=2, mode="append", generate_index=True)
    assert snapshot(tmp_path) == before


def test_append_with_other_columns_is_refused(tmp_path: Path) -> None:
    dataset.write(cols(5), tmp_path, batch_size=2)
    before = snapshot(tmp_path)
    other = {"id": np.arange(3), "extra": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match="columns"):
        dataset.write(other, tmp_path, batch_size=2, mode="append")
    with pytest.raises(ValueError, match="mode"):
        dataset.write({"k": ["a"], "id": [1]}, tmp_path, name_col="k", mode="append")
    assert snapshot(tmp_path) == before
