"""Proxies from the environment (``http_proxy``, ``HTTPS_PROXY``, ``no_proxy``, ...), through
a real forwarding proxy on 127.0.0.1 (tests.helpers.hostile_http.ForwardProxy); and HTTPS,
directly and through a CONNECT tunnel, against a TLS server with a self-signed certificate
trusted through ``$SSL_CERT_FILE``."""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorfile.cli.app import main
from tensorfile.errors import SourceError, UnsupportedError
from tensorfile.sources import HTTPSource
from tests.helpers.hostile_http import (
    ForwardProxy,
    HostileServer,
    Request,
    reply,
    self_signed,
    serve_bytes,
    start_https_range_server,
)
from tests.helpers.servers import Server

DATA = bytes(range(256)) * 2000  # 512,000 bytes: more than the speculative first read
PROXY_PASSWORD = "pr0xy-pw"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def origin() -> Iterator[HostileServer]:
    with HostileServer(serve_bytes(DATA)) as server:
        yield server


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy() as p:
        yield p


def _read_all(url: str) -> bytes:
    with HTTPSource(url, retries=0, timeout=10) as src:
        return src.read(0, src.size)


@pytest.mark.parametrize("var", ["http_proxy", "HTTP_PROXY"])
def test_plain_http_goes_through_the_proxy(
    var: str, origin: HostileServer, proxy: ForwardProxy, monkeypatch: Any
) -> None:
    monkeypatch.setenv(var, proxy.url)
    assert _read_all(f"{origin.url}/m.bin") == DATA
    assert proxy.requests == len(origin.requests) >= 2
    assert all(line.startswith(f"GET {origin.url}/m.bin") for line in proxy.lines)  # absolute
    assert all(r.headers["host"] == f"127.0.0.1:{origin.port}" for r in origin.requests)


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "localhost,127.0.0.1", "*", "127.0.0.1:{port}"])
@pytest.mark.parametrize("var", ["no_proxy", "NO_PROXY"])
def test_no_proxy_bypasses_the_proxy(
    var: str, no_proxy: str, origin: HostileServer, proxy: ForwardProxy, monkeypatch: Any
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv(var, no_proxy.format(port=origin.port))
    assert _read_all(f"{origin.url}/m.bin") == DATA
    assert proxy.requests == 0 and origin.requests


def test_proxy_credentials_are_sent_and_never_shown(
    origin: HostileServer, monkeypatch: Any, capsys: Any
) -> None:
    with ForwardProxy(require=_basic("bob", PROXY_PASSWORD)) as proxy:
        monkeypatch.setenv("http_proxy", f"http://bob:{PROXY_PASSWORD}@127.0.0.1:{proxy.port}")
        assert _read_all(f"{origin.url}/m.bin") == DATA
        assert set(proxy.auth) == {_basic("bob", PROXY_PASSWORD)}
        assert all("proxy-authorization" not in r.headers for r in origin.requests)
        monkeypatch.setenv(
            "http_proxy", f"http://bob:wrong-{PROXY_PASSWORD}@127.0.0.1:{proxy.port}"
        )
        with pytest.raises(SourceError, match="407") as info:
            HTTPSource(f"{origin.url}/m.bin", retries=0)
        assert PROXY_PASSWORD not in str(info.value)
        assert main(["inspect", f"{origin.url}/m.bin"]) == 2
        out = capsys.readouterr()
        assert "407" in out.err and PROXY_PASSWORD not in out.out + out.err


def test_an_unreachable_proxy_is_a_source_error_without_its_password(monkeypatch: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://bob:{PROXY_PASSWORD}@127.0.0.1:{port}")
    with pytest.raises(SourceError, match="Connection refused") as info:
        HTTPSource("http://127.0.0.1:1/m.bin", retries=0)
    assert PROXY_PASSWORD not in str(info.value)


@pytest.mark.parametrize("setting", ["https://127.0.0.1:3128", "socks5://127.0.0.1:1080"])
def test_unsupported_proxies_are_refused(setting: str, monkeypatch: Any) -> None:
    monkeypatch.setenv(
        "HTTP_PROXY", setting.replace("127.0.0.1", f"bob:{PROXY_PASSWORD}@127.0.0.1")
    )
    with pytest.raises(UnsupportedError, match="only http:// proxies") as info:
        HTTPSource("http://127.0.0.1:1/m.bin", retries=0)
    assert PROXY_PASSWORD not in str(info.value)


# -- HTTPS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """An HTTPS Range server on 127.0.0.1 and its certificate."""
    tmp = tmp_path_factory.mktemp("tls")
    made = self_signed(tmp)
    if made is None:
        pytest.skip("the openssl command is needed to make a certificate")
    cert, key = made
    (tmp / "www").mkdir()
    (tmp / "www" / "m.bin").write_bytes(DATA)
    server, stopper = start_https_range_server(tmp / "www", tmp / "access.log", cert, key)
    yield server, cert
    stopper.terminate()


def test_https_with_a_trusted_certificate(tls: Any, monkeypatch: Any) -> None:
    server, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert _read_all(f"{server.url}/m.bin") == DATA


def test_https_with_an_untrusted_certificate_is_a_source_error(tls: Any, monkeypatch: Any) -> None:
    server, _cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent.pem")
    monkeypatch.setenv("SSL_CERT_DIR", "/nonexistent")
    with pytest.raises(SourceError, match="CERTIFICATE_VERIFY_FAILED"):
        HTTPSource(f"{server.url}/m.bin?token=abc", retries=0)


@pytest.mark.parametrize("with_auth", [False, True], ids=["open", "credentials"])
def test_https_goes_through_a_connect_tunnel(tls: Any, with_auth: bool, monkeypatch: Any) -> None:
    server, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    require = _basic("bob", PROXY_PASSWORD) if with_auth else None
    with ForwardProxy(require=require) as proxy:
        creds = f"bob:{PROXY_PASSWORD}@" if with_auth else ""
        monkeypatch.setenv("HTTPS_PROXY", f"http://{creds}127.0.0.1:{proxy.port}")
        assert _read_all(f"{server.url}/m.bin") == DATA
        port = server.url.rsplit(":", 1)[1]
        assert proxy.lines and all(line == f"CONNECT 127.0.0.1:{port}" for line in proxy.lines)
        assert set(proxy.auth) == {require}
        monkeypatch.setenv("HTTPS_PROXY", f"http://bob:wrong@127.0.0.1:{proxy.port}")
        if with_auth:
            with pytest.raises(SourceError, match="Tunnel connection failed: 407") as info:
                HTTPSource(f"{server.url}/m.bin", retries=0)
            assert PROXY_PASSWORD not in str(info.value)


def test_http_proxy_setting_does_not_apply_to_https(tls: Any, proxy: Any, monkeypatch: Any) -> None:
    server, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    assert _read_all(f"{server.url}/m.bin") == DATA
    assert proxy.requests == 0


def test_a_redirect_from_https_to_plain_http_is_refused(tls: Any, monkeypatch: Any) -> None:
    _server, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(cert.with_name("key.pem")))
    with HostileServer(serve_bytes(DATA)) as plain:
        moved = reply(302, {"Location": f"{plain.url}/m.bin", "Content-Length": "0"})

        def respond(request: Request, conn: socket.socket) -> bool:
            conn.sendall(moved)
            return False

        with HostileServer(respond, tls=context) as secure:
            assert secure.url.startswith("https://")
            with pytest.raises(SourceError, match="from https to plain http"):
                HTTPSource(f"{secure.url}/m.bin", token="t0ken-s3cret", retries=0)
            assert len(secure.requests) == 1
        assert plain.requests == []
