"""What identifies a remote file's content (``RemoteSource.version``): the ETag of the first
reply; a file replaced between two reads (another ETag) is an error, never mixed bytes."""

from __future__ import annotations

import socket
from typing import Any

import fsspec
import pytest

from tensorfile.errors import SourceError
from tensorfile.sources import HTTPSource
from tensorfile.sources.stores.fsspec_source import FsspecSource
from tests.helpers.hostile_http import HostileServer, Request, parse_range, reply

DATA = bytes(range(256)) * 1024  # 256 KiB: more than the first read


def _tagged(tags: list[str | None]) -> Any:
    """Honest ranges of DATA; the n-th reply carries ``tags[n]`` (the last one after that)."""
    count = [0]

    def respond(request: Request, conn: socket.socket) -> bool:
        tag = tags[min(count[0], len(tags) - 1)]
        count[0] += 1
        rng = parse_range(request.headers.get("range"), len(DATA)) or (0, len(DATA))
        start, stop = rng
        headers = {
            "Content-Range": f"bytes {start}-{stop - 1}/{len(DATA)}",
            "Content-Length": str(stop - start),
        }
        if tag is not None:
            headers["ETag"] = tag
        conn.sendall(reply(206, headers, DATA[start:stop]))
        return True

    return respond


def test_version_is_the_first_etag(nginx: Any) -> None:
    (nginx.root / "v.bin").write_bytes(DATA)
    with HTTPSource(f"{nginx.url}/v.bin") as src:
        assert src.version is not None and src.version.startswith('"')
        assert src.read(200_000, 10) == DATA[200_000:200_010]


def test_a_changed_etag_is_an_error() -> None:
    with HostileServer(_tagged(['"a"', '"b"'])) as server:
        src = HTTPSource(f"{server.url}/x.bin", retries=0)
        assert src.version == '"a"'
        with pytest.raises(SourceError, match=r"changed while it was being read.*\"a\".*\"b\""):
            src.read(200_000, 10)
        src.close()


def test_no_etag_means_no_version() -> None:
    with HostileServer(_tagged([None])) as server:
        with HTTPSource(f"{server.url}/x.bin") as src:
            assert src.version is None
            assert src.read(200_000, 4) == DATA[200_000:200_004]


def test_a_dropped_etag_later_is_refused() -> None:
    """A later reply without the ETag cannot show its bytes are the same version's (a node
    behind a load balancer serving a new file): refused, never returned or cached."""
    with HostileServer(_tagged(['"a"', None])) as server:
        with HTTPSource(f"{server.url}/x.bin", retries=0) as src:
            assert src.version == '"a"'
            with pytest.raises(SourceError, match="then a reply without one"):
                src.read(200_000, 4)


def test_fsspec_version_from_info() -> None:
    fsspec.filesystem("memory").pipe("/versions/x.bin", DATA)
    with FsspecSource("memory://versions/x.bin") as src:
        assert src.version is not None and src.version.startswith("mtime:")
