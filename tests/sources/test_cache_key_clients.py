"""A cache key names exactly what the client fetches: for every client that reads a URL
(tensorfile's HTTP client, fsspec's HTTP client (``yarl``), fsspec's ``ftp``/``sftp``/``smb``
parser, s3fs, the memory filesystem), the URL the key keeps (:func:`identity`) leads the
client to the same host and path as the URL itself, ``@`` in the path or the password
included. Two URLs of one key are then one object; never two (a read of one would fill the
other's entries)."""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest
import s3fs
import yarl
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.utils import infer_storage_options

from tensorfile.sources import CachedSource, open_path
from tensorfile.sources.cache.keys import identity
from tensorfile.sources.cache.settings import CACHE_CHUNK_ENV, CACHE_DIR_ENV
from tensorfile.sources.http._urls import parse_http_url
from tests.helpers.hostile_http import HostileServer, Request, Respond, parse_range, reply

AT_URLS = [
    "{}://EVIL/x@GOOD/f.bin",
    "{}://user:p@ss@host/f.bin",
    "{}://a@b@c:81/d@e/f.bin",
    "{}://u:p@host:82/f.bin?part=1#x@y",
]


def _tensorfile_http(url: str) -> object:
    u = parse_http_url(url)
    return u.host, u.port, u.target


def _fsspec_http(url: str) -> object:  # (aiohttp's URL)
    u = yarl.URL(url)
    return u.host, u.port, u.path_qs


def _fsspec_userinfo(url: str) -> object:  # (ftp, sftp, smb, webhdfs: fsspec's own parser)
    o = infer_storage_options(url)
    return o.get("host"), o.get("port"), o["path"]


def _s3fs(url: str) -> object:
    fs = s3fs.S3FileSystem(anon=True, skip_instance_cache=True)
    return fs.split_path(fs._strip_protocol(url))


def _memory(url: str) -> object:
    return MemoryFileSystem._strip_protocol(url)


CLIENTS = [
    ("http", _tensorfile_http),
    ("https", _tensorfile_http),
    ("http", _fsspec_http),
    ("simplecache::https", _fsspec_http),
    ("ftp", _fsspec_userinfo),
    ("sftp", _fsspec_userinfo),
    ("smb", _fsspec_userinfo),
    ("s3", _s3fs),
    ("memory", _memory),
]


@pytest.mark.parametrize("form", AT_URLS)
@pytest.mark.parametrize(("scheme", "client"), CLIENTS, ids=lambda c: getattr(c, "__name__", c))
def test_the_key_leads_the_client_where_the_url_does(
    scheme: str, client: Callable[[str], object], form: str
) -> None:
    url = form.format(scheme)
    kept = identity(url)
    if "::" in scheme:  # (a chain: its last URL is the one the client reads)
        url, kept = url.rpartition("::")[2], kept.rpartition("::")[2]
    assert client(kept) == client(url)  # the same host, port and path


@pytest.fixture
def _cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_CHUNK_ENV, "64KiB")


@pytest.mark.usefixtures("_cache_env")
def test_an_at_in_a_memory_path_is_another_file(tmp_path: Path) -> None:
    # memory://a@x/f.bin and memory://b@x/f.bin are two files (paths /a@x/... and /b@x/...);
    # with the same size and time they were keyed alike, and b's read served a's bytes
    fs = fsspec.filesystem("memory")
    a, b = os.urandom(1000), os.urandom(1000)
    fs.pipe("/a@keys/f.bin", a)
    fs.pipe("/b@keys/f.bin", b)
    fs.store["/b@keys/f.bin"].created = fs.store["/a@keys/f.bin"].created  # (same version)
    for url, data in (("memory://a@keys/f.bin", a), ("memory://b@keys/f.bin", b)):
        with open_path(url, cache_dir=str(tmp_path)) as src:
            assert isinstance(src, CachedSource)
            assert src.read(0, 1000) == data


def _answering(data: bytes, seen: list[Request]) -> Respond:
    def respond(request: Request, conn: socket.socket) -> bool:
        seen.append(request)
        start, stop = parse_range(request.headers.get("range"), len(data)) or (0, len(data))
        head = {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
                "Content-Length": str(stop - start), "ETag": '"v1"'}  # fmt: skip
        conn.sendall(reply(206, head, data[start:stop]))
        return True

    return respond


@pytest.mark.usefixtures("_cache_env")
def test_a_password_with_an_at_keys_the_host_it_is_sent_to(tmp_path: Path) -> None:
    # http://user:p@ss@HOST/f.bin goes to HOST, as user "user" with password "p@ss": its key
    # is HOST's /f.bin, so the same file read without credentials is all hits
    data, seen = os.urandom(200_000), list[Request]()
    with HostileServer(_answering(data, seen)) as server:
        host = server.url.partition("://")[2]
        with open_path(f"http://user:p@ss@{host}/f.bin", cache_dir=str(tmp_path)) as src:
            assert isinstance(src, CachedSource) and src.read(0, len(data)) == data
        assert seen and all(r.target == "/f.bin" for r in seen)
        auth = "Basic " + base64.b64encode(b"user:p@ss").decode()
        assert all(r.headers.get("authorization") == auth for r in seen)
        with open_path(f"{server.url}/f.bin", cache_dir=str(tmp_path)) as src:
            assert isinstance(src, CachedSource) and src.read(0, len(data)) == data
            assert src.cache_stats.misses == 0 and src.cache_stats.hits == 4
