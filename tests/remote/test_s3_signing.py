"""tensorfile's S3 signature against botocore's (the oracle), and where ``s3://`` settings come
from (storage options, the environment, the shared credentials file), without a server."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from tensorfile.errors import InvalidArgumentError
from tensorfile.sources.s3._s3config import _shared_file, parse_s3_url, s3_settings
from tensorfile.sources.s3._sigv4 import EMPTY_SHA256, Credentials, sign_get


@pytest.mark.parametrize("token", [None, "session-token/+="])
@pytest.mark.parametrize(
    ("host", "path"),
    [
        ("127.0.0.1:8333", "/bucket/dir/model.safetensors"),
        ("bucket.s3.eu-west-1.amazonaws.com", "/a%20b/%C3%A9t%C3%A9%2Bx.safetensors"),
    ],
)
def test_the_signature_is_botocores(host: str, path: str, token: str | None) -> None:
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    request = AWSRequest(method="GET", url=f"http://{host}{path}", headers={"Range": "bytes=0-99"})
    request.headers["X-Amz-Content-SHA256"] = EMPTY_SHA256
    boto = BotoCredentials(creds.key, creds.secret, token)
    S3SigV4Auth(boto, "s3", "eu-west-1").add_auth(request)  # signs with the time it is now
    when = datetime.datetime.strptime(request.context["timestamp"], "%Y%m%dT%H%M%SZ")
    ours = sign_get(creds, "eu-west-1", host, path, {"Range": "bytes=0-99"},
                    when.replace(tzinfo=datetime.UTC))  # fmt: skip
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")
    assert creds.secret not in repr(creds) and creds.secret not in str(ours)


def test_urls_this_client_reads_and_those_it_leaves_to_fsspec() -> None:
    assert parse_s3_url("s3a://b-1.x/k/l") == ("b-1.x", "k/l")
    for url in ("s3://b/k?versionId=2", "s3://key:secret@b/k", "s3://b", "s3://b/", "s3://b..x/k",
                "gs://b/k", "s3://" + "b" * 64 + "/k"):  # fmt: skip
        assert parse_s3_url(url) is None, url


def test_endpoint_region_and_addressing() -> None:
    env = {"AWS_REGION": "eu-west-3", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    s = s3_settings("s3://my-bucket/m.safetensors", {}, env)
    assert s is not None and s.url == "https://my-bucket.s3.eu-west-3.amazonaws.com/m.safetensors"
    dotted = s3_settings("s3://my.bucket/m", {}, env)
    assert dotted is not None and dotted.url == "https://s3.eu-west-3.amazonaws.com/my.bucket/m"
    custom = s3_settings("s3://bk1/m", {}, {**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9/"})
    assert custom is not None and custom.url == "http://127.0.0.1:9/bk1/m"
    options = {"endpoint_url": "http://h:1", "client_kwargs": {"region_name": "ap-south-1"}}
    mine = s3_settings("s3://bk1/m", options, env)
    assert mine is not None and (mine.url, mine.region) == ("http://h:1/bk1/m", "ap-south-1")
    creds = mine.credentials()
    assert creds is not None and (creds.key, creds.secret) == ("a", "b")
    virtual = s3_settings(
        "s3://bk1/m", {"config_kwargs": {"s3": {"addressing_style": "virtual"}}},
        {**env, "AWS_ENDPOINT_URL_S3": "https://store.example:8443"},
    )  # fmt: skip
    assert virtual is not None and virtual.url == "https://bk1.store.example:8443/m"


def test_options_from_s3fs_are_honoured_or_declined() -> None:
    env: dict[str, str] = {}
    s = s3_settings("s3://bk1/m", {"key": "k", "secret": "s", "token": "t",
                                  "config_kwargs": {"retries": {"max_attempts": 2},
                                                    "connect_timeout": 5}}, env)  # fmt: skip
    assert s is not None and (s.retries, s.timeout) == (1, 5.0)
    creds = s.credentials()
    assert creds is not None and (creds.key, creds.secret, creds.token) == ("k", "s", "t")
    anon = s3_settings("s3://bk1/m", {"anon": True}, env)
    assert anon is not None and anon.credentials() is None
    for declined in ({"requester_pays": True}, {"client_kwargs": {"verify": "/ca.pem"}},
                     {"config_kwargs": {"s3": {"use_accelerate_endpoint": True}}}):  # fmt: skip
        assert s3_settings("s3://bk1/m", declined, env) is None, declined
    assert s3_settings("s3://bk1/m", {}, {"TENSORFILE_S3": "fsspec"}) is None
    with pytest.raises(InvalidArgumentError, match="key and secret go together"):
        s3_settings("s3://bk1/m", {"key": "k"}, env)


def test_the_shared_credentials_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = AK1\naws_secret_access_key = SK1\n"
                     "[other]\naws_access_key_id = AK2\naws_secret_access_key = SK2\n"
                     "aws_session_token = T2\n")  # fmt: skip
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(tmp_path / "no")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    found = {}
    for profile in (None, "other"):
        options = {} if profile is None else {"profile": profile}
        s = s3_settings("s3://bk1/m", options, env)
        assert s is not None
        got = s.credentials()
        assert got is not None
        found[profile] = (got.key, got.secret, got.token)
    assert found == {None: ("AK1", "SK1", None), "other": ("AK2", "SK2", "T2")}
    # without botocore, tensorfile reads the file itself
    assert _shared_file(env, "other") == Credentials("AK2", "SK2", "T2")
    assert _shared_file(env, "absent") is None
