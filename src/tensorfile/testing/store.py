"""The conformance suite of a :class:`~tensorfile.sources.Store`, in the style of
zarr-python's ``zarr.testing.store.StoreTests``: subclass :class:`StoreConformance` in a
test module, give it a new empty store (:meth:`~StoreConformance.make_store`, or override
the ``store`` fixture when making one needs other fixtures), and pytest runs every test
below against that store. A new store is added to tensorfile, or to another project, by
passing them.

What every store does alike, asserted below: byte ranges read back exactly (head, middle,
tail, zero-length) and a range past the end is a :class:`~tensorfile.errors.SourceError`;
sizes are exact, a missing file has none and a folder is not a file; a write publishes a
whole file, and a failed write leaves the file that was there; listings name the files
directly in a folder (and its folders), a file's modification time is now or unknown;
deletes delete; a name that tries to leave the store (``../x``, an
absolute path, a NUL byte) is refused; what a consumer asks instead of a store's class
answers truly (a local path where the files are local, a URL the router's own clients open,
folders made and removed where they are real); an operation whose capability flag is False raises a
:class:`~tensorfile.errors.TensorFileError` and changes nothing; the store survives a pickle
(a Spark job ships it). A read-only store overrides :meth:`~StoreConformance.put` to put its
test files in place behind its back.

Example:
    >>> from tensorfile.sources import MemoryStore
    >>> class TestMemoryStore(StoreConformance):
    ...     def make_store(self) -> MemoryStore:
    ...         return MemoryStore()
    >>> TestMemoryStore().make_store().supports_writes
    True
"""

from __future__ import annotations

import os
import pickle
import random
import time
from collections.abc import Callable, Mapping

import pytest

from ..core.atomic import atomic_write, write_all
from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    TensorFileError,
    UnsupportedError,
)
from ..sources import Store

__all__ = ["StoreConformance"]

ESCAPING_NAMES = ("../x", "/abs/x", "a/../../x", "a/./b", "a//b", "nul\x00x", "..\\x", "", ".")
"""Names that try to leave a store, or are not names: every one is refused."""

FLAGS = ("supports_ranges", "supports_writes", "supports_listing", "supports_deletes")


def content(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


class StoreConformance:
    """The Store contract, for one kind of store: subclasses implement :meth:`make_store`."""

    def make_store(self) -> Store:
        """A new, empty store (writable unless the subclass tests a read-only one)."""
        raise NotImplementedError

    @pytest.fixture
    def store(self) -> Store:
        """The store under test (override to build it from other fixtures)."""
        return self.make_store()

    def put(self, store: Store, name: str, data: bytes) -> None:
        """Put ``data`` at ``name`` for a test to read (a read-only store overrides this)."""
        store.write_atomic(name, data)

    def read(self, store: Store, name: str) -> bytes | None:
        """The whole file ``name``, or None."""
        return store.read_bounded(name, "the file", 1 << 30)

    # -- flags and names ----------------------------------------------------------------------

    def test_flags_are_honest_booleans(self, store: Store) -> None:
        for flag in (*FLAGS, "atomic_publish", "conditional_writes", "is_local", "read_only"):
            assert isinstance(getattr(store, flag), bool), flag
        assert store.supports_ranges
        if store.read_only:
            assert not store.supports_writes
            assert not store.supports_deletes
        assert isinstance(store.url(), str)
        assert store.url()
        assert isinstance(store.url("a/b.bin"), str)

    @pytest.mark.parametrize("name", ESCAPING_NAMES)
    def test_escaping_names_are_refused(self, store: Store, name: str) -> None:
        self.put(store, "a.bin", b"a")
        calls: list[Callable[[], object]] = [
            lambda: store.file_size(name),
            lambda: store.read_bounded(name, "the file", 100),
            lambda: store.open_source(name),
            lambda: store.write_atomic(name, b"x"),
            lambda: store.remove(name),
            lambda: store.move("a.bin", name),
        ]
        for call in calls:
            with pytest.raises(TensorFileError):
                call()
        if name:  # "" is the root folder itself
            with pytest.raises(TensorFileError):
                store.list_files(name)
        assert self.read(store, "a.bin") == b"a"

    # -- sizes and reads ----------------------------------------------------------------------

    def test_missing_files(self, store: Store) -> None:
        assert store.file_size("none.bin") is None
        assert store.read_bounded("none.bin", "the file", 10) is None
        with pytest.raises(SourceError):
            store.open_source("none.bin")

    @pytest.mark.parametrize("size", [0, 1, 4097])
    def test_sizes(self, store: Store, size: int) -> None:
        self.put(store, f"f{size}.bin", content(size))
        assert store.file_size(f"f{size}.bin") == size
        assert self.read(store, f"f{size}.bin") == content(size)

    def test_a_folder_is_not_a_file(self, store: Store) -> None:
        self.put(store, "sub/c.bin", b"c")
        with pytest.raises(SourceError):
            store.file_size("sub")

    def test_read_ranges(self, store: Store) -> None:
        data = content(5000, seed=1)
        self.put(store, "r.bin", data)
        src = store.open_source("r.bin")
        try:
            assert src.size == 5000
            for offset, length in [(0, 10), (2000, 777), (4990, 10), (0, 5000), (5000, 0)]:
                assert src.read(offset, length) == data[offset : offset + length]
            for offset, length in [(4990, 11), (5000, 1), (6000, 0), (-1, 1)]:
                with pytest.raises(SourceError):
                    src.read(offset, length)
        finally:
            src.close()
        assert store.read_range("r.bin", 0, 0) == b""
        assert store.read_range("r.bin", 4999, 1) == data[-1:]
        with pytest.raises(SourceError):
            store.read_range("r.bin", 4999, 2)

    def test_read_bounded_refuses_what_is_over_the_bound(self, store: Store) -> None:
        self.put(store, "m.json", b"{}" * 50)
        assert store.read_bounded("m.json", "the manifest", 100) == b"{}" * 50
        with pytest.raises(FormatError):
            store.read_bounded("m.json", "the manifest", 99)

    def test_check_shard(self, store: Store) -> None:
        self.put(store, "s.bin", b"12345")
        store.check_shard("s.bin", 5)
        assert store.shard("s.bin", 5) is not None
        for name, size in [("s.bin", 6), ("gone.bin", 5), ("../s.bin", 5), ("/s.bin", 5)]:
            with pytest.raises(FormatError):
                store.check_shard(name, size)

    # -- writes -------------------------------------------------------------------------------

    def test_write_publishes_whole_files(self, store: Store) -> None:
        self.put(store, "w.bin", b"old")
        if not store.supports_writes:
            with pytest.raises(UnsupportedError):
                store.write_atomic("w.bin", b"new")
            with pytest.raises(UnsupportedError):
                store.write_file("w.bin", lambda path: None)
            assert self.read(store, "w.bin") == b"old"
            return
        store.write_atomic("w.bin", b"new, longer")
        assert self.read(store, "w.bin") == b"new, longer"
        store.write_atomic("sub/deeper/w.bin", b"")
        assert store.file_size("sub/deeper/w.bin") == 0

    def test_conditional_writes(self, store: Store) -> None:
        """:meth:`Store.write_if` writes only over the version it was given, and a version
        changes with every write of other bytes."""
        from ..core.errors import ConcurrentWriteError

        assert store.version("v.json") is None
        if not store.supports_writes:
            with pytest.raises(UnsupportedError):
                store.write_if("v.json", b"x", None)
            return
        store.write_if("v.json", b"one", None)
        first = store.version("v.json")
        assert isinstance(first, str)
        assert first
        with pytest.raises(ConcurrentWriteError) as caught:
            store.write_if("v.json", b"two", None)  # it exists now
        assert caught.value.changed == "v.json"
        store.write_if("v.json", b"two", first)
        second = store.version("v.json")
        assert second != first
        with pytest.raises(ConcurrentWriteError):
            store.write_if("v.json", b"three", first)  # a version that is gone
        assert self.read(store, "v.json") == b"two"

    def test_write_file(self, store: Store) -> None:
        if not store.supports_writes:
            return  # (refusal asserted by test_write_publishes_whole_files)

        def write(path: str) -> None:
            with atomic_write(path) as fd:
                write_all(fd, memoryview(content(123)))

        assert store.write_file("wf.bin", write) == 123
        assert self.read(store, "wf.bin") == content(123)

    def test_a_failed_write_leaves_the_old_file(self, store: Store) -> None:
        self.put(store, "keep.bin", b"old bytes")
        before = store.list_files() if store.supports_listing else None

        def fail(path: str) -> None:
            with atomic_write(path) as fd:
                write_all(fd, memoryview(b"partial"))
                raise RuntimeError("the writer failed")

        with pytest.raises((RuntimeError, UnsupportedError)):
            store.write_file("keep.bin", fail)
        with pytest.raises(TensorFileError):
            store.upload(os.path.join(os.sep, "no", "such", "local", "file"), "keep.bin")
        assert self.read(store, "keep.bin") == b"old bytes"
        if before is not None:
            assert store.list_files() == before  # no partial file visible

    def test_move(self, store: Store) -> None:
        self.put(store, "a.bin", b"A")
        if not store.supports_writes:
            with pytest.raises(UnsupportedError):
                store.move("a.bin", "b.bin")
            assert store.file_size("b.bin") is None
            return
        store.move("a.bin", "b.bin")
        assert store.file_size("a.bin") is None
        assert self.read(store, "b.bin") == b"A"

    # -- listing and deletes ------------------------------------------------------------------

    def test_listing(self, store: Store) -> None:
        for name in ("b.bin", "a.bin", "sub/c.bin"):
            self.put(store, name, name.encode())
        if not store.supports_listing:
            with pytest.raises(UnsupportedError):
                store.list_files()
            with pytest.raises(UnsupportedError):
                store.list_folders()
            return
        assert store.list_files() == ["a.bin", "b.bin"]
        assert store.list_files("sub") == ["c.bin"]
        assert store.list_files("none") == []
        assert store.list_folders() == ["sub"]
        assert store.list_folders("sub") == store.list_folders("none") == []

    def test_modified(self, store: Store) -> None:
        assert store.modified("none.bin") is None
        before = time.time()
        self.put(store, "m.bin", b"m")
        when = store.modified("m.bin")
        if when is not None:  # (None: the store cannot tell)
            assert before - 5 <= when <= time.time() + 5

    def test_deletes(self, store: Store) -> None:
        for name in ("a.bin", "sub/c.bin", "sub/d/e.bin"):
            self.put(store, name, b"x")
        if not store.supports_deletes:
            with pytest.raises(UnsupportedError):
                store.remove("a.bin")
            with pytest.raises(UnsupportedError):
                store.remove_tree("sub")
            assert store.file_size("a.bin") == 1
            assert store.file_size("sub/c.bin") == 1
            return
        store.remove("a.bin")
        store.remove("a.bin")  # (gone already: no error)
        assert store.file_size("a.bin") is None
        store.remove_tree("sub")
        assert store.file_size("sub/c.bin") is None
        assert store.file_size("sub/d/e.bin") is None
        store.remove_tree("sub")  # (gone already: no error)

    # -- what a consumer asks instead of the class -------------------------------------------

    def test_local_path(self, store: Store) -> None:
        self.put(store, "sub/l.bin", b"local")
        path = store.local_path("sub/l.bin")
        assert (store.local_path() is not None) == store.is_local
        if path is None:
            assert store.local_path("sub") is None
            return
        assert isinstance(path, str)
        assert os.path.isabs(path)
        with open(path, "rb") as f:
            assert f.read() == b"local"
        assert os.path.isdir(store.local_path("sub") or "")
        for name in ESCAPING_NAMES[:3]:
            with pytest.raises(TensorFileError):
                store.local_path(name)

    def test_open_url(self, store: Store) -> None:
        from ..sources import open_path

        data = content(3000, seed=2)
        self.put(store, "u.bin", data)
        assert isinstance(store.options, Mapping)
        url = store.open_url("u.bin")
        if url is None:
            return
        try:
            src = open_path(url, **store.options)  # the router's own client reads it
        except InvalidArgumentError:
            # options only the store's own client takes (fsspec's ``auto_mkdir``...): the
            # caller reads through open_source instead
            return
        try:
            assert src.size == len(data)
            assert src.read(1000, 50) == data[1000:1050]
        finally:
            src.close()
        for name in ESCAPING_NAMES[:3]:
            with pytest.raises(TensorFileError):
                store.open_url(name)

    def test_folders(self, store: Store) -> None:
        self.put(store, "keep.bin", b"k")
        if not store.supports_writes:
            with pytest.raises(UnsupportedError):
                store.make_folder("made", "a folder")
            return
        path = store.make_folder("made", "a folder")
        if path is not None:  # folders are real: there it is, empty
            assert os.path.isdir(path)
            assert path == store.local_path("made")
        self.put(store, "made/f.bin", b"f")
        assert store.remove_empty_folder("made") is False  # a file is in it: it stays
        assert self.read(store, "made/f.bin") == b"f"
        store.remove("made/f.bin")
        assert store.remove_empty_folder("made") is True
        assert store.remove_empty_folder("made") is True  # (gone already)
        if path is not None:
            assert not os.path.exists(path)
        assert self.read(store, "keep.bin") == b"k"
        with pytest.raises(TensorFileError):
            store.make_folder("../out", "a folder")

    # -- shipping -----------------------------------------------------------------------------

    def test_survives_a_pickle(self, store: Store) -> None:
        self.put(store, "p.bin", b"pickled")
        clone = pickle.loads(pickle.dumps(store))
        assert type(clone) is type(store)
        assert clone.url("p.bin") == store.url("p.bin")
        assert clone.read_range("p.bin", 0, 7) == b"pickled"
        for flag in (*FLAGS, "atomic_publish", "read_only"):
            assert getattr(clone, flag) == getattr(store, flag), flag

    def test_errors_are_tensorfile_errors(self, store: Store) -> None:
        self.put(store, "x.bin", b"x")
        with pytest.raises(InvalidArgumentError):
            store.file_size(7)  # type: ignore[arg-type]
        with pytest.raises(SourceError):
            store.read_range("x.bin", 0, 2)
