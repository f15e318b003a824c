"""Credentials: they go only to the origin (scheme, host and port) of the URL the user gave,
and never appear in an error, a warning or ``--json`` output, wherever the error is raised
(tensorfile, http.client, urllib, fsspec)."""

from __future__ import annotations

import base64
import json
import socket
import warnings
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile.cli.app import main
from tensorfile.errors import InvalidArgumentError, SourceError, TensorFileError
from tensorfile.safetensors.numpy import save
from tensorfile.sources import HTTPSource, open_path, redact
from tensorfile.sources.http._request import authorization
from tensorfile.sources.http._urls import parse_http_url
from tests.helpers.hostile_http import HostileServer, Request, reply, serve_bytes

PASSWORD = "hunter2pw"
TOKEN = "t0ken-s3cret"
SECRETS = (PASSWORD, TOKEN, f"alice:{PASSWORD}")
DATA = save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"format": "np"})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _with_secrets(base: str) -> str:
    """``base`` (``scheme://host/path``) with ``alice:PASSWORD@`` and ``?token=TOKEN``."""
    scheme, rest = base.split("://", 1)
    return f"{scheme}://alice:{PASSWORD}@{rest}?token={TOKEN}&x=1#frag-{TOKEN}"


# -- where credentials go ----------------------------------------------------------------------


def _two_servers(first: str = "/m.safetensors") -> tuple[HostileServer, HostileServer]:
    """``a`` redirects everything to the same path on ``b`` (another port of 127.0.0.1);
    ``b`` serves DATA."""
    b = HostileServer(serve_bytes(DATA))

    def moved(request: Request, conn: socket.socket) -> bool:
        path = request.target.split("?")[0]
        conn.sendall(reply(302, {"Location": f"{b.url}{path}", "Content-Length": "0"}))
        return True

    return HostileServer(moved), b


@pytest.mark.parametrize("how", ["token", "env", "hf-env", "url-userinfo", "headers"])
def test_credentials_do_not_follow_a_redirect_to_another_port(how: str, monkeypatch: Any) -> None:
    a, b = _two_servers()
    with a, b:
        url = f"{a.url}/m.safetensors"
        options: dict[str, Any] = {}
        if how == "token":
            options["token"] = TOKEN
        elif how == "env":
            monkeypatch.setenv("TENSORFILE_TOKEN", TOKEN)
            monkeypatch.setenv("TENSORFILE_TOKEN_HOSTS", a.url)
        elif how == "hf-env":
            monkeypatch.setenv("HF_TOKEN", TOKEN)
            monkeypatch.setenv("HF_ENDPOINT", a.url)
        elif how == "url-userinfo":
            url = url.replace("://", f"://alice:{PASSWORD}@")
        else:
            options["headers"] = {"Authorization": f"Bearer {TOKEN}", "Cookie": f"s={TOKEN}"}
        with tensorfile.open(HTTPSource(url, **options).read(0, len(DATA))) as f:
            assert f.keys() == ["w"]
        sent = a.requests[0].headers
        if how == "url-userinfo":
            assert (
                sent["authorization"]
                == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
            )
        else:
            assert TOKEN in sent["authorization"]
        assert b.requests, "the redirect was not followed"
        for r in b.requests:
            assert "authorization" not in r.headers and "cookie" not in r.headers, r.headers
            assert all(TOKEN not in v and PASSWORD not in v for v in r.headers.values())


def _authorizations(server: HostileServer) -> list[str]:
    return [r.headers["authorization"] for r in server.requests if "authorization" in r.headers]


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No token, endpoint or token hosts of the machine's environment."""
    for name in ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "TENSORFILE_TOKEN",
                 "TENSORFILE_TOKEN_HOSTS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "named",
    [None, "https://127.0.0.1:{port}", "127.0.0.1:{port}", "127.0.0.1", "http://127.0.0.1:1",
     "huggingface.co"],
)  # fmt: skip
def test_an_environment_token_never_reaches_a_host_not_named_for_it(
    token_env: pytest.MonkeyPatch, named: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review f02: ``$HF_TOKEN`` and ``$TENSORFILE_TOKEN`` went as ``Authorization: Bearer``
    to any host a URL named (a model card's link handed the user's Hugging Face token to its
    server, over plain http too). Neither reaches a plain-HTTP host that ``$HF_ENDPOINT`` or
    ``$TENSORFILE_TOKEN_HOSTS`` does not name exactly, scheme and port included."""
    with HostileServer(serve_bytes(DATA)) as server:
        port = server.url.rsplit(":", 1)[1]
        token_env.setenv("HF_TOKEN", TOKEN)
        token_env.setenv("TENSORFILE_TOKEN", PASSWORD)
        if named is not None:
            token_env.setenv("TENSORFILE_TOKEN_HOSTS", named.format(port=port))
            token_env.setenv("HF_ENDPOINT", named.format(port=port))
        with tensorfile.open(f"{server.url}/m.safetensors") as f:
            assert f.keys() == ["w"]
        assert main(["inspect", f"{server.url}/m.safetensors"]) == 0
        assert server.requests and _authorizations(server) == []
    capsys.readouterr()


def test_hf_token_reaches_the_hf_endpoint_the_user_set(token_env: pytest.MonkeyPatch) -> None:
    """``$HF_ENDPOINT`` (a mirror, a private Hub) is where huggingface_hub sends
    ``$HF_TOKEN``, plain http when it says so: tensorfile too, and nowhere else."""
    with HostileServer(serve_bytes(DATA)) as server:
        token_env.setenv("HF_TOKEN", TOKEN)
        token_env.setenv("HF_ENDPOINT", server.url + "/")
        with tensorfile.open(f"{server.url}/org/m/resolve/main/m.safetensors") as f:
            assert f.keys() == ["w"]
        assert set(_authorizations(server)) == {f"Bearer {TOKEN}"}
        server.requests.clear()
        token_env.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")  # (huggingface_hub's switch)
        assert HTTPSource(f"{server.url}/m.safetensors").read(0, 8) == DATA[:8]
        assert server.requests and _authorizations(server) == []


def test_tensorfile_token_reaches_the_hosts_named_for_it(token_env: pytest.MonkeyPatch) -> None:
    with HostileServer(serve_bytes(DATA)) as server:
        token_env.setenv("TENSORFILE_TOKEN", TOKEN)
        token_env.setenv("HF_TOKEN", PASSWORD)
        token_env.setenv("HF_ENDPOINT", server.url)  # (TENSORFILE_TOKEN first where both go)
        token_env.setenv("TENSORFILE_TOKEN_HOSTS", f" example.org:8443, {server.url} ,")
        assert HTTPSource(f"{server.url}/m.safetensors").read(0, 8) == DATA[:8]
        assert set(_authorizations(server)) == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("url", "sent"),
    [("https://huggingface.co/o/m/resolve/main/m.safetensors", True),
     ("https://HF.co:443/o/m/resolve/main/m.safetensors", True),
     ("https://hub-ci.huggingface.co/o/m/resolve/main/m.safetensors", True),
     ("http://huggingface.co/o/m/resolve/main/m.safetensors", False),  # (plain http)
     ("https://huggingface.co:8443/m.safetensors", False),
     ("https://cdn-lfs.huggingface.co/m.safetensors", False),  # (a CDN: signed URLs)
     ("https://huggingface.co.evil.example/m.safetensors", False),
     ("https://evil.example/huggingface.co/m.safetensors", False)],
)  # fmt: skip
def test_hf_token_goes_to_the_hub_origins_only(
    token_env: pytest.MonkeyPatch, url: str, sent: bool
) -> None:
    """The Hub's origins as huggingface_hub lists them (``_HUB_ORIGINS``), https only."""
    from huggingface_hub.utils._http import _HUB_ORIGINS, _url_origin

    token_env.setenv("HF_TOKEN", TOKEN)
    assert (_url_origin(url.lower()) in _HUB_ORIGINS) == sent  # (huggingface_hub agrees)
    auth = authorization(parse_http_url(url), None)
    assert auth == (f"Bearer {TOKEN}" if sent else None)


@pytest.mark.parametrize("entry", ["https://h/path", "u:pw@h", "h:99999", "ftp://h", "h?x=1"])
def test_a_bad_token_hosts_entry_is_refused(token_env: pytest.MonkeyPatch, entry: str) -> None:
    token_env.setenv("TENSORFILE_TOKEN", TOKEN)
    token_env.setenv("TENSORFILE_TOKEN_HOSTS", f"example.org,{entry}")
    with pytest.raises(InvalidArgumentError, match=r"\$TENSORFILE_TOKEN_HOSTS") as info:
        HTTPSource("http://127.0.0.1:1/m.safetensors")
    assert "pw" not in str(info.value) and TOKEN not in str(info.value)


def test_a_401_says_why_no_token_was_sent(token_env: pytest.MonkeyPatch) -> None:
    with _failing(401) as server:
        token_env.setenv("HF_TOKEN", TOKEN)
        token_env.setenv("TENSORFILE_TOKEN", PASSWORD)
        with pytest.raises(SourceError, match="401") as info:
            HTTPSource(f"{server.url}/m.safetensors", retries=0)
    shown = str(info.value)
    assert "$TENSORFILE_TOKEN_HOSTS" in shown and "$HF_ENDPOINT" in shown
    assert TOKEN not in shown and PASSWORD not in shown


def test_the_token_goes_to_the_origin_again_after_a_round_trip() -> None:
    """a -> b -> a: the origin gets the token on both visits, b never."""
    data = DATA

    def origin(request: Request, conn: socket.socket) -> bool:
        if request.target.startswith("/start"):
            conn.sendall(reply(302, {"Location": f"{b.url}/hop", "Content-Length": "0"}))
            return True
        return serve_bytes(data)(request, conn)

    def hop(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(307, {"Location": f"{a.url}/m", "Content-Length": "0"}))
        return True

    a, b = HostileServer(origin), HostileServer(hop)
    with a, b:
        assert HTTPSource(f"{a.url}/start", token=TOKEN).read(0, 8) == data[:8]
        assert [r.headers.get("authorization") for r in a.requests] == [f"Bearer {TOKEN}"] * 2
        assert "authorization" not in b.requests[0].headers


@pytest.mark.parametrize("token", ["tok\nen", "tok en", "tök", "\x00"])
def test_a_token_that_cannot_be_a_header_is_refused_without_echoing_it(token: str) -> None:
    with pytest.raises(InvalidArgumentError, match="spaces or control characters") as info:
        HTTPSource("http://127.0.0.1:1/m", token=token)
    assert token not in str(info.value)


def test_extra_headers_are_checked_without_echoing_values() -> None:
    with pytest.raises(InvalidArgumentError, match="invalid value") as info:
        HTTPSource("http://127.0.0.1:1/m", headers={"X-Key": f"{TOKEN}\r\nEvil: 1"})
    assert TOKEN not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="sets the Range header"):
        HTTPSource("http://127.0.0.1:1/m", headers={"Range": "bytes=0-"})


# -- what messages show ------------------------------------------------------------------------


_STARTED: list[HostileServer] = []


@pytest.fixture(autouse=True)
def _close_servers() -> Any:
    yield
    while _STARTED:
        _STARTED.pop().close()


def _failing(status: int) -> HostileServer:
    def respond(request: Request, conn: socket.socket) -> bool:
        head = {"Content-Length": "0", "Retry-After": "0"}
        conn.sendall(reply(status, head))
        return False

    server = HostileServer(respond)
    _STARTED.append(server)
    return server


def _cases() -> list[tuple[str, Any]]:
    return [
        ("404", lambda: _with_secrets(f"{_failing(404).url}/m.safetensors")),
        ("503", lambda: _with_secrets(f"{_failing(503).url}/m.safetensors")),
        ("refused", lambda: _with_secrets(f"http://127.0.0.1:{_closed_port()}/m.safetensors")),
        ("port-99999", lambda: _with_secrets("http://127.0.0.1:99999/m.safetensors")),
        ("port-text", lambda: _with_secrets("http://127.0.0.1:http/m.safetensors")),
        ("port-unicode", lambda: _with_secrets("http://127.0.0.1:٣٣/m.safetensors")),
        ("ipv6-open", lambda: _with_secrets("http://[::1/m.safetensors")),
        ("space", lambda: _with_secrets("http://127.0.0.1:1/a b.safetensors")),
        ("control", lambda: _with_secrets("http://127.0.0.1:1/a\x07.safetensors")),
        ("long-label", lambda: _with_secrets(f"http://{'a' * 70}.invalid/m.safetensors")),
        ("slash-in-password", lambda: f"http://alice:{PASSWORD}/x@127.0.0.1:1/m?token={TOKEN}"),
        ("memory-missing", lambda: _with_secrets("memory://nowhere/m.safetensors")),
        ("unknown-scheme", lambda: _with_secrets("nosuchproto://bucket/m.safetensors")),
    ]


CASES = _cases()

# URLs that tensorfile.ops refuses itself before any source sees them: ops/_structure.py's
# _check_url (outside tensorfile.sources) quotes the raw URL in its message. Reported; the
# sources path (test_errors_never_hold_credentials) is clean for these URLs.


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("name", "make"), CASES, ids=[c[0] for c in CASES])
def test_cli_never_shows_credentials(name: str, make: Any, json_mode: bool, capsys: Any) -> None:
    url = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = main(["inspect", url, *(["--json"] if json_mode else [])])
    out = capsys.readouterr()
    assert status == 2, (out.out, out.err)
    shown = out.out + out.err + "".join(str(w.message) for w in caught)
    for secret in SECRETS:
        assert secret not in shown, shown
    assert shown.strip(), "no message at all"


@pytest.mark.parametrize(("name", "make"), CASES, ids=[c[0] for c in CASES])
def test_errors_never_hold_credentials(name: str, make: Any) -> None:
    """The exception (and anything it chains to, which a traceback would print) is
    tensorfile's own and free of secrets."""
    url = make()
    with pytest.raises(TensorFileError) as info:
        open_path(url, retries=0) if url.startswith("http") else open_path(url)
    chain: list[BaseException] = []
    exc: BaseException | None = info.value
    while exc is not None and len(chain) < 10:
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for e in chain:
        for secret in SECRETS:
            assert secret not in str(e), (type(e), str(e))
            assert all(secret not in str(a) for a in e.args)


def test_json_output_of_a_url_with_credentials_is_redacted(capsys: Any) -> None:
    with HostileServer(serve_bytes(DATA)) as server:
        url = _with_secrets(f"{server.url}/m.safetensors")
        assert main(["inspect", url, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["path"] == f"{server.url}/m.safetensors"
        for command in (["summary"], ["id"], ["meta"], ["diff", url]):
            assert main([command[0], url, *command[1:]]) == 0
            out = capsys.readouterr()
            assert all(s not in out.out + out.err for s in SECRETS)


def test_source_names_are_redacted_for_every_scheme() -> None:
    import fsspec

    fsspec.filesystem("memory").pipe("/tf-cred/m.safetensors", DATA)
    with pytest.raises(SourceError) as info:  # memory:// has no user information: a path
        open_path(f"memory://alice:{PASSWORD}@/tf-cred/m.safetensors")
    assert PASSWORD not in str(info.value)
    with pytest.raises(SourceError) as info:  # memory:// keeps the query in the path
        open_path(f"memory://tf-cred/m.safetensors?token={TOKEN}")
    assert TOKEN not in str(info.value) and "memory://tf-cred/m.safetensors" in str(info.value)
    for url in (
        f"s3://AKIA:{PASSWORD}@bucket/m?X-Amz-Signature={TOKEN}",
        f"gs://bucket/m?token={TOKEN}",
        f"hf://alice:{PASSWORD}@org/m#{TOKEN}",
    ):
        shown = redact(url)
        assert PASSWORD not in shown and TOKEN not in shown and "/m" in shown


def test_json_path_of_a_remote_checkpoint_is_redacted(capsys: Any) -> None:
    index = json.dumps({"metadata": {}, "weight_map": {"w": "s.safetensors"}}).encode()

    def respond(request: Request, conn: socket.socket) -> bool:
        body = index if request.target.split("?")[0].endswith(".index.json") else DATA
        return serve_bytes(body)(request, conn)

    with HostileServer(respond) as server:
        url = _with_secrets(f"{server.url}/model.safetensors.index.json")
        status = main(["inspect", url, "--json"])
        out = capsys.readouterr()
    assert status == 0, out.err
    assert all(s not in out.out + out.err for s in SECRETS), out.out
