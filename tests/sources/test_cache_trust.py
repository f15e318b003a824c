"""The chunk cache against other local users: a lock of the cache folder held by another
process (any user who can read the folder can ``flock`` it) never hangs a load, and a folder
another user could write in never decides the bytes a load returns (a chunk planted from
public facts: the URL, the ETag, the size)."""

from __future__ import annotations

import os
import stat
import struct
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfile.sources import CacheWarning, open_path
from tensorfile.sources.cache import guards
from tensorfile.sources.cache._chunkdir import LAYOUT, ChunkHeader, cache_key
from tensorfile.sources.cache.keys import endpoint_id
from tensorfile.sources.cache.settings import CACHE_CHUNK_ENV, CACHE_DIR_ENV, MIN_CHUNK
from tests.helpers.locks import held_lock, within
from tests.helpers.servers import Server, start_range_server

SIZE = 3 * MIN_CHUNK
GOOD, EVIL = bytes(range(256)) * (SIZE // 256), b"E" * SIZE


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_CHUNK_ENV, str(MIN_CHUNK))
    monkeypatch.setattr(guards, "LOCK_WAIT", 0.5)  # (5 s by default)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("served")
    for name in ("a.bin", "b.bin"):
        (root / name).write_bytes(GOOD)
    srv, stop = start_range_server(root, root.parent / "log", etag=True)
    yield srv
    stop.terminate()


def _read(url: str, cache: Path) -> tuple[bytes, list[str]]:
    """The whole file read through the cache folder ``cache``, and the CacheWarnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_path(url, cache_dir=str(cache)) as src:
            data = src.read(0, SIZE)
    return data, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _plant(url: str, cache: Path, *, mode: int = 0o644) -> Path:
    """Forge chunk 0 of ``url`` in ``cache`` from public facts (the URL, the ETag, the size)."""
    with open_path(url) as src:
        etag = src.version  # type: ignore[attr-defined]
    key = cache_key(url, etag, SIZE, MIN_CHUNK, endpoint_id({}, None))
    head = ChunkHeader(bytes.fromhex(key[:14]), 0, MIN_CHUNK, zlib.crc32(EVIL[:MIN_CHUNK]))
    chunk = cache / LAYOUT / key / "0.chunk"
    chunk.parent.mkdir(parents=True, exist_ok=True)
    chunk.write_bytes(head.pack() + EVIL[:MIN_CHUNK])
    chunk.chmod(mode)
    return chunk


def test_a_held_cache_lock_never_hangs_a_load(server: Server, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    assert _read(f"{server.url}/a.bin", cache) == (GOOD, [])
    lock = cache / ".lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600  # (no other user can open it)
    lock.chmod(0o644)  # (as an older version made it: any user could open it)
    with held_lock(lock):  # the next load has chunks to write: it needs the lock
        data, said = within(30, lambda: _read(f"{server.url}/b.bin", cache))
    assert data == GOOD
    assert len(said) == 1 and ".lock" in said[0] and str(cache) in said[0]
    assert "held by another process" in said[0] and "bypasses the cache" in said[0]
    assert _read(f"{server.url}/b.bin", cache) == (GOOD, [])  # let go: the cache works again
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def _refused(said: list[str], folder: Path, why: str) -> None:
    assert len(said) == 1, said
    assert f"the cache folder {folder} is" in said[0] and why in said[0]
    assert "bypasses the cache" in said[0] and "chmod go-w" in said[0]


@pytest.mark.parametrize("where", ["cache folder", "layout folder"])
def test_a_cache_folder_others_can_write_is_not_used(
    server: Server, tmp_path: Path, where: str
) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "shared"
    chunk = _plant(url, cache)
    folder = cache if where == "cache folder" else cache / LAYOUT
    folder.chmod(0o777)  # (as another user makes a shared folder: anyone may plant)
    data, said = _read(url, cache)
    assert data == GOOD
    _refused(said, folder, "mode 0777: writable by every user")
    assert chunk.read_bytes().endswith(EVIL[:MIN_CHUNK])  # (not ours to heal: left alone)
    assert sorted(p.name for p in chunk.parent.iterdir()) == ["0.chunk"]  # nothing written


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_cache_folder_is_not_used(server: Server, tmp_path: Path) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "theirs"
    _plant(url, cache)
    for path in (cache, *cache.rglob("*")):
        os.chown(path, 65534, 65534)  # (nobody: mode 0755, not writable by us)
    data, said = _read(url, cache)
    assert data == GOOD
    _refused(said, cache, "uid 65534")


@pytest.mark.parametrize("what", ["chunk folder", "chunk file"])
def test_an_entry_others_can_write_in_our_folder_is_removed(
    server: Server, tmp_path: Path, what: str
) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "c"
    chunk = _plant(url, cache)
    if what == "chunk folder":
        chunk.parent.chmod(0o777)
    else:
        chunk.chmod(0o666)
    assert _read(url, cache) == (GOOD, [])  # removed as damaged, fetched again
    assert chunk.read_bytes().endswith(GOOD[:MIN_CHUNK])
    assert stat.S_IMODE(chunk.parent.stat().st_mode) & 0o022 == 0


def test_a_folder_writable_by_your_own_group_is_not_used(server: Server, tmp_path: Path) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "c"
    chunk = _plant(url, cache)
    os.chown(cache, -1, os.getegid())
    cache.chmod(0o775)  # (a group of one's own may hold other users: `users`, umask 002)
    data, said = _read(url, cache)
    assert data == GOOD
    _refused(said, cache, f"mode 0775: writable by its group (gid {os.getegid()})")
    assert chunk.read_bytes().endswith(EVIL[:MIN_CHUNK])


def _acl(*entries: tuple[int, int, int]) -> bytes:
    """A POSIX ACL as the kernel stores it in ``system.posix_acl_*`` (version 2, then
    tag, permissions and id per entry)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


_ANY = 0xFFFFFFFF
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20


@pytest.mark.parametrize(
    ("name", "mask", "why"),
    [
        ("system.posix_acl_access", 7, "mode 0775: writable by its group"),
        ("system.posix_acl_access", 5, "mode 0755: it carries an extended POSIX ACL"),
        ("system.posix_acl_default", 7, "mode 0755: it carries a default POSIX ACL"),
    ],
)
def test_a_cache_folder_with_an_acl_for_another_user_is_not_used(
    server: Server, tmp_path: Path, name: str, mask: int, why: str
) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "c"
    chunk = _plant(url, cache)
    cache.chmod(0o755)
    acl = _acl(
        (_USER_OBJ, 7, _ANY), (_USER, 7, 65534), (_GROUP_OBJ, 5, _ANY), (_MASK, mask, _ANY),
        (_OTHER, 5, _ANY),
    )  # fmt: skip
    try:
        os.setxattr(cache, name, acl)  # (as setfacl -m u:nobody:rwx does)
    except OSError as exc:
        pytest.skip(f"the file system of {tmp_path} refuses POSIX ACLs: {exc.strerror}")
    data, said = _read(url, cache)
    assert data == GOOD
    _refused(said, cache, why)
    assert chunk.read_bytes().endswith(EVIL[:MIN_CHUNK])


def test_a_cache_made_under_umask_002_is_used(server: Server, tmp_path: Path) -> None:
    url, cache = f"{server.url}/a.bin", tmp_path / "c"
    old = os.umask(0o002)
    try:
        assert _read(url, cache) == (GOOD, [])
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            with open_path(url, cache_dir=str(cache)) as src:
                assert src.read(0, SIZE) == GOOD
                assert src.cache_stats.hits == 3  # type: ignore[attr-defined]
    finally:
        os.umask(old)
    made = [cache, *cache.rglob("*")]
    assert len([p for p in made if p.name.endswith(".chunk")]) == 3
    assert all(stat.S_IMODE(p.lstat().st_mode) & 0o022 == 0 for p in made), made


def test_an_entry_is_never_writable_by_others_not_even_while_it_is_made(tmp_path: Path) -> None:
    """Review e03: an entry's temporary file was made 0666 less the umask (0664 under 002,
    0666 under 0) and only then set to 0644: in that window a user of the group could open
    it for writing and keep writing into the committed entry. Under umask 0, the kind of
    file :func:`new_temp` makes is 0600 as it is created, and the entry ENTRY_MODE after."""
    from tensorfile.sources.cache import files

    old = os.umask(0)
    try:
        tmp = files.new_temp(str(tmp_path / "e.shard"), 16)
        files.end_temp(tmp, commit=True)
        fresh = type(tmp)(str(tmp_path / "f.shard"))  # the same kind, seen as it is created
        created = stat.S_IMODE(os.fstat(fresh.fd).st_mode)
        fresh.abort()
    finally:
        os.umask(old)
    assert created == 0o600, oct(created)
    assert stat.S_IMODE(os.stat(tmp_path / "e.shard").st_mode) == files.ENTRY_MODE


def test_your_own_symlink_as_the_cache_folder_is_followed(server: Server, tmp_path: Path) -> None:
    """~/.cache/tensorfile -> /data/cache: a link of one's own is the user's choice."""
    url, target = f"{server.url}/a.bin", tmp_path / "data-cache"
    target.mkdir(mode=0o700)
    os.symlink(target, tmp_path / "c")
    assert _read(url, tmp_path / "c") == (GOOD, [])
    assert (target / LAYOUT).is_dir() and (tmp_path / "c").is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="a symlink owned by another user needs root")
def test_a_symlink_another_user_planted_at_the_cache_path_is_not_followed(
    server: Server, tmp_path: Path
) -> None:
    """Review e04: $TENSORFILE_CACHE_DIR names a path not made yet, in a folder others can
    write; another user plants a symlink there to a folder of the victim's. The cache is not
    made in that folder: the read bypasses the cache, with the distrust warning."""
    url, precious = f"{server.url}/a.bin", tmp_path / "precious"
    precious.mkdir(mode=0o700)
    (precious / "notes.txt").write_text("the victim's")
    planted = tmp_path / "tfcache"
    os.symlink(precious, planted)
    os.lchown(planted, 65534, 65534)  # (nobody's link, to a folder of ours)
    data, said = _read(url, planted)
    assert data == GOOD
    _refused(said, planted, "a symlink owned by")
    assert "uid 65534" in said[0] and str(precious) in said[0]
    assert sorted(os.listdir(precious)) == ["notes.txt"]
