"""URLs: what messages show of them (any scheme), foreign text scrubbed of their secrets, and
bad http(s) URLs refused with InvalidArgumentError naming the redacted URL."""

from __future__ import annotations

import pytest

from tensorfile.errors import InvalidArgumentError
from tensorfile.sources import HTTPSource, redact
from tensorfile.sources.http._urls import WITHHELD, parse_http_url, scrub

SECRET = "hunter2pw"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:hunter2pw@Host:8443/a/m.safetensors?sig=hunter2pw#hunter2pw",
         "https://host:8443/a/m.safetensors"),
        ("s3://AKIA:hunter2pw@bucket/k/m.zt?versionId=hunter2pw", "s3://bucket/k/m.zt"),
        ("gs://bucket/m?token=hunter2pw", "gs://bucket/m"),
        ("hf://datasets/org/name@main/m.safetensors", "hf://datasets/org/name@main/m.safetensors"),
        ("memory://x/y#hunter2pw", "memory://x/y"),
        ("http://u:hunter2pw/with-slash@host/m", "http://(URL withheld: it may hold credentials)"),
        # review e01/e02: one '/' too many leaves no host, and the user information in the path
        ("http:///u:hunter2pw@host/m", "http://(URL withheld: it may hold credentials)"),
        ("ftp:///u:hunter2pw@proxy", "ftp://(URL withheld: it may hold credentials)"),
        ("http://u:p@[::1/x?hunter2pw", "http://(malformed host)"),
        ("HTTP://u:hunter2pw@h/x", "HTTP://h/x"),
        ("ftp://h/\x07bell", "ftp://h/\\x07bell"),
        ("not a url", "not a url"),
    ],
)  # fmt: skip
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert SECRET not in redact(url)


def test_scrub_replaces_the_url_and_each_secret() -> None:
    url = f"http://alice:{SECRET}@h:1/m?token=t0ken-s3cret&v=2"
    text = f"InvalidURL: {url!r} at alice:{SECRET} (unquoted t0ken-s3cret)"
    cleaned = scrub(text, url)
    assert SECRET not in cleaned and "t0ken-s3cret" not in cleaned
    assert "http://h:1/m" in cleaned
    # a secret too short to replace inside text withholds the whole text
    assert scrub("error 42 near h", "http://h/m?k=2") == WITHHELD
    assert scrub("nothing secret here", "http://h/m?k=2") == "nothing secret here"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://u:hunter2pw@127.0.0.1:99999/m?t=hunter2pw", "port must be a number"),
        ("http://u:hunter2pw@127.0.0.1:0/m", "port must be a number"),
        ("http://u:hunter2pw@127.0.0.1:٣/m", "port must be a number"),
        ("http://u:hunter2pw@127.0.0.1:-1/m", "port must be a number"),
        ("http://u:hunter2pw@127.0.0.1:8_0/m", "port must be a number"),
        ("http://u:hunter2pw@[::1/m", "malformed URL"),
        ("http://u:hunter2pw@/m", "no host"),
        ("http:///u:hunter2pw@h/m", "no host"),  # review e01
        ("http://u:hunter2pw@h/a b?t=hunter2pw", "spaces or control characters"),
        ("http://u:hunter2pw@h/a\r\nX: y", "spaces or control characters"),
        (f"http://u:hunter2pw@{'a' * 64}.example/m", "host name is not valid"),
        ("http://u:hunter2pw@a..b/m", "host name is not valid"),
        ("ftp://u:hunter2pw@h/m", "not an http"),
    ],
)
def test_bad_urls_are_invalid_arguments_naming_the_redacted_url(url: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why) as info:
        HTTPSource(url)
    assert SECRET not in str(info.value)
    exc = info.value  # nothing chained that a traceback would print with the raw URL
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


def test_parse_http_url_takes_urls_apart() -> None:
    u = parse_http_url("https://a%40b:p%3Aw@BÜCHER.example/pfad/ä?q=ö#frag")
    assert (u.scheme, u.host, u.port) == ("https", "xn--bcher-kva.example", 443)
    assert u.target == "/pfad/%C3%A4?q=%C3%B6"
    assert (u.user, u.password) == ("a@b", "p:w")
    assert u.authority == "xn--bcher-kva.example"
    v = parse_http_url("http://[::1]:8080/m")
    assert (v.host, v.port, v.authority, v.absolute) == (
        "::1",
        8080,
        "[::1]:8080",
        "http://[::1]:8080/m",
    )
    assert parse_http_url("http://h").target == "/"


@pytest.mark.parametrize(
    ("option", "value"),
    [("timeout", 0), ("timeout", float("nan")), ("deadline", -1), ("min_speed", 0),
     ("timeout", "5"), ("retries", 1.5), ("backoff", -1), ("backoff", "x"), ("token", 5)],
)  # fmt: skip
def test_bad_options_are_invalid_arguments(option: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        HTTPSource("http://127.0.0.1:1/m", **{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", ["http:///u:hunter2pw@proxy", "//u:hunter2pw@proxy",
                                     "ftp:///u:hunter2pw@proxy"])  # fmt: skip
def test_a_mistyped_proxy_setting_shows_no_password(setting: str) -> None:
    """Review e02: a proxy setting with one '/' too many or too few put its password into
    the error."""
    from tensorfile.errors import TensorFileError
    from tensorfile.sources.http._proxy import parse_proxy

    with pytest.raises(TensorFileError) as info:
        parse_proxy(setting)
    assert SECRET not in str(info.value)
