"""tensorfile.open on a sharded checkpoint (an index, or a folder holding one): the reader
surface over every shard, each shard opened on first use and only once (counted locally, in
the server's log over HTTP, and under threads); fsspec URLs find their shards next to the
index; hostile indexes and folders get clear errors, over HTTP too, without a request
leaving the index's folder."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

import tensorfile
from tensorfile import InvalidArgumentError, ShardedReader, SourceError, TensorFileError
from tensorfile.cli.app import main
from tensorfile.ops import read_metadata
from tensorfile.safetensors.numpy import save, save_sharded
from tests.helpers.servers import Server, start_range_server

INDEX = "model.safetensors.index.json"
ARRAYS = {f"t{i}": (np.arange(60, dtype=np.int32) * (i + 1)).reshape(6, 10) for i in range(5)}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    folder = tmp_path / "ck"
    save_sharded(ARRAYS, folder, max_shard_size="500B", metadata={"who": "test"})
    return folder


@pytest.fixture
def served(ckpt: Path, tmp_path: Path) -> Iterator[Server]:
    server, stopper = start_range_server(ckpt.parent, tmp_path / "log")
    try:
        yield server
    finally:
        stopper.terminate()


def _requested(server: Server) -> list[str]:
    assert server.log is not None  # the range server logs a request before replying to it
    return [line.split("\t")[1] for line in server.log.read_text().splitlines()]


def _check_reader(ck: Any, *, mapped: bool = True, metadata: bool = True) -> None:
    assert isinstance(ck, ShardedReader) and isinstance(ck, tensorfile.Reader)
    assert ck.keys() == sorted(ARRAYS) and len(ck) == len(ARRAYS)
    assert ck.total_size == sum(a.nbytes for a in ARRAYS.values())
    assert ck.opened == []
    assert ck.info("t1").shape == (6, 10) and ck.info("t1").dtype.name == "I32"
    assert ck.opened == [ck.shard_of("t1")]
    assert np.array_equal(ck.get_tensor("t1"), ARRAYS["t1"])
    if mapped:
        assert np.array_equal(ck.view("t1"), ARRAYS["t1"])
    else:
        with pytest.raises(TensorFileError, match="cannot be mapped"):
            ck.view("t1")
    assert np.array_equal(ck.read_slice("t3", (slice(1, 3), slice(None, None, 4))),
                          ARRAYS["t3"][1:3, ::4])  # fmt: skip
    got = ck.get_tensors(["t0", "t4"])
    assert list(got) == ["t0", "t4"] and np.array_equal(got["t4"], ARRAYS["t4"])
    assert "t2" in ck and "zz" not in ck
    with pytest.raises(KeyError):
        ck.get_tensor("zz")
    assert sorted(ck.opened) == sorted({ck.shard_of(n) for n in ("t0", "t1", "t3", "t4")})
    if metadata:  # reads the headers of the shards not opened yet (not their data)
        assert ck.metadata == {"who": "test"} and ck.format == "safetensors"
        assert sorted(ck.catalog.tensors) == sorted(ARRAYS)
        assert {os.path.basename(t.file or "") for t in ck.catalog.tensors.values()} == set(
            ck.shards
        )


@pytest.mark.parametrize("how", ["folder", "index", "pathlike"])
def test_local(ckpt: Path, how: str) -> None:
    target: Any = {"folder": str(ckpt), "index": str(ckpt / INDEX), "pathlike": ckpt / INDEX}[how]
    with tensorfile.open(target) as ck:
        _check_reader(ck)
    assert ck.opened == []  # closed: every shard released
    with pytest.raises(InvalidArgumentError, match="closed"):
        ck.get_tensor("t0")


def test_over_http_each_shard_is_requested_only_once_it_is_used(served: Server) -> None:
    with tensorfile.open(f"{served.url}/ck/{INDEX}") as ck:
        assert set(_requested(served)) == {f"/ck/{INDEX}"}  # no shard yet
        _check_reader(ck, mapped=False, metadata=False)
        shards = {u for u in _requested(served) if u != f"/ck/{INDEX}"}
        assert shards == {f"/ck/{s}" for s in ck.opened} and len(shards) == len(ck.opened) < 5
        before = len(_requested(served))
        ck.get_tensor("t1")  # an opened shard: its header is not fetched again
        assert set(_requested(served)[before:]) <= {f"/ck/{ck.shard_of('t1')}"}
        unopened = set(ck.shards) - set(ck.opened)
        before = len(_requested(served))
        assert ck.metadata == {"who": "test"}  # the index's and the shards' common metadata
        assert set(_requested(served)[before:]) == {f"/ck/{s}" for s in unopened}


@pytest.mark.parametrize("metadata_first", [False, True])
def test_over_http_each_shard_header_is_fetched_once(served: Server, metadata_first: bool) -> None:
    """Whichever comes first, the tensors or ``.metadata`` (which needs every shard's header),
    each shard is requested once: every tensor of these shards lies inside the first read."""
    with tensorfile.open(f"{served.url}/ck/{INDEX}") as ck:
        if metadata_first:
            assert ck.metadata == {"who": "test"}
        got = ck.get_tensors(["t1", "t4"])
        assert np.array_equal(got["t4"], ARRAYS["t4"])
        assert ck.metadata == {"who": "test"}
        assert sorted(ck.catalog.tensors) == sorted(ARRAYS)
        for name in ARRAYS:
            assert np.array_equal(ck.get_tensor(name), ARRAYS[name])
        requested = _requested(served)
    assert sorted(requested) == sorted([f"/ck/{INDEX}", *(f"/ck/{s}" for s in ck.shards)])


def test_fsspec_index_finds_its_shards_beside_it(ckpt: Path, tmp_path: Path, capsys: Any) -> None:
    fs = fsspec.filesystem("memory")
    for f in ckpt.iterdir():
        fs.pipe(f"/fsck/{f.name}", f.read_bytes())
    # the working directory holds a decoy checkpoint of other dtypes: never read
    decoy = tmp_path / "cwd"
    save_sharded({n: a.astype(np.float64) for n, a in ARRAYS.items()}, decoy, max_shard_size=960)
    assert sorted(os.listdir(decoy)) == sorted(os.listdir(ckpt))
    old = os.getcwd()
    os.chdir(decoy)
    try:
        with tensorfile.open(f"memory://fsck/{INDEX}") as ck:
            _check_reader(ck, mapped=False)
        info = tensorfile.inspect(f"memory://fsck/{INDEX}")
        assert info.tensor_count == 5 and info.bytes_by_dtype == {"I32": 1200}
        capsys.readouterr()
        assert main(["inspect", "--json", f"memory://fsck/{INDEX}"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["bytes_by_dtype"] == {"I32": 1200}
        assert all(s["path"].startswith("memory://fsck/") for s in shown["shards"])
    finally:
        os.chdir(old)
        fs.rm("/fsck", recursive=True)


def test_each_shard_opened_once_under_threads(ckpt: Path) -> None:
    with tensorfile.open(ckpt) as ck:
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                barrier.wait()
                for name in sorted(ARRAYS):
                    assert np.array_equal(ck.get_tensor(name), ARRAYS[name])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(ck.opened) == sorted(ck.shards) and len(ck.opened) == len(set(ck.opened))


def test_folder_rules(tmp_path: Path) -> None:
    one = tmp_path / "one"
    save_sharded({"a": np.ones(3, np.float32)}, one)
    with tensorfile.open(one) as f:  # just model.safetensors: that file
        assert not isinstance(f, ShardedReader) and f.keys() == ["a"]
    (one / "extra.safetensors").write_bytes(save({"b": np.ones(1, np.uint8)}))
    with pytest.raises(SourceError, match=r"2 \.safetensors files \(extra\.safetensors, model"):
        tensorfile.open(one)
    two = tmp_path / "two"
    two.mkdir()
    for stem in ("a", "b"):
        (two / f"{stem}.safetensors.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(InvalidArgumentError, match=r"2 index files \(a\.safetensors\.index"):
        tensorfile.open(two)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="is a directory"):
        tensorfile.open(tmp_path / "empty")


def _index(folder: Path, doc: Any) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / INDEX
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        (b"[1, 2]", "weight_map"),
        (b"{}", "weight_map"),
        (b'{"weight_map": [["a", "s.safetensors"]]}', "weight_map"),
        (b'{"weight_map": {"a": 1}}', "weight_map"),
        (b'{"weight_map": {"a": null}}', "weight_map"),
        (b'{"weight_map": {"a": "\xff.safetensors"}}', "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"", "not valid JSON"),
        ({"weight_map": {"a": "../outside.safetensors"}}, "leaves the folder"),
        ({"weight_map": {"a": "sub/../../x.safetensors"}}, "leaves the folder"),
        ({"weight_map": {"a": "/etc/passwd"}}, "absolute"),
        ({"weight_map": {"a": "//host/share/x"}}, "network path"),
        ({"weight_map": {"a": "file:///etc/passwd"}}, "scheme"),
        ({"weight_map": {"a": "https://evil.example/x.safetensors"}}, "scheme"),
        ({"weight_map": {"a": "C:x.safetensors"}}, "scheme or drive"),
        ({"weight_map": {"a": "x\\..\\..\\y"}}, "backslash"),
        ({"weight_map": {"a": "x.safetensors?token=1"}}, "query"),
        ({"weight_map": {"a": "x\n.safetensors"}}, "control"),
        ({"weight_map": {"a": ""}}, "empty"),
    ],
)
def test_hostile_indexes_are_refused_locally(tmp_path: Path, doc: Any, match: str) -> None:
    index = _index(tmp_path / "ck", doc)
    for target in (index, index.parent):
        with pytest.raises(TensorFileError, match=match):
            tensorfile.open(target)


@pytest.mark.parametrize(
    "doc", [{"weight_map": {"a": "../secret.safetensors"}}, {"weight_map": {"a": "/secret"}}]
)
def test_hostile_remote_index_requests_nothing_outside_its_folder(tmp_path: Path, doc: Any) -> None:
    _index(tmp_path / "ck", doc)
    (tmp_path / "secret.safetensors").write_bytes(save({"a": np.ones(1, np.uint8)}))
    server, stopper = start_range_server(tmp_path, tmp_path / "log")
    try:
        with pytest.raises(TensorFileError, match="not a plain file name"):
            tensorfile.open(f"{server.url}/ck/{INDEX}")
        assert set(_requested(server)) == {f"/ck/{INDEX}"}
    finally:
        stopper.terminate()


def test_oversize_index_is_refused_unread(tmp_path: Path) -> None:
    index = _index(tmp_path / "ck", b"")
    with open(index, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: nothing is written, and nothing must be read
    with pytest.raises(InvalidArgumentError, match="over tensorfile's 67,108,864-byte limit"):
        tensorfile.open(index)
    server, stopper = start_range_server(tmp_path, tmp_path / "log")
    try:
        with pytest.raises(InvalidArgumentError, match="limit"):
            tensorfile.open(f"{server.url}/ck/{INDEX}")
        assert sum(int(line.split("\t")[4]) for line in (tmp_path / "log").open()) < 1 << 20
    finally:
        stopper.terminate()


def test_shards_that_lie(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "s1.safetensors").write_bytes(save({"a": np.ones(2, np.float32)}))
    (folder / "trunc.safetensors").write_bytes(save({"c": np.ones(100, np.float32)})[:-10])
    (folder / "sub").mkdir()
    (folder / "ztensor.safetensors").write_bytes(b"ZTEN1000" + bytes(64))
    os.symlink("/etc/hostname", folder / "link.safetensors")
    index = _index(
        folder,
        {
            "weight_map": {
                "a": "s1.safetensors",
                "b": "s1.safetensors",  # s1 does not hold b
                "c": "trunc.safetensors",
                "d": "gone.safetensors",
                "e": "sub",
                "f": "ztensor.safetensors",
                "g": INDEX,
            }
        },
    )
    with tensorfile.open(index) as ck:
        assert ck.get_tensor("a").tolist() == [1, 1]
        for name, match in [
            ("b", r"places tensor 'b' in s1\.safetensors, which does not hold it"),
            ("c", r"shard trunc\.safetensors: .*end of file"),
            ("d", r"shard gone\.safetensors"),
            ("e", r"shard sub: .*directory"),
            ("f", r"shard ztensor\.safetensors"),
            ("g", rf"shard {INDEX}"),
        ]:
            with pytest.raises(TensorFileError, match=match):
                ck.get_tensor(name)
    _index(folder, {"weight_map": {"a": "link.safetensors"}})
    with pytest.raises(InvalidArgumentError, match="outside the checkpoint's folder"):
        tensorfile.open(index)


def test_index_metadata_that_is_not_text_is_shown_as_json(tmp_path: Path) -> None:
    save_sharded({"a": np.ones(2, np.float32)}, tmp_path, max_shard_size=4)
    doc = {"metadata": {"total_size": "lots", "n": 3, "l": [1]}, "weight_map": {}}
    with tensorfile.open(_index(tmp_path, doc)) as ck:
        assert ck.metadata == {"n": "3", "l": "[1]"} and ck.total_size is None
        assert ck.keys() == []


def test_metadata_is_the_index_and_what_every_shard_agrees_on(tmp_path: Path) -> None:
    from tensorfile.safetensors.numpy import save_file

    folder = tmp_path / "ck"
    folder.mkdir()
    save_file({"a": np.ones(2, np.float32)}, folder / "s1.safetensors",
              metadata={"format": "pt", "step": "1", "who": "shard"})  # fmt: skip
    save_file({"b": np.ones(2, np.float32)}, folder / "s2.safetensors",
              metadata={"format": "pt", "step": "2", "who": "shard"})  # fmt: skip
    doc = {"metadata": {"total_size": 16, "who": "index", "n": 3},
           "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}  # fmt: skip
    (folder / INDEX).write_text(json.dumps(doc))
    for target in (str(folder), f"file://{folder / INDEX}"):
        with tensorfile.open(target) as ck:
            # the index's (total_size apart, kept as .total_size) wins; "step" differs
            assert ck.metadata == {"who": "index", "n": "3", "format": "pt"}
            assert ck.total_size == 16
    fs = fsspec.filesystem("memory")
    for f in folder.iterdir():
        fs.pipe(f"/mdck/{f.name}", f.read_bytes())
    try:
        with tensorfile.open(f"memory://mdck/{INDEX}") as ck:
            assert ck.metadata == {"who": "index", "n": "3", "format": "pt"}
        # every door sees the same metadata
        assert read_metadata(f"memory://mdck/{INDEX}") == ck.metadata
    finally:
        fs.rm("/mdck", recursive=True)


@pytest.mark.parametrize("how", ["index", "folder"])
def test_file_urls_keep_the_folder_rule(tmp_path: Path, how: str) -> None:
    """A file:// URL is held to the local rules: a shard that links out of the checkpoint's
    folder is refused by every door (open, verify, inspect, convert, the CLI), as for the
    plain path."""
    from tensorfile.ops import convert

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.safetensors").write_bytes(save({"secret": np.ones(2, np.float32)}))
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "model-1.safetensors").symlink_to(outside / "victim.safetensors")
    (folder / INDEX).write_text(json.dumps({"weight_map": {"secret": "model-1.safetensors"}}))
    url = f"file://{folder / INDEX if how == 'index' else folder}"
    doors: list[Any] = [
        tensorfile.open,
        tensorfile.verify,
        tensorfile.inspect,
        lambda u: convert(u, str(tmp_path / "out.safetensors")),
    ]
    for door in doors:
        with pytest.raises(InvalidArgumentError, match="outside the checkpoint's folder"):
            door(url)
    assert not (tmp_path / "out.safetensors").exists()
    assert main(["id", "--content", url]) == 2


def test_a_shard_that_is_no_safetensors_file_fails_verify_as_open_refuses_it(
    tmp_path: Path,
) -> None:
    """verify reads shards as the checkpoint's reader does (safetensors, whatever the
    content): an npz named like a shard is unreadable, never 'OK'."""
    import io

    save_sharded(ARRAYS, tmp_path, max_shard_size="500B")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[1]
    buf = io.BytesIO()
    np.savez(buf, **{n: ARRAYS[n] for n in ("t1",)})
    shard.write_bytes(buf.getvalue())
    report = tensorfile.verify(str(tmp_path))
    assert not report.ok and "unreadable" in {f.rule for f in report.failures}
    with pytest.raises(TensorFileError), tensorfile.open(str(tmp_path)) as ck:
        ck.get_tensors()


def test_the_sharded_reader_keeps_the_reader_contract(ckpt: Path) -> None:
    from tensorfile.errors import InvalidTypeError, UnsupportedError

    with tensorfile.open(str(ckpt)) as ck:
        with pytest.raises(InvalidTypeError):
            ck.info(["t1"])  # type: ignore[arg-type]
        assert ["t1"] not in ck
        with pytest.raises(UnsupportedError, match="one source per shard"):
            _ = ck.source
        got = ck.read_into(["t4", "t0"], lambda info: _numpy_slot(info))
        assert np.array_equal(got[0], ARRAYS["t4"]) and np.array_equal(got[1], ARRAYS["t0"])


def _numpy_slot(info: Any) -> Any:
    from tensorfile.core.reader import numpy_allocator

    return numpy_allocator(info)


def test_a_cache_dir_refusal_shows_no_credentials_of_the_index_url(tmp_path: Path) -> None:
    """review35g g06: the refusal of ``cache_dir=`` for a remote index named the URL whole,
    its password and its presigned signature with it; no request is made."""
    url = f"https://alice:hunter2-pw@127.0.0.1:9/m/{INDEX}?sig=SECRETSIG"
    with pytest.raises(InvalidArgumentError, match="cache_dir= applies to single files") as caught:
        tensorfile.open(url, cache_dir=str(tmp_path))
    said = str(caught.value)
    assert "hunter2-pw" not in said and "SECRETSIG" not in said, said
    assert said.startswith(f"https://127.0.0.1:9/m/{INDEX}: "), said
