"""Issue 35, point 3: every piece of S3 configuration that ends up in a request's URL is
checked before anything connects. ``AWS_REGION='evil.example#'`` once sent the signed
request (access key id, session token) to ``bkt.s3.evil.example``; now a bad region, endpoint
or addressing style, from the environment, the AWS profile file or the storage options, is an
:class:`~tensorfile.errors.InvalidArgumentError` naming the setting and where it came from,
whether tensorfile's own client or s3fs would read the URL, through ``open_path``, a store
or a dataset. A listening socket on 127.0.0.1 stands for the endpoint: it sees no
connection."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorfile import dataset
from tensorfile.errors import InvalidArgumentError
from tensorfile.sources import open_path, store_for
from tensorfile.sources.s3._s3config import check_endpoint, check_region
from tests.helpers.cli import assert_one_error
from tests.helpers.cli import run as cli

BAD_REGIONS = ["evil.example#", "evil.example", "us-east-1/x", "a b", "-us", "us-", "123",
               "us-east-1\n", "x" * 64]  # fmt: skip
BAD_ENDPOINTS = [
    "http://127.0.0.1:{port}#@evil.example", "http://u:p@127.0.0.1:{port}",
    "http://127.0.0.1:{port}/?x=1", "ftp://127.0.0.1:{port}", "127.0.0.1:{port}",
    "http://evil example:{port}", "http://127.0.0.1:{port}\r\nX: y", "http://[::1:{port}",
    "http://127.0.0.1:99999", "http://-bad-.example",
]  # fmt: skip
BAD_STYLES = ["virtual.evil", "pathy"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket on 127.0.0.1 that must see no connection."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        pass
    else:
        conn.close()
        pytest.fail("a connection reached the endpoint")
    finally:
        sock.close()


def _every_way(
    url: str, options: dict[str, Any], said: list[str], unsaid: tuple[str, ...] = ()
) -> None:
    """Each entry point refuses ``url`` with ``options``, saying each of ``said`` and none
    of ``unsaid``."""
    declined = {**options, "requester_pays": False}  # (s3fs's option: s3fs would read it)
    calls: list[Callable[[], object]] = [
        lambda: open_path(url, **options),
        lambda: open_path(url, **declined),
        lambda: store_for(url.rpartition("/")[0], options).file_size("m.bin"),
        lambda: store_for(url.rpartition("/")[0], declined).list_files(),
        lambda: dataset.open(url.rpartition("/")[0], storage_options=options),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError) as caught:
            call()
        for part in said:
            assert part in str(caught.value)
        for part in unsaid:
            assert part not in str(caught.value)


def _keys(port: int) -> dict[str, Any]:
    return {"key": "AKIDEXAMPLE", "secret": "secret", "endpoint_url": f"http://127.0.0.1:{port}"}


@pytest.mark.parametrize("region", BAD_REGIONS[:3])
@pytest.mark.parametrize("where", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_a_bad_region_from_the_environment(
    aws: Callable[[dict[str, str]], None], listener: socket.socket, where: str, region: str
) -> None:
    aws({where: region})
    port = listener.getsockname()[1]
    _every_way("s3://bkt/ds/m.bin", _keys(port), [repr(region), f"${where}"])
    # and on AWS itself, where the region would be the host name
    with pytest.raises(InvalidArgumentError, match="region"):
        open_path("s3://bkt/m.bin", key="AKIDEXAMPLE", secret="secret")


def test_a_bad_region_from_the_profile_file(
    aws: Callable[[dict[str, str]], None], listener: socket.socket, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = evil.example#\n[profile other]\nregion = a b\n")
    aws({"AWS_CONFIG_FILE": str(config)})
    port = listener.getsockname()[1]
    _every_way("s3://bkt/ds/m.bin", _keys(port), ["'evil.example#'", "profile default"])
    _every_way("s3://bkt/ds/m.bin", {**_keys(port), "profile": "other"}, ["'a b'", "other"])


@pytest.mark.parametrize("region", BAD_REGIONS)
@pytest.mark.parametrize("option", ["client_kwargs", "config_kwargs"])
def test_a_bad_region_from_the_storage_options(
    aws: Callable[[dict[str, str]], None], listener: socket.socket, option: str, region: str
) -> None:
    aws({})
    options = {**_keys(listener.getsockname()[1]), option: {"region_name": region}}
    _every_way("s3://bkt/ds/m.bin", options, [repr(region), f"{option}.region_name"])


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
@pytest.mark.parametrize("where", ["endpoint_url", "client_kwargs", "AWS_ENDPOINT_URL",
                                   "AWS_ENDPOINT_URL_S3"])  # fmt: skip
def test_a_bad_endpoint(
    aws: Callable[[dict[str, str]], None], listener: socket.socket, where: str, endpoint: str
) -> None:
    endpoint = endpoint.format(port=listener.getsockname()[1])
    options: dict[str, Any] = {"key": "AKIDEXAMPLE", "secret": "secret"}
    if where == "endpoint_url":
        options["endpoint_url"] = endpoint
    elif where == "client_kwargs":
        options["client_kwargs"] = {"endpoint_url": endpoint}
    aws({where: endpoint} if where.startswith("AWS_") else {})
    shown = f"${where}" if where.startswith("AWS_") else where
    _every_way("s3://bkt/ds/m.bin", options, ["S3 endpoint", shown])


SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYSECRET"
SECRET_ENDPOINTS = [
    "http://AKIAEXAMPLE:{secret}@127.0.0.1:{port}",
    "http://127.0.0.1:{port}/?X-Amz-Security-Token={secret}",
    "http://127.0.0.1:{port}/s3?X-Amz-Signature=ab#{secret}",
    "http://u:{secret}@127.0.0.1:{port}/?token={secret}",
    # review d04: malformed ('//' short or missing), the user information cut all the same
    "http:/AKIAEXAMPLE:{secret}@127.0.0.1:{port}",
    "//AKIAEXAMPLE:{secret}@127.0.0.1:{port}",
    "https:u:p?{secret}@127.0.0.1:{port}",
]


@pytest.mark.parametrize("endpoint", SECRET_ENDPOINTS)
@pytest.mark.parametrize("where", ["endpoint_url", "client_kwargs", "AWS_ENDPOINT_URL",
                                   "AWS_ENDPOINT_URL_S3", "profile"])  # fmt: skip
def test_a_refused_endpoint_shows_no_secret(
    aws: Callable[[dict[str, str]], None],
    listener: socket.socket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
    endpoint: str,
) -> None:
    """Review c03: the refusal of an endpoint holding credentials or a token once repeated
    them (CLI stderr, logs); it names the endpoint redacted, wherever it was set."""
    endpoint = endpoint.format(port=listener.getsockname()[1], secret=SECRET)
    options: dict[str, Any] = {"key": "AKIDEXAMPLE", "secret": "secret"}
    if where == "endpoint_url":
        options["endpoint_url"] = endpoint
    elif where == "client_kwargs":
        options["client_kwargs"] = {"endpoint_url": endpoint}
    elif where == "profile":
        config = tmp_path / "config"
        config.write_text(f"[default]\nendpoint_url = {endpoint}\n")
        aws({"AWS_CONFIG_FILE": str(config)})
    aws({where: endpoint} if where.startswith("AWS_") else {})
    _every_way("s3://bkt/ds/m.bin", options, ["S3 endpoint", "127.0.0.1:"], (SECRET,))
    if where.startswith("AWS_") or where == "profile":
        message = assert_one_error(cli(capsys, "inspect", "s3://bkt/m.safetensors"))
        assert "S3 endpoint" in message and SECRET not in message


BAD_CREDENTIALS = {"cr": SECRET + "\r", "lf": SECRET + "\n", "header": f"{SECRET}\r\nX-Evil: 1",
                   "space": f"{SECRET} x"}  # fmt: skip
CREDENTIAL_PLACES = [
    ("AWS_SESSION_TOKEN", "$AWS_SESSION_TOKEN"),
    ("AWS_ACCESS_KEY_ID", "$AWS_ACCESS_KEY_ID"),
    ("token", "storage option token"),
    ("key", "storage option key"),
    ("aws_session_token", "storage option client_kwargs.aws_session_token"),
    ("aws_secret_access_key", "storage option client_kwargs.aws_secret_access_key"),
]
CREDENTIAL_CASES = [
    pytest.param(where, named, value, id=f"{where}-{kind}")
    for where, named in CREDENTIAL_PLACES
    for kind, value in BAD_CREDENTIALS.items()
    if not (kind == "space" and "secret" in where)  # (a secret is only hashed: a space is fine)
]


@pytest.mark.parametrize(("where", "named", "value"), CREDENTIAL_CASES)
def test_a_credential_that_cannot_be_sent_is_refused_unshown(
    aws: Callable[[dict[str, str]], None],
    listener: socket.socket,
    capsys: pytest.CaptureFixture[str],
    where: str,
    named: str,
    value: str,
) -> None:
    """Review f06: a session token read from a file with Windows line ends (``\\r`` at its
    end) went into the ``X-Amz-Security-Token`` header, and ``http.client``'s refusal,
    ``ValueError: Invalid header value b'<token>\\r'``, was printed whole. Every credential
    is checked before anything is signed; the refusal names the setting, never the value,
    whoever (tensorfile's client or s3fs) would read the URL."""
    port = listener.getsockname()[1]
    good = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
    options: dict[str, Any] = {"endpoint_url": f"http://127.0.0.1:{port}"}
    if where.startswith("AWS_"):
        aws({**good, where: value, "AWS_ENDPOINT_URL": options["endpoint_url"]})
    elif where.startswith("aws_"):
        aws({})
        client = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "s", where: value}
        options["client_kwargs"] = client
    else:
        aws({})
        options |= {"key": "AKIDEXAMPLE", "secret": "secret", where: value}
    _every_way("s3://bkt/ds/m.bin", options, [named, "space or a control character"], (SECRET,))
    if where.startswith("AWS_"):
        message = assert_one_error(cli(capsys, "inspect", "s3://bkt/m.safetensors"))
        assert named in message and SECRET not in message


@pytest.mark.parametrize("style", BAD_STYLES)
def test_a_bad_addressing_style(
    aws: Callable[[dict[str, str]], None], listener: socket.socket, style: str
) -> None:
    aws({})
    options = {**_keys(listener.getsockname()[1]),
               "config_kwargs": {"s3": {"addressing_style": style}}}  # fmt: skip
    _every_way("s3://bkt/ds/m.bin", options, [repr(style), "addressing_style"])
    aws({"TENSORFILE_S3_ADDRESSING_STYLE": style})
    _every_way("s3://bkt/ds/m.bin", _keys(listener.getsockname()[1]),
               [repr(style), "$TENSORFILE_S3_ADDRESSING_STYLE"])  # fmt: skip


def test_good_settings_pass() -> None:
    for region in ("us-east-1", "eu-central-2", "cn-north-1", "us-gov-west-1", "local"):
        assert check_region(region, "test") == region
    for endpoint in ("http://127.0.0.1:9000", "https://s3.example.com", "http://[::1]:8333/",
                     "https://minio.local:9000/gateway/s3", "http://localhost"):  # fmt: skip
        assert check_endpoint(endpoint, "test") == endpoint
