"""Review c05 and c06 (issue 35): tensorfile's S3 client picks the endpoint of an ``s3://``
URL the way botocore (so s3fs, boto3 and the AWS CLI) does. An AWS profile's
``endpoint_url`` (or its services section's ``s3`` block) once went unread, so
``s3://models/...`` went to the AWS bucket of that name, which anyone may own, while s3fs
went to the profile's server; ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` was ignored, so
signed requests (key id, session token) went to the ``$AWS_ENDPOINT_URL`` the user meant to
bypass. Checked against a real S3 server on 127.0.0.1 (moto) and a server that records
every request, and against botocore's own resolution; the cache key names the endpoint used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.config
import botocore.session
import numpy as np
import pytest
import safetensors.numpy

import tensorfile
from tensorfile.errors import InvalidArgumentError, SourceError
from tensorfile.sources import open_path, resolved_endpoint, store_for
from tensorfile.sources.s3._s3config import s3_settings
from tests.helpers.hostile_http import HostileServer, serve_bytes

TENSORS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.int16)}
FILE = safetensors.numpy.save(TENSORS)
CREDENTIALS = "aws_access_key_id = testing\naws_secret_access_key = testing\n"
FORMS = {
    "endpoint_url": "[profile corp]\nregion = us-east-1\nendpoint_url = {endpoint}\n",
    "services": "[profile corp]\nregion = us-east-1\nservices = lab\n"
    "[services lab]\ns3 =\n  endpoint_url = {endpoint}\n",
}


def _config(aws: Callable[[dict[str, str]], None], tmp_path: Path, text: str, **env: str) -> None:
    """Use the AWS config file ``text`` (credentials for ``corp`` and ``default`` too)."""
    (tmp_path / "config").write_text(text)
    (tmp_path / "credentials").write_text(f"[corp]\n{CREDENTIALS}[default]\n{CREDENTIALS}")
    aws({"AWS_CONFIG_FILE": str(tmp_path / "config"),
         "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"), **env})  # fmt: skip


def _botocore_endpoint(**config: Any) -> str:
    """Where botocore sends an S3 request (the reference)."""
    client = botocore.session.Session().create_client(
        "s3", region_name="us-east-1", config=botocore.config.Config(**config)
    )
    return str(client.meta.endpoint_url)


@pytest.mark.parametrize("form", FORMS)
def test_a_profile_endpoint_is_where_a_load_goes(
    s3: Any, aws: Callable[[dict[str, str]], None], tmp_path: Path, form: str
) -> None:
    bucket = s3.bucket()
    s3.fs.pipe(f"{bucket}/m.safetensors", FILE)
    _config(aws, tmp_path, FORMS[form].format(endpoint=s3.endpoint), AWS_PROFILE="corp")
    url = f"s3://{bucket}/m.safetensors"
    with tensorfile.open(url) as f:
        got = f.get_tensors(sorted(TENSORS))
    assert all(np.array_equal(got[k], TENSORS[k]) for k in TENSORS)
    # botocore (s3fs) goes there too, and the cache key names that server
    assert _botocore_endpoint() == s3.endpoint
    assert resolved_endpoint(url, {}) == s3.endpoint


def test_a_store_reads_and_writes_on_the_profile_server(
    s3: Any, aws: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """An S3Store lists and writes with s3fs and reads with tensorfile's client: both at
    the default profile's endpoint."""
    bucket = s3.bucket()
    _config(aws, tmp_path, f"[default]\nregion = us-east-1\nendpoint_url = {s3.endpoint}\n")
    store = store_for(f"s3://{bucket}/ds", {"skip_instance_cache": True})
    store.write_atomic("a.bin", FILE)  # s3fs
    assert store.list_files() == ["a.bin"]  # s3fs
    assert store.read_bounded("a.bin", "a test file", 1 << 20) == FILE  # tensorfile's client
    assert store.version("a.bin") is not None
    assert s3.fs.cat(f"{bucket}/ds/a.bin") == FILE  # on the server the profile names


@pytest.mark.parametrize("how", ["environment", "profile", "option"])
def test_ignored_configured_endpoints_get_no_request(
    aws: Callable[[dict[str, str]], None], tmp_path: Path, how: str
) -> None:
    """``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` (or the profile's or the options'
    ``ignore_configured_endpoint_urls``): the configured endpoints (environment, profile)
    get no request; the load goes to AWS (unreachable here: a clean error, quickly)."""
    with HostileServer(serve_bytes(FILE)) as server:
        profile = f"[default]\nendpoint_url = {server.url}\n"
        if how == "profile":
            profile += "ignore_configured_endpoint_urls = true\n"
        _config(aws, tmp_path, profile, AWS_ENDPOINT_URL=server.url, AWS_REGION="us-east-1",
                AWS_ACCESS_KEY_ID="AKIAREALKEY", AWS_SECRET_ACCESS_KEY="realsecret",
                AWS_SESSION_TOKEN="REAL-SESSION-TOKEN")  # fmt: skip
        options: dict[str, Any] = {}
        if how == "environment":
            aws({"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"})
        elif how == "option":
            options["config_kwargs"] = {"ignore_configured_endpoint_urls": True}
        url = "s3://my-bucket/m.safetensors"
        try:
            open_path(url, timeout=2, retries=0, **options).close()
        except SourceError as exc:
            failed: Exception | None = exc
        else:
            failed = None
        assert server.requests == [], "the endpoint to ignore was asked"
        assert isinstance(failed, SourceError)  # (AWS is out of reach here)
        settings = s3_settings(url, options)
        assert settings is not None
        assert settings.url == "https://my-bucket.s3.us-east-1.amazonaws.com/m.safetensors"
        assert "amazonaws.com" in _botocore_endpoint(**options.get("config_kwargs", {}))
        assert resolved_endpoint(url, options) is None  # the cache key: AWS's
        # an endpoint passed as an option is used all the same (as botocore does)
        with open_path(url, endpoint_url=server.url, **options) as src:
            assert src.read(0, 8) == FILE[:8]
        assert server.requests
        assert resolved_endpoint(url, {**options, "endpoint_url": server.url}) == server.url


def test_without_the_switch_the_environment_endpoint_is_used(
    aws: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """The control of the test above: the same environment, the switch off (``false``, as
    botocore reads it), reaches the recording server."""
    with HostileServer(serve_bytes(FILE)) as server:
        _config(aws, tmp_path, "[default]\nignore_configured_endpoint_urls = true\n",
                AWS_ENDPOINT_URL=server.url, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS="false",
                AWS_ACCESS_KEY_ID="AKIAREALKEY", AWS_SECRET_ACCESS_KEY="realsecret")  # fmt: skip
        with open_path("s3://my-bucket/m.safetensors", timeout=5, retries=0) as src:
            assert src.read(0, 8) == FILE[:8]
        assert server.requests
        assert _botocore_endpoint() == server.url
        assert resolved_endpoint("s3://my-bucket/m.safetensors", {}) == server.url


CONFIGS = [
    "[default]\nendpoint_url = http://127.0.0.1:1\nregion = eu-west-3\n",
    "[profile corp]\nendpoint_url = http://127.0.0.1:2\n[default]\nregion = us-east-2\n",
    '[profile "corp"]\nservices = lab\n[services lab]\ns3 =\n  endpoint_url = http://h:3\n'
    "  addressing_style = path\nsqs =\n  endpoint_url = http://h:4\n",
    "[profile corp]\nservices = missing\n",
    "[profile other]\nregion = eu-west-1\n",
    "[default\nregion = x\n",
    "[default]\ns3 =\n  no equals sign\n",
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("profile", [None, "corp"])
def test_the_profile_reader_reads_as_botocore_does(
    aws: Callable[[dict[str, str]], None], tmp_path: Path, config: str, profile: str | None
) -> None:
    """Where botocore is not installed, the config file is read the way botocore reads it:
    the same settings, or a clear error where botocore refuses the file or the profile."""
    from tensorfile.sources.s3._profile import aws_profile, read_profile

    (tmp_path / "config").write_text(config)
    aws({"AWS_CONFIG_FILE": str(tmp_path / "config")})
    env = {"AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": "/none"}
    try:
        want = aws_profile(profile)
    except InvalidArgumentError:
        with pytest.raises(InvalidArgumentError, match="AWS profile"):
            read_profile(profile, env)
        return
    got = read_profile(profile, env)
    assert (got.name, got.values, got.services) == (want.name, want.values, want.services)


def test_a_changed_profile_is_read_again(
    aws: Callable[[dict[str, str]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile is read once per change (of the file, or of the variable naming it or
    the profile): an edited file, another file or another profile is followed."""
    _config(aws, tmp_path, "[default]\nendpoint_url = http://127.0.0.1:1\n")
    assert resolved_endpoint("s3://b/k", {}) == "http://127.0.0.1:1"
    (tmp_path / "config").write_text(
        "[default]\nendpoint_url = http://127.0.0.1:22\n[profile x]\nendpoint_url = http://x\n"
    )
    assert resolved_endpoint("s3://b/k", {}) == "http://127.0.0.1:22"
    assert resolved_endpoint("s3://b/k", {"profile": "x"}) == "http://x"
    monkeypatch.setenv("AWS_PROFILE", "x")
    assert resolved_endpoint("s3://b/k", {}) == "http://x"
    other = tmp_path / "other"
    other.write_text("[profile x]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(other))
    assert resolved_endpoint("s3://b/k", {}) is None


def test_an_unreadable_profile_is_refused_without_quoting_it(
    aws: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """A config file that cannot be parsed is an error before any connection (not a silent
    fall back to AWS), and the error does not quote the file's lines."""
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYSECRET"
    _config(aws, tmp_path, f"[default]\naws_secret_access_key = {secret}\nbroken {secret}\n")
    with pytest.raises(InvalidArgumentError, match="AWS profile default cannot be read") as caught:
        open_path("s3://bkt/m.safetensors", anon=True, timeout=2, retries=0)
    assert secret not in str(caught.value)
    from tensorfile.sources.s3._profile import read_profile

    env = {"AWS_CONFIG_FILE": str(tmp_path / "config")}
    with pytest.raises(InvalidArgumentError, match="AWS profile default cannot be read") as caught:
        read_profile(None, env)
    assert secret not in str(caught.value)


@pytest.mark.parametrize("empty", [None, ""])
def test_an_empty_endpoint_option_keeps_the_resolved_endpoint_in_the_cache_key(
    aws: Callable[[dict[str, str]], None], tmp_path: Path, empty: str | None
) -> None:
    """Review d08: ``endpoint_url=None`` (or ``""``) names no endpoint (the client goes to
    ``$AWS_ENDPOINT_URL``'s): the cache key counts that endpoint, so a read from X after
    one from Y (same object name, size and ETag, other bytes) gets X's bytes."""
    other = safetensors.numpy.save({k: v + 1 for k, v in TENSORS.items()})
    assert len(other) == len(FILE)
    aws({"AWS_ACCESS_KEY_ID": "AKIAUSER", "AWS_SECRET_ACCESS_KEY": "s"})
    url, cache = "s3://bkt/m.safetensors", str(tmp_path / "cache")
    with (
        HostileServer(serve_bytes(FILE, etag='"same"')) as x,
        HostileServer(serve_bytes(other, etag='"same"')) as y,
    ):
        for server, want in ((y, other), (x, FILE)):
            aws({"AWS_ENDPOINT_URL": server.url})
            with open_path(url, cache_dir=cache, endpoint_url=empty, retries=0) as src:
                assert src.read(0, src.size) == want
            assert resolved_endpoint(url, {"endpoint_url": empty}) == server.url
        assert x.requests, "the read from X was served from Y's cached bytes"


def test_aws_default_profile_comes_before_aws_profile(
    aws: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """Review d02: with ``$AWS_PROFILE`` and ``$AWS_DEFAULT_PROFILE`` both set, botocore
    (s3fs, boto3) reads ``$AWS_DEFAULT_PROFILE``'s: so does tensorfile's client (one
    server for a store's reads and its s3fs writes)."""
    with HostileServer(serve_bytes(FILE)) as prod, HostileServer(serve_bytes(b"")) as lab:
        text = (f"[profile lab]\nregion = us-east-1\nendpoint_url = {lab.url}\n"
                f"[profile prod]\nregion = us-east-1\nendpoint_url = {prod.url}\n")  # fmt: skip
        (tmp_path / "config").write_text(text)
        (tmp_path / "credentials").write_text(f"[lab]\n{CREDENTIALS}[prod]\n{CREDENTIALS}")
        aws({"AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_PROFILE": "lab",
             "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
             "AWS_DEFAULT_PROFILE": "prod"})  # fmt: skip
        url = "s3://models/m.safetensors"
        with open_path(url, timeout=5, retries=0) as src:
            assert src.read(0, 8) == FILE[:8]
        assert prod.requests and not lab.requests
        assert _botocore_endpoint() == prod.url == resolved_endpoint(url, {})
        from tensorfile.sources.s3._profile import read_profile

        env = {"AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_PROFILE": "lab",
               "AWS_DEFAULT_PROFILE": "prod"}  # fmt: skip
        assert read_profile(None, env).get("endpoint_url") == prod.url


@pytest.mark.parametrize("switch", [1, "1", "yes", "false", "", 0, False, True], ids=repr)
def test_the_ignore_option_is_read_as_botocore_reads_it(
    aws: Callable[[dict[str, str]], None], switch: object
) -> None:
    """Review d07: ``config_kwargs.ignore_configured_endpoint_urls`` is taken by its truth,
    as botocore's ``Config`` takes it (``1``, ``"yes"``, even ``"false"``: ignore): the
    client and s3fs (botocore) go to the same server."""
    configured = "http://127.0.0.1:9"
    aws({"AWS_ENDPOINT_URL": configured, "AWS_REGION": "us-east-1"})
    options = {"config_kwargs": {"ignore_configured_endpoint_urls": switch}}
    url = "s3://my-bucket/m.safetensors"
    settings = s3_settings(url, options)
    assert settings is not None
    to_aws = "amazonaws.com" in _botocore_endpoint(ignore_configured_endpoint_urls=switch)
    assert to_aws is bool(switch)  # (the reference)
    assert ("amazonaws.com" in settings.url) is to_aws
    assert settings.url.startswith(configured) is not to_aws
    assert resolved_endpoint(url, options) == (None if switch else configured)
