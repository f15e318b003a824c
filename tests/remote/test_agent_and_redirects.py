"""Every request says ``User-Agent: tensorfile/<version>``; a permanent redirect (301, 308) is
remembered by the reader that met it, a temporary one (302, 307) followed every time. Counted
per path in nginx's access log (``/permanent/``, ``/p308/``, ``/moved/``, ``/t307/`` redirect
to the same path without the prefix: tests.helpers.servers.REDIRECTS)."""

from __future__ import annotations

import socket
from collections import Counter
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile._version import __version__
from tensorfile.safetensors.numpy import save_file
from tensorfile.sources import HTTPSource
from tests.helpers.hostile_http import ForwardProxy, HostileServer, Request, reply, serve_bytes
from tests.helpers.servers import REDIRECTS

AGENT = f"tensorfile/{__version__}"
# three tensors past the first 100,000 bytes: three requests after the header's
ARRAYS = {f"t{i}": np.full(40_000, i, np.float32) for i in range(3)}


@pytest.fixture
def model(nginx: Any) -> str:
    save_file(ARRAYS, str(nginx.root / "redirected.safetensors"))
    nginx.reset()
    return "redirected.safetensors"


def _read_all(url: str) -> int:
    """Read every tensor of ``url``; returns the requests it cost."""
    with tensorfile.open(url) as f:
        for name, arr in ARRAYS.items():
            np.testing.assert_array_equal(f.get_tensor(name), arr)
        requests: int = f.source.stats.requests
    return requests


@pytest.mark.parametrize("prefix", ["/permanent/", "/p308/"])
def test_a_permanent_redirect_is_followed_once_per_reader(
    nginx: Any, model: str, prefix: str
) -> None:
    assert REDIRECTS[prefix] in (301, 308)
    requests = _read_all(f"{nginx.url}{prefix}{model}")
    by_path = Counter((r.uri, r.status) for r in nginx.requests())
    assert by_path == {
        (f"{prefix}{model}", REDIRECTS[prefix]): 1,
        (f"/{model}", 206): 4,  # the header, then each tensor
    }
    assert requests == 5
    nginx.reset()
    _read_all(f"{nginx.url}{prefix}{model}")  # another reader: the redirect once again
    assert Counter(r.uri for r in nginx.requests())[f"{prefix}{model}"] == 1


@pytest.mark.parametrize("prefix", ["/moved/", "/t307/"])
def test_a_temporary_redirect_is_followed_every_time(nginx: Any, model: str, prefix: str) -> None:
    assert REDIRECTS[prefix] in (302, 307)
    requests = _read_all(f"{nginx.url}{prefix}{model}")
    by_path = Counter((r.uri, r.status) for r in nginx.requests())
    assert by_path == {(f"{prefix}{model}", REDIRECTS[prefix]): 4, (f"/{model}", 206): 4}
    assert requests == 8


def test_a_permanent_redirect_after_a_temporary_one_is_not_remembered() -> None:
    data = bytes(range(256)) * 1000

    def respond(request: Request, conn: socket.socket) -> bool:
        if request.target == "/a":
            conn.sendall(reply(302, {"Location": "/b", "Content-Length": "0"}))
            return True
        if request.target == "/b":
            conn.sendall(reply(301, {"Location": "/c", "Content-Length": "0"}))
            return True
        return serve_bytes(data)(request, conn)

    with HostileServer(respond) as server:
        with HTTPSource(f"{server.url}/a", retries=0, timeout=5) as src:
            src.read(200_000, 10)
            src.read(150_000, 10)
        targets = Counter(r.target for r in server.requests)
    assert targets == {"/a": 3, "/b": 3, "/c": 3}


def test_every_request_carries_the_user_agent() -> None:
    data = bytes(range(256)) * 1000
    with HostileServer(serve_bytes(data)) as server:
        with HTTPSource(f"{server.url}/m.bin", retries=0, timeout=5) as src:
            src.read(200_000, 10)
            src.read(0, 10)
        assert len(server.requests) == 2
        assert {r.headers.get("user-agent") for r in server.requests} == {AGENT}
    with HostileServer(serve_bytes(data)) as server:
        HTTPSource(f"{server.url}/m.bin", headers={"user-agent": "mine/1"}, retries=0)
        assert server.requests[0].headers["user-agent"] == "mine/1"


def test_the_proxy_sees_the_user_agent(monkeypatch: Any) -> None:
    data = bytes(100)
    with HostileServer(serve_bytes(data)) as origin, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "")
        monkeypatch.setenv("no_proxy", "")
        assert HTTPSource(f"{origin.url}/m.bin", retries=0, timeout=5).read(0, 100) == data
        assert proxy.agents == [AGENT]
        assert origin.requests[0].headers["user-agent"] == AGENT


def test_the_tunnel_sees_the_user_agent(tmp_path: Any, monkeypatch: Any) -> None:
    from tests.helpers.hostile_http import self_signed, start_https_range_server

    pair = self_signed(tmp_path)
    if pair is None:
        pytest.skip("no openssl")
    cert, key = pair
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "m.bin").write_bytes(bytes(100))
    server, stopper = start_https_range_server(tmp_path / "www", tmp_path / "log", cert, key)
    try:
        with ForwardProxy() as proxy:
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            monkeypatch.setenv("HTTPS_PROXY", proxy.url)
            monkeypatch.setenv("NO_PROXY", "")
            monkeypatch.setenv("no_proxy", "")
            HTTPSource(f"{server.url}/m.bin", retries=0, timeout=5).read(0, 10)
            assert proxy.lines[0].startswith("CONNECT ") and proxy.agents == [AGENT]
    finally:
        stopper.terminate()
