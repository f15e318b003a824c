"""One router decides once: ``open_path(url)`` and ``store_for(folder).open_source(name)``
read a file with the same kind of source, for every kind of location: a local path, an
``http(s)://`` URL (the HTTP transport; nginx on 127.0.0.1), an ``s3://`` URL (tensorfile's
own S3 client on a real S3 server, moto in server mode; s3fs where that client declines the
options) and an fsspec URL (``memory://``)."""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tensorfile.errors import InvalidArgumentError
from tensorfile.sources import Source, open_path, store_for
from tensorfile.sources.http.remote import HTTP_OPTIONS, HTTPSource
from tensorfile.sources.s3.s3_source import S3Source
from tensorfile.sources.stores.fsspec_source import FsspecSource
from tests.helpers.servers import Server

DATA = bytes(range(256)) * 8


def _both(folder: str, options: dict[str, Any]) -> tuple[Source, Source]:
    """The source of ``folder/f.bin`` through the router and through the folder's store."""
    by_path = open_path(f"{folder}/f.bin", **options)
    by_store = store_for(folder, options or None).open_source("f.bin")
    return by_path, by_store


def _same(by_path: Source, by_store: Source) -> type:
    try:
        assert type(by_path) is type(by_store)
        for src in (by_path, by_store):
            assert src.size == len(DATA)
            assert src.read(100, 300) == DATA[100:400]
        return type(by_path)
    finally:
        by_path.close()
        by_store.close()


def test_a_local_folder(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(DATA)
    assert _same(*_both(str(tmp_path), {})).__name__ == "LocalSource"
    assert _same(*_both(f"file://{tmp_path}", {})).__name__ == "LocalSource"


def test_an_http_folder(nginx: Server) -> None:
    place = f"routes-{uuid.uuid4().hex[:8]}"
    (nginx.root / place).mkdir()
    (nginx.root / place / "f.bin").write_bytes(DATA)
    assert _same(*_both(f"{nginx.url}/{place}", {})).__name__ == "HTTPSource"


def test_a_memory_folder() -> None:
    place = f"routes-{uuid.uuid4().hex[:8]}"
    fsspec.filesystem("memory").pipe(f"/{place}/f.bin", DATA)
    assert _same(*_both(f"memory://{place}", {})) is FsspecSource


def test_an_s3_folder(s3: Any) -> None:
    bucket = s3.bucket()
    s3.fs.pipe(f"{bucket}/ds/f.bin", DATA)
    folder = s3.url(bucket, "ds")
    assert _same(*_both(folder, s3.options)) is S3Source
    # options tensorfile's client does not take: s3fs, both ways
    declined = {**s3.options, "requester_pays": False}
    assert _same(*_both(folder, declined)) is FsspecSource


def test_an_s3_folder_with_the_client_switched_off(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.bucket()
    s3.fs.pipe(f"{bucket}/ds/f.bin", DATA)
    monkeypatch.setenv("TENSORFILE_S3", "fsspec")
    assert _same(*_both(s3.url(bucket, "ds"), s3.options)) is FsspecSource


def test_http_options_the_transport_does_not_take_are_refused_both_ways(nginx: Server) -> None:
    """An ``http(s)://`` file is read by the HTTP transport alone (its checks hold: a server
    that ignores ``Range`` is read only so far): an option it does not take is an error
    through the router and through a store alike, not a TypeError or a silent other client."""
    place = f"routes-{uuid.uuid4().hex[:8]}"
    (nginx.root / place).mkdir()
    (nginx.root / place / "f.bin").write_bytes(DATA)
    folder = f"{nginx.url}/{place}"
    with pytest.raises(InvalidArgumentError, match="client_kwargs"):
        open_path(f"{folder}/f.bin", client_kwargs={})
    with pytest.raises(InvalidArgumentError, match="client_kwargs"):
        store_for(folder, {"client_kwargs": {}}).open_source("f.bin")
    # the options it takes are every keyword of HTTPSource but the first request
    taken = set(inspect.signature(HTTPSource).parameters) - {"url", "first"}
    assert taken == HTTP_OPTIONS
    assert _same(*_both(folder, {"timeout": 5.0, "retries": 1})) is HTTPSource
