"""Where an ``s3://`` URL leads and how to sign for it, from the usual places.

:func:`s3_settings` resolves, for one ``s3://bucket/key`` URL and the caller's
``storage_options`` (s3fs's names, so code written for fsspec keeps working):

* the endpoint: ``endpoint_url`` (or ``client_kwargs={"endpoint_url": ...}``), else
  ``$AWS_ENDPOINT_URL_S3``, ``$AWS_ENDPOINT_URL``, else AWS (``https://s3.<region>.amazonaws.com``);
* the region: ``client_kwargs={"region_name": ...}``, else ``$AWS_REGION``,
  ``$AWS_DEFAULT_REGION``, the profile's ``region`` (through botocore, when installed), else
  ``us-east-1``;
* the addressing: path style (``endpoint/bucket/key``) for a custom endpoint or a bucket
  name that is no DNS label, virtual hosts (``bucket.s3.<region>.amazonaws.com``) on AWS;
  ``config_kwargs={"s3": {"addressing_style": ...}}`` or
  ``$TENSORFILE_S3_ADDRESSING_STYLE`` (``path``/``virtual``) decides otherwise;
* the credentials: ``key``/``secret``/``token`` (or ``client_kwargs``' ``aws_*`` names),
  else ``$AWS_ACCESS_KEY_ID``/``$AWS_SECRET_ACCESS_KEY``/``$AWS_SESSION_TOKEN``, else
  botocore's whole chain when it is installed (``$AWS_PROFILE``/``profile=``, the shared
  files, SSO, assumed roles, container and instance metadata; refreshed as they expire),
  else the ``[default]`` (or ``$AWS_PROFILE``) section of ``~/.aws/credentials``; none
  found, or ``anon=True``: unsigned requests (a public bucket).

Options this client does not understand return None: the caller falls back to fsspec
(s3fs), which takes every option botocore takes. So does ``$TENSORFILE_S3=fsspec``.

Example:
    >>> s = s3_settings("s3://bucket/dir/m v1.safetensors",
    ...                 {"endpoint_url": "http://127.0.0.1:9000", "anon": True}, env={})
    >>> s.url, s.region, s.credentials()
    ('http://127.0.0.1:9000/bucket/dir/m%20v1.safetensors', 'us-east-1', None)
    >>> s3_settings("s3://bucket/m", {"requester_pays": True}, env={}) is None
    True
"""

from __future__ import annotations

import configparser
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidArgumentError
from ._sigv4 import Credentials

__all__ = ["CLIENT_ENV", "S3Settings", "parse_s3_url", "s3_settings"]

CLIENT_ENV = "TENSORFILE_S3"
"""``fsspec`` sends ``s3://`` URLs to fsspec (s3fs) instead of tensorfile's own client."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]", re.IGNORECASE)
_DNS_BUCKET = re.compile(r"[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]")
_OPTIONS = {"key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs",
            "profile", "default_block_size", "default_fill_cache", "use_listings_cache",
            "skip_instance_cache"}  # fmt: skip
_CLIENT_KWARGS = {"region_name", "endpoint_url", "aws_access_key_id", "aws_secret_access_key",
                  "aws_session_token", "verify", "use_ssl"}  # fmt: skip
_CONFIG_KWARGS = {"s3", "retries", "connect_timeout", "read_timeout", "max_pool_connections",
                  "signature_version", "region_name"}  # fmt: skip


@dataclass(frozen=True)
class S3Settings:
    """How to reach one object: the ``http(s)`` URL of its bytes, the region a signature
    names, the credentials (a callable: temporary ones are refreshed), and the timeout and
    retries the options asked for (None: the transport's defaults)."""

    url: str
    region: str
    credentials: Callable[[], Credentials | None]
    timeout: float | None = None
    retries: int | None = None


def parse_s3_url(url: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of ``s3://bucket/key`` (also ``s3a://``); None for a URL this client
    leaves to fsspec (credentials or a query in it, no key, an unusual bucket name).

    Example:
        >>> parse_s3_url("s3://my-bucket/a/b.safetensors"), parse_s3_url("s3://b/k?versionId=1")
        (('my-bucket', 'a/b.safetensors'), None)
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("s3", "s3a") or any(c in rest for c in "?#@"):
        return None
    bucket, _, key = rest.partition("/")
    if not key or not _BUCKET.fullmatch(bucket) or ".." in bucket:
        return None
    return bucket, key


def _understood(options: Mapping[str, Any]) -> bool:
    """Whether every storage option is one this client honours (else: fsspec)."""
    if not set(options) <= _OPTIONS:
        return False
    client = options.get("client_kwargs") or {}
    config = options.get("config_kwargs") or {}
    if not isinstance(client, Mapping) or not isinstance(config, Mapping):
        return False
    if not set(client) <= _CLIENT_KWARGS or not set(config) <= _CONFIG_KWARGS:
        return False
    if client.get("verify", True) is not True or client.get("use_ssl", True) is not True:
        return False  # custom CA bundles or plain http to AWS: fsspec
    s3 = config.get("s3") or {}
    if not isinstance(s3, Mapping) or not set(s3) <= {"addressing_style"}:
        return False
    signature = config.get("signature_version")
    return signature is None or signature in ("s3v4", "UNSIGNED")


def _text(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"storage option {name} must be a str")
    return value


def s3_settings(
    url: str, options: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> S3Settings | None:
    """The settings of ``url`` (see the module docstring); None: leave it to fsspec."""
    env = os.environ if env is None else env
    where = parse_s3_url(url)
    if where is None or env.get(CLIENT_ENV, "").strip().lower() == "fsspec":
        return None
    if not _understood(options):
        return None
    bucket, key = where
    client: Mapping[str, Any] = options.get("client_kwargs") or {}
    config: Mapping[str, Any] = options.get("config_kwargs") or {}
    profile = _text(options.get("profile"), "profile") or env.get("AWS_PROFILE") or None
    endpoint = (
        _text(options.get("endpoint_url"), "endpoint_url")
        or _text(client.get("endpoint_url"), "client_kwargs.endpoint_url")
        or env.get("AWS_ENDPOINT_URL_S3")
        or env.get("AWS_ENDPOINT_URL")
        or None
    )
    region = (
        _text(client.get("region_name"), "client_kwargs.region_name")
        or _text(config.get("region_name"), "config_kwargs.region_name")
        or env.get("AWS_REGION")
        or env.get("AWS_DEFAULT_REGION")
        or _profile_region(profile)
        or "us-east-1"
    )
    style = ((config.get("s3") or {}).get("addressing_style") or "").lower()
    style = style or env.get("TENSORFILE_S3_ADDRESSING_STYLE", "").strip().lower()
    quoted = urllib.parse.quote(key, safe="/~")
    if endpoint is None:
        virtual = style != "path" and _DNS_BUCKET.fullmatch(bucket) is not None
        host = f"s3.{region}.amazonaws.com"
        http = (
            f"https://{bucket}.{host}/{quoted}" if virtual else f"https://{host}/{bucket}/{quoted}"
        )
    else:
        base = endpoint.rstrip("/")
        if style == "virtual" and _DNS_BUCKET.fullmatch(bucket):
            scheme, _, rest = base.partition("://")
            http = f"{scheme}://{bucket}.{rest}/{quoted}"
        else:
            http = f"{base}/{bucket}/{quoted}"
    anon = options.get("anon", False) or config.get("signature_version") == "UNSIGNED"
    credentials = _no_credentials if anon else _credentials(options, client, env, profile)
    retries = config.get("retries")
    attempts = retries.get("max_attempts") if isinstance(retries, Mapping) else None
    timeout = config.get("read_timeout") or config.get("connect_timeout")
    return S3Settings(
        http,
        region,
        credentials,
        timeout=float(timeout) if isinstance(timeout, int | float) else None,
        retries=max(0, attempts - 1) if isinstance(attempts, int) else None,
    )


def _no_credentials() -> Credentials | None:
    return None


def _credentials(
    options: Mapping[str, Any],
    client: Mapping[str, Any],
    env: Mapping[str, str],
    profile: str | None,
) -> Callable[[], Credentials | None]:
    """The credentials' source, in the order of the module docstring."""
    key = _text(options.get("key"), "key") or _text(
        client.get("aws_access_key_id"), "client_kwargs.aws_access_key_id"
    )
    secret = _text(options.get("secret"), "secret") or _text(
        client.get("aws_secret_access_key"), "client_kwargs.aws_secret_access_key"
    )
    token = _text(options.get("token"), "token") or _text(
        client.get("aws_session_token"), "client_kwargs.aws_session_token"
    )
    if key or secret:
        if not (key and secret):
            raise InvalidArgumentError("storage options key and secret go together")
        fixed = Credentials(key, secret, token)
        return lambda: fixed
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY") and not profile:
        fixed = Credentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
        )
        return lambda: fixed
    chain = _botocore_chain(profile)
    if chain is not None:
        return chain
    found = _shared_file(env, profile)
    return lambda: found


def _botocore_chain(profile: str | None) -> Callable[[], Credentials | None] | None:
    """botocore's credential chain (None when botocore is not installed)."""
    try:
        import botocore.session  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        found = botocore.session.Session(profile=profile).get_credentials()
    except Exception as exc:  # a profile that does not exist, a broken config file
        raise InvalidArgumentError(
            f"AWS credentials: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    if found is None:
        return _no_credentials

    def frozen() -> Credentials | None:
        now = found.get_frozen_credentials()  # refreshed when temporary ones expire
        return Credentials(now.access_key, now.secret_key, now.token)

    return frozen


def _profile_region(profile: str | None) -> str | None:
    try:
        import botocore.session
    except ImportError:
        return None
    try:
        region = botocore.session.Session(profile=profile).get_config_variable("region")
    except Exception:
        return None
    return region if isinstance(region, str) and region else None


def _shared_file(env: Mapping[str, str], profile: str | None) -> Credentials | None:
    """The profile's keys in ``~/.aws/credentials`` (``$AWS_SHARED_CREDENTIALS_FILE``)."""
    path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return None
    section = profile or "default"
    if not parser.has_section(section):
        return None
    items = parser[section]
    key, secret = items.get("aws_access_key_id"), items.get("aws_secret_access_key")
    if not key or not secret:
        return None
    return Credentials(
        key.strip(), secret.strip(), (items.get("aws_session_token") or "").strip() or None
    )
