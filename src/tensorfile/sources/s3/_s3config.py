"""Where an ``s3://`` URL leads and how to sign for it, from the usual places.

:func:`s3_settings` resolves, for one ``s3://bucket/key`` URL and the caller's
``storage_options`` (s3fs's names, so code written for fsspec keeps working):

* the endpoint, in botocore's order: ``endpoint_url`` (or
  ``client_kwargs={"endpoint_url": ...}``), else (unless
  ``config_kwargs={"ignore_configured_endpoint_urls": True}``,
  ``$AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` or the profile's
  ``ignore_configured_endpoint_urls = true`` says to ignore the configured ones)
  ``$AWS_ENDPOINT_URL_S3``, ``$AWS_ENDPOINT_URL``, the ``s3`` block's ``endpoint_url`` of
  the AWS profile's services section, the profile's ``endpoint_url``; else AWS
  (``https://s3.<region>.amazonaws.com``). The profile (``profile=``, else
  ``$AWS_DEFAULT_PROFILE``, else ``$AWS_PROFILE``: botocore's order) is read as botocore
  reads it (:mod:`._profile`), so s3fs and this client reach the same server;
* the region: ``client_kwargs={"region_name": ...}``, else ``$AWS_REGION``,
  ``$AWS_DEFAULT_REGION``, the profile's ``region``, else ``us-east-1``;
* the addressing: path style (``endpoint/bucket/key``) for a custom endpoint or a bucket
  name that is no DNS label, virtual hosts (``bucket.s3.<region>.amazonaws.com``) on AWS;
  ``config_kwargs={"s3": {"addressing_style": ...}}`` or
  ``$TENSORFILE_S3_ADDRESSING_STYLE`` (``path``/``virtual``) decides otherwise;
* every one of these that goes into a request's URL is checked before anything connects,
  whether this client or fsspec reads the URL: the endpoint is ``http(s)://host[:port]``
  (an optional path, no user, query or fragment), the region a region name (botocore's
  rule: ``AWS_REGION='evil.example#'`` would name another host), the addressing style one
  of ``auto``/``path``/``virtual``; a bucket that is no DNS label is never a host name;
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
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidArgumentError
from ..http import redact, scrub
from ._profile import AwsProfile, aws_profile, env_profile
from ._sigv4 import Credentials

__all__ = [
    "CLIENT_ENV",
    "IGNORE_ENV",
    "STYLE_ENV",
    "S3Config",
    "S3Settings",
    "check_endpoint",
    "check_region",
    "parse_s3_url",
    "s3_config",
    "s3_endpoint",
    "s3_settings",
]

CLIENT_ENV = "TENSORFILE_S3"
"""``fsspec`` sends ``s3://`` URLs to fsspec (s3fs) instead of tensorfile's own client."""

STYLE_ENV = "TENSORFILE_S3_ADDRESSING_STYLE"
"""``path`` or ``virtual``: how an ``s3://`` URL becomes an HTTP one (default: see above)."""

IGNORE_ENV = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
"""``true``: the endpoints of the environment and the profile are ignored (botocore's)."""

_REGION = re.compile(r"(?![0-9]+$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
"""A region name (botocore's ``validate_region_name``, anchored at both ends)."""
_HOST = re.compile(r"((?!-)[A-Za-z0-9-]{1,63}(?<!-)\.)*(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
"""A DNS host name (botocore's ``is_valid_endpoint_url``)."""
_PATH = re.compile(r"(/[A-Za-z0-9._~%!$&'()*+,;=:@-]*)*")
_STYLES = frozenset({"auto", "path", "virtual"})
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]", re.IGNORECASE)
_DNS_BUCKET = re.compile(r"[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]")
_OPTIONS = {"key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs",
            "profile", "default_block_size", "default_fill_cache", "use_listings_cache",
            "skip_instance_cache"}  # fmt: skip
_CLIENT_KWARGS = {"region_name", "endpoint_url", "aws_access_key_id", "aws_secret_access_key",
                  "aws_session_token", "verify", "use_ssl"}  # fmt: skip
_CONFIG_KWARGS = {"s3", "retries", "connect_timeout", "read_timeout", "max_pool_connections",
                  "signature_version", "region_name",
                  "ignore_configured_endpoint_urls"}  # fmt: skip


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
    """The settings of ``url`` (see the module docstring); None: leave it to fsspec. A
    setting that would put something other than a host name, a region or a path into the
    request's URL is an :class:`~tensorfile.errors.InvalidArgumentError`, also for a URL left
    to fsspec."""
    where = parse_s3_url(url)
    config = s3_config(where[0] if where else None, options, env)
    return None if config is None or where is None else config.settings(where[1])


@dataclass(frozen=True)
class S3Config:
    """How to reach the objects of one bucket: the endpoint (None: AWS), the region, the
    addressing, the credentials, and the timeout and retries the options asked for.
    :meth:`settings` gives one object's."""

    bucket: str
    endpoint: str | None
    region: str
    style: str
    credentials: Callable[[], Credentials | None]
    timeout: float | None = None
    retries: int | None = None

    def settings(self, key: str) -> S3Settings:
        """The settings of the object ``key`` of the bucket.

        Example:
            >>> c = s3_config("bkt", {"anon": True}, env={"AWS_REGION": "eu-west-1"})
            >>> c.settings("a b").url
            'https://bkt.s3.eu-west-1.amazonaws.com/a%20b'
        """
        bucket, quoted = self.bucket, urllib.parse.quote(key, safe="/~")
        if self.endpoint is None:
            virtual = self.style != "path" and _DNS_BUCKET.fullmatch(bucket) is not None
            host = f"s3.{self.region}.amazonaws.com"
            http = (
                f"https://{bucket}.{host}/{quoted}"
                if virtual
                else f"https://{host}/{bucket}/{quoted}"
            )
        else:
            base = self.endpoint.rstrip("/")
            if self.style == "virtual" and _DNS_BUCKET.fullmatch(bucket):
                scheme, _, rest = base.partition("://")
                http = f"{scheme}://{bucket}.{rest}/{quoted}"
            else:
                http = f"{base}/{bucket}/{quoted}"
        return S3Settings(
            http, self.region, self.credentials, timeout=self.timeout, retries=self.retries
        )


def s3_config(
    bucket: str | None, options: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> S3Config | None:
    """How tensorfile's client reaches ``bucket`` with ``options`` (see the module
    docstring); None: leave it to fsspec (``bucket`` None: a URL this client does not read).
    The endpoint, region and addressing style are checked first, whoever reads the bucket:
    a bad one is an :class:`~tensorfile.errors.InvalidArgumentError` naming the setting and
    where it came from, before any connection.

    Example:
        >>> try:
        ...     s3_config("bkt", {}, env={"AWS_REGION": "evil.example#"})
        ... except InvalidArgumentError as exc:
        ...     print(exc)  # doctest: +ELLIPSIS
        the S3 region 'evil.example#' (from $AWS_REGION) is not a region name: ...
    """
    env = os.environ if env is None else env
    endpoint, region, style, profile = _checked(options, env)
    client, config = _mapping(options.get("client_kwargs")), _mapping(options.get("config_kwargs"))
    anon = options.get("anon", False) or config.get("signature_version") == "UNSIGNED"
    given = None if anon else _given_credentials(options, client, env, profile)
    if bucket is None or env.get(CLIENT_ENV, "").strip().lower() == "fsspec":
        return None
    if not _understood(options) or not _BUCKET.fullmatch(bucket) or ".." in bucket:
        return None
    credentials = _no_credentials if anon else _credentials(given, env, profile)
    retries = config.get("retries")
    attempts = retries.get("max_attempts") if isinstance(retries, Mapping) else None
    timeout = config.get("read_timeout") or config.get("connect_timeout")
    return S3Config(
        bucket,
        endpoint,
        region,
        style,
        credentials,
        timeout=float(timeout) if isinstance(timeout, int | float) else None,
        retries=max(0, attempts - 1) if isinstance(attempts, int) else None,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first(found: list[tuple[Any, str]]) -> tuple[str, str] | None:
    """The first ``(value, where)`` set (checked: a str), else None."""
    for value, where in found:
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{where} must be a str, got {type(value).__name__}")
        return value, where
    return None


def s3_endpoint(options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str | None:
    """The endpoint an ``s3://`` URL with ``options`` is read from, wherever it is set (the
    options, the environment, the AWS profile: see the module docstring), checked; None:
    AWS.

    Example:
        >>> s3_endpoint({}, env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
        'http://127.0.0.1:9000'
        >>> s3_endpoint({"endpoint_url": "http://a:1"}, env={"AWS_ENDPOINT_URL": "http://b:2"})
        'http://a:1'
        >>> print(s3_endpoint({}, env={"AWS_ENDPOINT_URL": "http://b:2", IGNORE_ENV: "true"}))
        None
    """
    env = os.environ if env is None else env
    found = _endpoint(options, env, _Profile(_profile_name(options, env), env))
    return found[0] if found else None


class _Profile:
    """The AWS profile, read on first use (at most once per resolution)."""

    def __init__(self, name: str | None, env: Mapping[str, str]) -> None:
        self.name, self._env = name, env
        self._read: AwsProfile | None = None

    def __call__(self) -> AwsProfile:
        if self._read is None:
            self._read = aws_profile(self.name, self._env)
        return self._read


def _profile_name(options: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    return _text(options.get("profile"), "profile") or env_profile(env)


def _endpoint(
    options: Mapping[str, Any], env: Mapping[str, str], profile: _Profile
) -> tuple[str, str] | None:
    """``(endpoint, where it was set)`` (checked), else None (botocore's order)."""
    client = _mapping(options.get("client_kwargs"))
    endpoint = _first(
        [
            (options.get("endpoint_url"), "storage option endpoint_url"),
            (client.get("endpoint_url"), "storage option client_kwargs.endpoint_url"),
        ]
    )
    if endpoint is None and not _ignore_configured(options, env, profile):
        endpoint = _first(
            [
                (env.get("AWS_ENDPOINT_URL_S3"), "$AWS_ENDPOINT_URL_S3"),
                (env.get("AWS_ENDPOINT_URL"), "$AWS_ENDPOINT_URL"),
            ]
        )
        if endpoint is None:
            named = profile()
            where = f"the AWS profile {named.name}"
            endpoint = _first(
                [
                    (named.s3("endpoint_url"),
                     f"the s3 endpoint_url of [services {named.services_name}] of {where}"),
                    (named.get("endpoint_url"), f"the endpoint_url of {where}"),
                ]
            )  # fmt: skip
    if endpoint is not None:
        check_endpoint(*endpoint)
    return endpoint


def _ignore_configured(
    options: Mapping[str, Any], env: Mapping[str, str], profile: _Profile
) -> bool:
    """Whether the endpoints of the environment and the profile are ignored: the option
    ``config_kwargs.ignore_configured_endpoint_urls``, else :data:`IGNORE_ENV` (when set,
    it decides), else the profile's ``ignore_configured_endpoint_urls``. As botocore reads
    them: the option by its truth (botocore's ``Config`` value is used as given: ``1``,
    ``"yes"``, even ``"false"`` are true), the variable and the profile's setting true when
    ``True`` or ``true`` in any case (its ``ensure_boolean``)."""
    switch = _mapping(options.get("config_kwargs")).get("ignore_configured_endpoint_urls")
    if switch is not None:
        return bool(switch)
    switch = (
        env[IGNORE_ENV] if IGNORE_ENV in env else profile().get("ignore_configured_endpoint_urls")
    )
    return switch is True or (isinstance(switch, str) and switch.lower() == "true")


def _checked(
    options: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[str | None, str, str, str | None]:
    """The endpoint, region, addressing style and profile the options and the environment
    say, each checked (see :func:`s3_config`)."""
    client, config = _mapping(options.get("client_kwargs")), _mapping(options.get("config_kwargs"))
    named = _Profile(_profile_name(options, env), env)
    endpoint = _endpoint(options, env, named)
    region = _first(
        [
            (client.get("region_name"), "storage option client_kwargs.region_name"),
            (config.get("region_name"), "storage option config_kwargs.region_name"),
            (env.get("AWS_REGION"), "$AWS_REGION"),
            (env.get("AWS_DEFAULT_REGION"), "$AWS_DEFAULT_REGION"),
        ]
    )
    if region is None:
        region = _first([(named().get("region"), f"the region of the AWS profile {named().name}")])
    if region is not None:
        check_region(*region)
    style = _first(
        [
            (_mapping(config.get("s3")).get("addressing_style"),
             "storage option config_kwargs.s3.addressing_style"),
            (env.get(STYLE_ENV, "").strip() or None, f"${STYLE_ENV}"),
        ]
    )  # fmt: skip
    if style is not None and style[0].lower() not in _STYLES:
        raise InvalidArgumentError(
            f"the S3 addressing style {style[0]!r} (from {style[1]}) is not one of "
            f"{', '.join(sorted(_STYLES))}"
        )
    return (
        endpoint[0] if endpoint else None,
        region[0] if region else "us-east-1",
        style[0].lower() if style else "",
        named.name,
    )


def check_region(region: str, where: str) -> str:
    """``region`` if it is a region name (botocore's rule: a DNS label of letters, digits
    and ``-``, not all digits), else an :class:`~tensorfile.errors.InvalidArgumentError`
    naming ``where`` it came from: a region becomes part of the host name.

    Example:
        >>> check_region("eu-west-3", "$AWS_REGION")
        'eu-west-3'
    """
    if not _REGION.fullmatch(region):
        raise InvalidArgumentError(
            f"the S3 region {region!r} (from {where}) is not a region name: letters, digits "
            "and '-', at most 63, as in 'eu-west-3'"
        )
    return region


def check_endpoint(endpoint: str, where: str) -> str:
    """``endpoint`` if it is an ``http(s)://host[:port][/path]`` URL whose host is a host
    name or an IP address (no user, query or fragment), else an
    :class:`~tensorfile.errors.InvalidArgumentError` naming ``where`` it came from.

    Example:
        >>> check_endpoint("http://127.0.0.1:9000", "storage option endpoint_url")
        'http://127.0.0.1:9000'
    """

    def bad(why: str) -> InvalidArgumentError:
        shown = redact(endpoint, malformed=True)  # (never the user, password or query it holds)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        return InvalidArgumentError(
            f"the S3 endpoint {shown!r} (from {where}) is not an endpoint URL: "
            f"{scrub(why, endpoint)}"
        )

    if any(not c.isprintable() or c.isspace() for c in endpoint):
        raise bad("it holds spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme.lower() not in ("http", "https"):
        raise bad("it must start with http:// or https://")
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in endpoint or "#" in endpoint:
        raise bad("a user, a query or a fragment has no place in it")
    host = parts.hostname or ""
    if port == 0 or not _host_ok(host, bracketed=parts.netloc.startswith("[")):
        raise bad("no host name or IP address (and port) as its authority")
    if not _PATH.fullmatch(parts.path):
        raise bad("its path holds characters a URL path cannot")
    return endpoint


def _host_ok(host: str, *, bracketed: bool) -> bool:
    """Whether ``host`` (of a URL's authority) is an IP address or a DNS host name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return not bracketed and len(host) <= 255 and _HOST.fullmatch(host.rstrip(".")) is not None
    return bracketed == (address.version == 6)


def _no_credentials() -> Credentials | None:
    return None


def _given_credentials(
    options: Mapping[str, Any],
    client: Mapping[str, Any],
    env: Mapping[str, str],
    profile: str | None,
) -> Credentials | None:
    """The credentials the storage options or the environment give (the first two places of
    the module docstring), checked (:func:`check_credentials`) whoever reads the URL: a
    session token with a line end would be refused by ``http.client`` in s3fs's request too,
    with the token in the message."""
    key, secret, token = [
        _first([(options.get(name), f"storage option {name}"),
                (client.get(f"aws_{alias}"), f"storage option client_kwargs.aws_{alias}")])
        for name, alias in (("key", "access_key_id"), ("secret", "secret_access_key"),
                            ("token", "session_token"))
    ]  # fmt: skip
    if key or secret:
        if not (key and secret):
            raise InvalidArgumentError("storage options key and secret go together")
        return check_credentials(Credentials(key[0], secret[0], token and token[0]),
                                 key[1], secret[1], token[1] if token else "")  # fmt: skip
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY") and not profile:
        return check_credentials(
            Credentials(
                env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
            ),
            "$AWS_ACCESS_KEY_ID", "$AWS_SECRET_ACCESS_KEY", "$AWS_SESSION_TOKEN",
        )  # fmt: skip
    return None


def _credentials(
    given: Credentials | None, env: Mapping[str, str], profile: str | None
) -> Callable[[], Credentials | None]:
    """The credentials' source, in the order of the module docstring, each checked before it
    signs anything: ``given`` (:func:`_given_credentials`), else botocore's chain, else the
    shared credentials file."""
    if given is not None:
        return lambda: given
    chain = _botocore_chain(profile)
    if chain is not None:
        return chain
    found = _shared_file(env, profile)
    return lambda: found


_VISIBLE = re.compile(r"[\x21-\x7e]+")
"""What an access key id and a session token may hold: they go into request headers."""
_CONTROL_CHAR = re.compile(r"[\x00-\x1f\x7f]")


def check_credentials(creds: Credentials, key: str, secret: str, token: str) -> Credentials:
    """``creds`` when its access key id and session token are visible ASCII (no space, no
    control character: they are sent in headers) and its secret holds no control character,
    else an :class:`~tensorfile.errors.InvalidArgumentError` naming the setting (``key``,
    ``secret``, ``token``: where each came from), never its value. A token file saved with
    Windows line ends leaves a ``\\r`` at the end of ``$AWS_SESSION_TOKEN``; ``http.client``
    refused the header with the whole token in its message.

    Example:
        >>> c = Credentials("AKIAEXAMPLE", "secret", "token\\r")
        >>> names = "$AWS_ACCESS_KEY_ID", "$AWS_SECRET_ACCESS_KEY", "$AWS_SESSION_TOKEN"
        >>> try:
        ...     check_credentials(c, *names)
        ... except InvalidArgumentError as exc:
        ...     print(exc)  # doctest: +ELLIPSIS
        the S3 session token (from $AWS_SESSION_TOKEN) holds a space or a control character...
    """
    fields = (
        ("access key id", key, _VISIBLE.fullmatch(creds.key) is not None),
        ("secret access key", secret, not _CONTROL_CHAR.search(creds.secret)),
        ("session token", token, not creds.token or _VISIBLE.fullmatch(creds.token) is not None),
    )  # fmt: skip
    for what, where, ok in fields:
        if not ok:
            raise InvalidArgumentError(
                f"the S3 {what} (from {where}) holds a space or a control character (a line "
                "end of a file saved on Windows, say): it cannot be sent; its value is not shown"
            )
    return creds


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
        where = f"the AWS credentials botocore found ({found.method})"
        return check_credentials(
            Credentials(now.access_key, now.secret_key, now.token), where, where, where
        )

    return frozen


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
    where = f"{path} [{section}]"
    return check_credentials(
        Credentials(
            key.strip(), secret.strip(), (items.get("aws_session_token") or "").strip() or None
        ),
        f"{where} aws_access_key_id", f"{where} aws_secret_access_key",
        f"{where} aws_session_token",
    )  # fmt: skip
