"""Trust under attack, in the operations: an index that names shards outside its folder (or,
remote, on another host), index files and sparse tensors that claim absurd sizes, and paths
or URLs the standard library would fail on. Each attack gets tensorfile's own error, quickly,
and leaves every file as it was."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import ops, ztensor
from tensorfile.core.catalog import TensorInfo
from tensorfile.errors import (
    InvalidArgumentError,
    SourceError,
    TensorFileError,
    UnsupportedError,
)
from tensorfile.ops import MAX_INDEX_BYTES
from tensorfile.safetensors.numpy import save_file
from tests.helpers.catalogs import tensor
from tests.helpers.checkpoints import write_sharded
from tests.helpers.servers import Server, start_range_server

INDEX = "model.safetensors.index.json"


def _ckpt(folder: Path) -> Path:
    """A two-shard checkpoint in ``folder``; returns its index."""
    return write_sharded(
        folder,
        [{"a.w": np.arange(4, dtype=np.float32)}, {"b.w": np.ones(3, np.float16)}],
        {"format": "pt"},
    )


def _victim(path: Path) -> Path:
    save_file({"secret": np.full(2, 7, np.float32)}, str(path), {"owner": "victim"})
    return path


def _point(index: Path, tensor: str, shard: str) -> None:
    """Make the index put ``tensor`` in ``shard``."""
    doc = json.loads(index.read_text())
    doc["weight_map"][tensor] = shard
    index.write_text(json.dumps(doc))


# -- a local index names files in its own folder only --------------------------------------------


BAD_NAMES = [
    "file://{victim}",
    "file://localhost{victim}",
    "http://127.0.0.1:1/victim.safetensors",
    "https://example.invalid/victim.safetensors",
    "{victim}",
    "//127.0.0.1/victim.safetensors",
    "../victim.safetensors",
    "sub/../../victim.safetensors",
    "..",
    "C:victim.safetensors",
    "s3://bucket/victim.safetensors",
    "memory://victim.safetensors",
    "simplecache::file:///victim.safetensors",
    "..\\victim.safetensors",
    "x?y.safetensors",
    "x#y.safetensors",
    "",
    "nul\x00.safetensors",
    "new\nline.safetensors",
]


@pytest.mark.parametrize("pattern", BAD_NAMES)
def test_index_shard_names_must_be_plain(tmp_path: Path, pattern: str) -> None:
    victim = _victim(tmp_path / "victim.safetensors")
    before = victim.read_bytes()
    index = _ckpt(tmp_path / "ckpt")
    bad = pattern.format(victim=victim)
    _point(index, "b.w", bad)
    for target in (index, index.parent):
        with pytest.raises(InvalidArgumentError, match="not a plain file name") as exc:
            ops.load(str(target))
        assert repr(bad) in str(exc.value)
    with pytest.raises(InvalidArgumentError):
        ops.edit_metadata(str(index), set={"pwned": "yes"})
    with pytest.raises(InvalidArgumentError):
        ops.content_hash(str(index))
    assert victim.read_bytes() == before


def test_relative_index_in_the_current_folder_cannot_reach_a_file_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reported attack: `tensorfile meta model.safetensors.index.json --set k=v` run in
    # the checkpoint's folder, whose index names file:///abs/victim.safetensors
    victim = _victim(tmp_path / "victim.safetensors")
    before = victim.read_bytes()
    index = _ckpt(tmp_path / "ckpt")
    _point(index, "b.w", f"file://{victim}")
    monkeypatch.chdir(index.parent)
    for call in (
        lambda: ops.edit_metadata(INDEX, set={"pwned": "yes"}),
        lambda: ops.edit_metadata(".", clear=True),
        lambda: ops.load(INDEX),
    ):
        with pytest.raises(InvalidArgumentError, match="scheme"):
            call()
    assert victim.read_bytes() == before


def test_symlinked_shard_leading_out_of_the_folder(tmp_path: Path) -> None:
    victim = _victim(tmp_path / "victim.safetensors")
    before = victim.read_bytes()
    index = _ckpt(tmp_path / "ckpt")
    shard = index.parent / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(victim)
    _point(index, "secret", shard.name)
    doc = json.loads(index.read_text())
    del doc["weight_map"]["b.w"]
    index.write_text(json.dumps(doc))
    with pytest.raises(InvalidArgumentError, match="outside the checkpoint") as exc:
        ops.load(str(index))
    assert str(victim) in str(exc.value)
    with pytest.raises(InvalidArgumentError):
        ops.edit_metadata(str(index.parent), set={"pwned": "yes"})
    assert victim.read_bytes() == before


def test_symlinked_subfolder_leading_out_of_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _victim(outside / "victim.safetensors")
    index = _ckpt(tmp_path / "ckpt")
    (index.parent / "sub").symlink_to(outside, target_is_directory=True)
    _point(index, "secret", "sub/victim.safetensors")
    with pytest.raises(InvalidArgumentError, match="outside the checkpoint"):
        ops.load(str(index))
    assert list(ops.load(str(victim)).tensors) == ["secret"]


def test_links_and_subfolders_inside_the_folder_are_fine(tmp_path: Path) -> None:
    index = _ckpt(tmp_path / "ckpt")
    folder = index.parent
    (folder / "sub").mkdir()
    os.rename(folder / "model-00002-of-00002.safetensors", folder / "sub" / "two.safetensors")
    (folder / "link.safetensors").symlink_to("sub/two.safetensors")
    _point(index, "b.w", "./link.safetensors")
    s = ops.load(str(index))
    assert sorted(s.tensors) == ["a.w", "b.w"]
    _point(index, "b.w", "sub//./two.safetensors")
    assert "b.w" in ops.load(str(folder)).tensors


def test_hugging_face_cache_layout_is_fine(tmp_path: Path) -> None:
    # snapshots/<rev>/ holds links into ../../blobs/: the index and shards really live there
    index = _ckpt(tmp_path / "blobs")
    snap = tmp_path / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in index.parent.iterdir():
        (snap / f.name).symlink_to(os.path.relpath(f, snap))
    s = ops.load(str(snap))
    assert s.shards is not None and len(s.shards) == 2
    assert all(os.path.dirname(sh.path) == str(snap) for sh in s.shards)
    assert ops.content_hash(str(snap)) == ops.content_hash(str(index))


def test_index_weight_map_checked_against_the_normalised_shard(tmp_path: Path) -> None:
    index = _ckpt(tmp_path / "ckpt")
    _point(index, "a.w", "./model-00002-of-00002.safetensors")  # b's shard, spelled oddly
    with pytest.raises(InvalidArgumentError, match=r"'a\.w'"):
        ops.load(str(index))


# -- the index itself: size, shape, kind -----------------------------------------------------


def test_index_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    index = _ckpt(tmp_path / "ckpt")
    with open(index, "r+b") as f:
        f.truncate(MAX_INDEX_BYTES + 1)  # sparse: no disk used
    start = time.monotonic()
    with pytest.raises(InvalidArgumentError, match="limit") as exc:
        ops.load(str(index.parent))
    assert f"{MAX_INDEX_BYTES:,}" in str(exc.value)
    assert time.monotonic() - start < 5


def test_index_of_nested_arrays_is_invalid_json_not_recursion(tmp_path: Path) -> None:
    index = _ckpt(tmp_path / "ckpt")
    index.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        ops.load(str(index))
    index.write_bytes(b'{"weight_map": {"a": "\xff"}}')
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        ops.load(str(index))


def test_index_that_is_a_folder_or_fifo(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / INDEX).mkdir()
    with pytest.raises(SourceError, match="directory"):
        ops.load(str(folder / INDEX))
    fifo = tmp_path / "fifo" / INDEX
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="FIFO"):  # refused before any open: no blocking
        ops.load(str(fifo.parent))


def test_shard_that_is_a_fifo_or_device(tmp_path: Path) -> None:
    index = _ckpt(tmp_path / "ckpt")
    shard = index.parent / "model-00002-of-00002.safetensors"
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(SourceError, match="FIFO"):
        ops.load(str(index))
    with pytest.raises(SourceError, match="FIFO"):
        ops.load(str(index.parent / "*.safetensors"))
    with pytest.raises(SourceError, match="character device"):
        ops.load("/dev/zero")


@pytest.mark.parametrize(
    "target", ["", "nul\x00byte", "http://[", "http://h:99999/x", "http://h:-1/x.safetensors"]
)
def test_paths_and_urls_the_standard_library_chokes_on(target: str) -> None:
    with pytest.raises(InvalidArgumentError):
        ops.load(target)
    with pytest.raises(InvalidArgumentError):
        ops.diff(target, target)


def test_glob_matching_nothing_or_folders(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        ops.load(str(tmp_path / "none-*.safetensors"))
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    with pytest.raises(SourceError, match="directory"):
        ops.load(str(tmp_path / "d*"))


# -- a remote index names files next to it only ----------------------------------------------


@pytest.fixture(scope="module")
def _servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    root = tmp_path_factory.mktemp("servers")
    servers, stoppers = [], []
    for name in ("home", "other"):
        (root / name).mkdir()
        server, stopper = start_range_server(root / name, root / f"{name}.log")
        servers.append(server)
        stoppers.append(stopper)
    yield servers[0], servers[1]
    for stopper in stoppers:
        stopper.terminate()


@pytest.fixture
def two_servers(
    _servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> tuple[Server, Server]:
    """Two Range-honouring servers on 127.0.0.1: ``home`` serves a checkpoint, ``other`` must
    never be contacted. A bearer token is set, so a stray request would carry it."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TENSORFILE_TOKEN", "secret-token")
    monkeypatch.setenv("TENSORFILE_TOKEN_HOSTS", ",".join(s.url for s in _servers))
    for server in _servers:
        shutil.rmtree(server.root)
        server.root.mkdir()
        assert server.log is not None
        server.log.write_text("")
    home, other = _servers
    _ckpt(home.root / "ckpt")
    _victim(other.root / "x.safetensors")
    return home, other


REMOTE_BAD_NAMES = [
    "{other}/x.safetensors",
    "//127.0.0.1:{port}/x.safetensors",
    "http:/127.0.0.1:{port}/x.safetensors",
    "/x.safetensors",
    "../x.safetensors",
    "file:///etc/passwd",
    "?x=1",
]


@pytest.mark.parametrize("pattern", REMOTE_BAD_NAMES)
def test_remote_index_cannot_send_shard_requests_elsewhere(
    two_servers: tuple[Server, Server], pattern: str
) -> None:
    home, other = two_servers
    index = home.root / "ckpt" / INDEX
    bad = pattern.format(other=other.url, port=other.url.rsplit(":", 1)[1])
    _point(index, "b.w", bad)
    home.reset()
    with pytest.raises(InvalidArgumentError, match="not a plain file name"):
        ops.load(f"{home.url}/ckpt/{INDEX}")
    assert other.requests() == []  # the other host never heard of us (nor of the token)
    assert [r.uri for r in home.requests()] == [f"/ckpt/{INDEX}"]  # only the index was read


def test_remote_index_shards_keep_its_folder(two_servers: tuple[Server, Server]) -> None:
    home, other = two_servers
    folder = home.root / "ckpt"
    (folder / "sub dir").mkdir()
    os.rename(folder / "model-00002-of-00002.safetensors", folder / "sub dir" / "two #1.st")
    doc = json.loads((folder / INDEX).read_text())
    doc["weight_map"]["b.w"] = "./sub dir/two #1.st"  # '#' is refused: a fragment
    (folder / INDEX).write_text(json.dumps(doc))
    with pytest.raises(InvalidArgumentError, match="fragment"):
        ops.load(f"{home.url}/ckpt/{INDEX}")
    os.rename(folder / "sub dir" / "two #1.st", folder / "sub dir" / "two 1.st")
    doc["weight_map"]["b.w"] = "./sub dir/two 1.st"
    (folder / INDEX).write_text(json.dumps(doc))
    home.reset()
    s = ops.load(f"{home.url}/ckpt/{INDEX}?download=true")
    assert sorted(s.tensors) == ["a.w", "b.w"]
    uris = sorted(r.uri for r in home.requests())
    assert "/ckpt/sub%20dir/two%201.st" in uris
    assert other.requests() == []


def test_remote_checkpoint_hides_credentials_and_reopens_with_them(
    two_servers: tuple[Server, Server],
) -> None:
    home, other = two_servers
    local = home.root / "ckpt" / INDEX
    url = home.url.replace("http://", "http://alice:s3cret@") + f"/ckpt/{INDEX}?sig=t0ken"
    s = ops.load(url)
    shown = [s.path, *(sh.path for sh in s.shards or ())]
    assert not any("s3cret" in p or "t0ken" in p for p in shown), shown
    # the data is read again from the real URLs (credentials kept, on the same host)
    assert ops.content_hash(url) == ops.content_hash(str(local))
    assert ops.diff(url, str(local), data=True).identical
    assert other.requests() == []


def test_remote_index_over_the_size_limit_is_refused_unread(
    two_servers: tuple[Server, Server],
) -> None:
    home, _ = two_servers
    big = home.root / "big" / INDEX
    big.parent.mkdir()
    with open(big, "wb") as f:
        f.truncate(512 << 20)  # the reported case: a 512 MiB index
    home.reset()
    with pytest.raises(InvalidArgumentError, match="limit"):
        ops.load(f"{home.url}/big/{INDEX}")
    sent = sum(r.body_bytes for r in home.requests())
    assert sent <= 100_000  # the first speculative read, not the file


def test_fsspec_index_shards_stay_next_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    local = _ckpt(tmp_path / "ckpt")
    for f in local.parent.iterdir():
        fs.pipe(f"/remote-ckpt/{f.name}", f.read_bytes())
    # a local file of the shard's name in the current folder must not be what is read
    monkeypatch.chdir(tmp_path)
    save_file({"impostor": np.ones(1, np.float32)}, "model-00001-of-00002.safetensors")
    try:
        s = ops.load(f"memory://remote-ckpt/{INDEX}")
        assert sorted(s.tensors) == ["a.w", "b.w"]
        assert all(sh.path.startswith("memory://") for sh in s.shards or ())
    finally:
        fs.rm("/remote-ckpt", recursive=True)


# -- sparse tensors: streamed, or refused up front ------------------------------------------------


def test_sparse_content_hash_is_the_dense_one_across_chunks(tmp_path: Path) -> None:
    # 40 MB of dense values: three pieces of CHUNK_BYTES, boundaries inside rows
    from tensorfile.ops._dense import CHUNK_BYTES

    rows, cols = 1000, 10_007
    dense = np.zeros((rows, cols), np.float32)
    rng = np.random.default_rng(0)
    cells = rng.integers(0, rows * cols, 5000)
    for at in (0, CHUNK_BYTES // 4 - 1, CHUNK_BYTES // 4, 2 * CHUNK_BYTES // 4, rows * cols - 1):
        cells = np.append(cells, at)
    dense.reshape(-1)[cells] = rng.standard_normal(cells.size).astype(np.float32)
    assert dense.nbytes > 2 * CHUNK_BYTES
    files = {
        "dense.safetensors": lambda p: save_file({"s": dense}, str(p)),
        "csr.zt": lambda p: ztensor.save_file({"s": ztensor.CSRTensor.from_dense(dense)}, p),
        "coo.zt": lambda p: ztensor.save_file({"s": ztensor.COOTensor.from_dense(dense)}, p),
    }
    hashes = set()
    for name, write in files.items():
        write(tmp_path / name)
        hashes.add(ops.content_hash(str(tmp_path / name)))
    assert len(hashes) == 1
    assert os.path.getsize(tmp_path / "coo.zt") < 1 << 20


def test_dense_chunks_match_to_dense() -> None:
    from tensorfile.ops._dense import dense_chunks

    rng = np.random.default_rng(1)
    scalar = ztensor.COOTensor(np.array([5], np.int32), np.zeros((0, 1), np.uint64), ())
    assert [c.tolist() for c in dense_chunks(scalar, 4)] == [[5]]
    for shape in [(0, 5), (5, 0), (1, 1), (7, 3), (3, 4, 5), (6,)]:
        dense = np.where(rng.random(shape) < 0.3, rng.integers(1, 9, shape), 0).astype(np.int32)
        coo = ztensor.COOTensor.from_dense(dense)
        # duplicates are summed, as to_dense does
        dup = ztensor.COOTensor(
            np.concatenate([coo.values, coo.values]), np.hstack([coo.coords] * 2), coo.shape
        )
        values = [coo, dup] + ([ztensor.CSRTensor.from_dense(dense)] if len(shape) == 2 else [])
        for value in values:
            want = np.asarray(value.to_dense()).reshape(-1)
            for step in (1, 2, 3, 7, 64):
                pieces = list(dense_chunks(value, step))
                assert all(len(p) <= step for p in pieces)
                got = np.concatenate(pieces) if pieces else np.empty(0, np.int32)
                assert got.tolist() == want.tolist(), (shape, step, type(value).__name__)


def test_sparse_data_diff_counts_like_a_dense_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a = np.where(rng.random((20, 30)) < 0.2, rng.standard_normal((20, 30)), 0).astype(np.float32)
    b = a.copy()
    b[3, 4] += 2.5
    b[19, 29] = -7
    b[0, 0] = np.nan
    ztensor.save_file({"s": ztensor.CSRTensor.from_dense(a)}, tmp_path / "a.zt")
    ztensor.save_file({"s": ztensor.COOTensor.from_dense(b)}, tmp_path / "b.zt")
    save_file({"s": b}, str(tmp_path / "b.safetensors"))
    want = ops.diff(str(tmp_path / "a.zt"), str(tmp_path / "b.safetensors"), data=True)
    got = ops.diff(str(tmp_path / "a.zt"), str(tmp_path / "b.zt"), data=True)
    assert want.data == got.data
    assert got.data is not None and len(got.data) == 1
    (d,) = got.data
    assert d.differing_elements == 3
    assert d.max_abs_diff == float("inf")  # NaN against a number


@pytest.mark.parametrize(
    ("layout", "shape"),
    [("csr", (2, 1 << 41)), ("coo", (1 << 20, 1 << 20)), ("coo", (1 << 14,) * 3)],
)
def test_sparse_claiming_terabytes_is_refused_quickly(
    tmp_path: Path, layout: str, shape: tuple[int, ...]
) -> None:
    from tests.helpers.hostile import lying_sparse

    path = str(lying_sparse(tmp_path / "lie.zt", layout, shape))
    assert os.path.getsize(path) < 1000
    start = time.monotonic()
    with pytest.raises(UnsupportedError, match="limit") as exc:
        ops.content_hash(path)
    assert "'s'" in str(exc.value) and "dense form" in str(exc.value)
    with pytest.raises(UnsupportedError, match="limit"):
        ops.diff(path, path, data=True)
    assert time.monotonic() - start < 5
    ops.inspect(path)  # the header alone is fine


def test_dense_limit_is_a_parameter(tmp_path: Path) -> None:
    from tests.helpers.hostile import lying_sparse

    path = str(lying_sparse(tmp_path / "s.zt", "coo", (100, 100)))
    with pytest.raises(UnsupportedError, match="1,000-byte limit"):
        ops.content_hash(path, max_dense_bytes=1000)
    with pytest.raises(UnsupportedError, match="1,000-byte limit"):
        ops.diff(path, path, data=True, max_dense_bytes=1000)
    assert len(ops.content_hash(path, max_dense_bytes=40_000)) == 64


@pytest.mark.parametrize("what", ["hash", "diff"])
def test_sparse_claiming_a_gigabyte_streams_in_bounded_memory(tmp_path: Path, what: str) -> None:
    # the reported case: a 272-byte file reached 1 GiB of RSS (densified whole, then copied)
    from tests.helpers.hostile import lying_sparse, vmhwm_of

    csr = lying_sparse(tmp_path / "csr.zt", "csr", (2, 1 << 26))  # 512 MiB of float32
    coo = lying_sparse(tmp_path / "coo.zt", "coo", (2, 1 << 26))
    if what == "hash":
        code = (
            "from tensorfile.ops import content_hash\n"
            f"a, b = content_hash({str(csr)!r}), content_hash({str(coo)!r})\n"
            "print(a == b, len(a))\n"
        )
        want = "True 64"
    else:
        code = (
            "from tensorfile.ops import diff\n"
            f"r = diff({str(csr)!r}, {str(coo)!r}, data=True)\n"
            "print(r.identical, r.compared)\n"
        )
        want = "True 1"
    peak, printed = vmhwm_of(code)
    assert printed == want
    assert peak < 256 << 20, f"peak RSS {peak >> 20} MiB for a 512 MiB dense form"


# -- deep module names ---------------------------------------------------------------------------


def _entry(name: str, n: int = 2) -> TensorInfo:
    return tensor(name, "F32", (n,))


def test_module_tree_of_a_name_with_100000_dots() -> None:
    names = ["a." * 100_000 + "w", "a." * 50_000 + "v", "x"]
    root = ops.module_tree([_entry(n) for n in names])
    assert root.parameters == 6
    groups, depth = [root], 0
    while groups:  # walk without recursion, counting levels
        depth += 1
        groups = [c for g in groups for c in g.children]
    assert depth <= 4  # chains collapse: a.a.a... is one group


def test_module_tree_staircase_is_not_recursive() -> None:
    names = ["a." * i + "w" for i in range(2000)]  # 2,000 nested groups
    root = ops.module_tree([_entry(n, 1) for n in names])
    g, depth = root, 0
    while g.children:
        assert g.parameters == 2000 - depth
        (g,) = g.children
        depth += 1
    assert depth == 1999


@pytest.mark.parametrize("names", [[".a", "b"], ["a..b", "a.c"], ["a.", "a.b"], ["..", "."]])
def test_module_tree_names_with_empty_components(names: list[str]) -> None:
    root = ops.module_tree([_entry(n) for n in names])
    assert root.parameters == 2 * len(names)
    seen, pending = [], [root]
    while pending:
        g = pending.pop()
        seen += [t.name for t in g.tensors]
        pending += g.children
    assert sorted(seen) == sorted(names)


def _reference_tree(tensors: list[TensorInfo], prefix: str = "") -> Any:
    """The recursive grouping tensorfile had before (kept as the oracle, for plain names)."""
    from collections import defaultdict

    cut = len(prefix) + 1 if prefix else 0
    groups: dict[str, list[TensorInfo]] = defaultdict(list)
    leaves = []
    for t in tensors:
        head, dot, _ = t.name[cut:].partition(".")
        if dot:
            groups[t.name[:cut] + head].append(t)
        else:
            leaves.append(t)
    children = []
    for key in sorted(groups):
        members = groups[key]
        while True:
            rests = [m.name[len(key) + 1 :] for m in members]
            heads = {r.partition(".")[0] for r in rests}
            if len(heads) == 1 and all("." in r for r in rests):
                key = f"{key}.{heads.pop()}"
            else:
                break
        children.append(_reference_tree(members, key))
    return (prefix, [t.name for t in leaves], children)


def _shape_of(group: Any) -> Any:
    return (group.prefix, [t.name for t in group.tensors], [_shape_of(c) for c in group.children])


def test_module_tree_matches_the_recursive_grouping() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    part = st.sampled_from(["a", "b", "c", "0", "1", "layers", "w"])
    name = st.lists(part, min_size=1, max_size=6).map(".".join)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(name, min_size=1, max_size=25, unique=True))
    def check(names: list[str]) -> None:
        entries = [_entry(n) for n in names]
        assert _shape_of(ops.module_tree(entries)) == _reference_tree(entries)

    check()


def test_errors_stay_in_the_hierarchy(tmp_path: Path) -> None:
    # every refusal above is a TensorFileError, so the CLI maps it to one line
    for exc in (InvalidArgumentError, SourceError, UnsupportedError):
        assert issubclass(exc, TensorFileError)
