"""The AWS profile an ``s3://`` URL's settings may come from, read as botocore reads it.

:func:`aws_profile` gives the settings of one profile (``profile=``, else ``$AWS_DEFAULT_PROFILE``,
``$AWS_PROFILE``, else ``default``: botocore's order) of the shared config file
(``$AWS_CONFIG_FILE``, else ``~/.aws/config``), with the ``[services name]`` section it
names, if any (``services = name``; there ``s3 =`` opens an indented block of the S3
client's settings, such as its ``endpoint_url``). :mod:`._s3config` takes the ``region``,
``endpoint_url`` and ``ignore_configured_endpoint_urls`` from it, in botocore's order.

With botocore installed, botocore's own config loading reads the files and picks the
profile (whatever it makes of a file is what s3fs and boto3 make of it too); without it,
the config file is read the same way (:func:`read_profile`: ``[default]`` or ``[profile
name]``, ``[services name]``, indented blocks as nested settings, a profile also named by
the credentials file). A file that cannot be parsed, a profile that does not exist or a
services section that does not exist is an :class:`~tensorfile.errors.InvalidArgumentError`:
a configured endpoint is never dropped silently (the request would go to AWS, to a bucket
of the same name that anyone may own).

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "config")
    >>> with open(path, "w") as f:
    ...     _ = f.write("[profile corp]\\nservices = lab\\n[services lab]\\ns3 =\\n"
    ...                 "  endpoint_url = http://127.0.0.1:9000\\n")
    >>> p = read_profile("corp", {"AWS_CONFIG_FILE": path})
    >>> p.name, p.s3("endpoint_url"), p.get("region")
    ('corp', 'http://127.0.0.1:9000', None)
"""

from __future__ import annotations

import configparser
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import InvalidArgumentError

__all__ = ["AwsProfile", "aws_profile", "env_profile", "read_profile"]


@dataclass(frozen=True)
class AwsProfile:
    """One profile's settings (``values``) and its services section's (``services``)."""

    name: str
    values: Mapping[str, Any] = field(default_factory=dict)
    services: Mapping[str, Any] = field(default_factory=dict)
    services_name: str | None = None

    def get(self, key: str) -> Any:
        """The profile's setting ``key`` (None: not set)."""
        return self.values.get(key)

    def s3(self, key: str) -> Any:
        """The setting ``key`` of the ``s3`` block of the profile's services section."""
        block = self.services.get("s3")
        return block.get(key) if isinstance(block, Mapping) else None


_FILES = (
    ("AWS_CONFIG_FILE", "~/.aws/config"),
    ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
)
_NAMES = (*(name for name, _ in _FILES), "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
_read: dict[tuple[Any, ...], AwsProfile] = {}
"""Profiles read, by what decides them (every ``s3://`` URL opened, every shard's cache key
asks: the files are read again only when they or the variables naming them change)."""


def env_profile(env: Mapping[str, str]) -> str | None:
    """The profile the environment names: ``$AWS_DEFAULT_PROFILE``, else ``$AWS_PROFILE``
    (botocore's order, so s3fs's and boto3's too); None: none.

    Example:
        >>> env_profile({"AWS_PROFILE": "a", "AWS_DEFAULT_PROFILE": "b"})
        'b'
    """
    return env.get("AWS_DEFAULT_PROFILE") or env.get("AWS_PROFILE") or None


def aws_profile(profile: str | None, env: Mapping[str, str] | None = None) -> AwsProfile:
    """The profile ``profile`` (None: the environment's, else ``default``), through botocore
    when it is installed (it reads the process's environment), else :func:`read_profile`
    of ``env``.

    Example:
        >>> aws_profile(None, {"AWS_CONFIG_FILE": "/nonexistent"}).get("endpoint_url") is None
        True
    """
    try:
        import botocore.session  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return read_profile(profile, os.environ if env is None else env)
    key = (profile, *(os.environ.get(n) for n in _NAMES), *(_stat(n, d) for n, d in _FILES))
    found = _read.get(key)
    if found is None:
        found = _botocore_profile(profile)
        if len(_read) >= 16:
            _read.clear()
        _read[key] = found
    return found


def _stat(name: str, default: str) -> tuple[int, ...] | None:
    """What tells whether the file ``$name`` (else ``default``) changed; None: none."""
    path = os.path.expanduser(os.path.expandvars(os.environ.get(name) or default))
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _botocore_profile(profile: str | None) -> AwsProfile:
    """The profile as botocore reads it (see :func:`aws_profile`)."""
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        values = session.get_scoped_config()
        name = session.get_config_variable("profile") or "default"
        services = _services(values, session.full_config.get("services", {}))
    except InvalidArgumentError:
        raise
    except Exception as exc:  # a broken file, a profile that does not exist
        raise _unreadable(profile, exc) from None
    return AwsProfile(str(name), values, services, values.get("services"))


def read_profile(profile: str | None, env: Mapping[str, str]) -> AwsProfile:
    """The profile ``profile`` read from the files ``env`` names, the way botocore reads
    them (used where botocore is not installed; see the module docstring)."""
    name = profile or env_profile(env)
    try:
        sections = _parse(env.get("AWS_CONFIG_FILE") or "~/.aws/config")
        known = _parse(env.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials")
    except (OSError, ValueError, configparser.Error, UnicodeDecodeError) as exc:
        raise _unreadable(name, exc) from None
    profiles: dict[str, dict[str, Any]] = {}
    services: dict[str, dict[str, Any]] = {}
    for section, values in sections.items():
        if section.startswith("profile"):
            profiles.update(_named(section, values))
        elif section.startswith("services"):
            services.update(_named(section, values))
        elif section == "default":
            profiles["default"] = values
    for section in known:
        profiles.setdefault(section, {})
    if name is None:
        values = profiles.get("default", {})
    elif name in profiles:
        values = profiles[name]
    else:
        raise _unreadable(name, LookupError(f"the config profile ({name}) could not be found"))
    return AwsProfile(
        name or "default", values, _services(values, services), values.get("services")
    )


def _parse(path: str) -> dict[str, dict[str, Any]]:
    """The sections of the INI file ``path`` (none when it does not exist), indented blocks
    parsed into nested settings (botocore's ``raw_config_parse``)."""
    path = os.path.expanduser(os.path.expandvars(path))
    if not os.path.isfile(path):
        return {}
    parser = configparser.RawConfigParser()
    with open(path, encoding="utf-8") as f:
        parser.read_file(f)
    out: dict[str, dict[str, Any]] = {}
    for section in parser.sections():
        out[section] = {}
        for option in parser.options(section):
            value: Any = parser.get(section, option)
            if value.startswith("\n"):
                nested = {}
                for line in value.splitlines():
                    if line.strip():
                        key, sep, text = line.strip().partition("=")
                        if not sep:
                            raise ValueError(f"{option}: {line.strip()!r} is no 'key = value'")
                        nested[key.strip()] = text.strip()
                value = nested
            out[section][option] = value
    return out


def _named(section: str, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: values}`` of a ``[profile name]``/``[services name]`` section."""
    try:
        parts = shlex.split(section)
    except ValueError:
        return {}
    return {parts[1]: values} if len(parts) == 2 else {}


def _services(values: Mapping[str, Any], sections: Mapping[str, Any]) -> Mapping[str, Any]:
    """The services section the profile ``values`` name (none: empty)."""
    name = values.get("services")
    if not name:
        return {}
    found = sections.get(name) if isinstance(name, str) else None
    if not isinstance(found, Mapping) or not found:
        raise InvalidArgumentError(
            f"the AWS profile names the services section {str(name)[:100]!r}, which the "
            "config file does not hold"
        )
    return found


def _unreadable(profile: str | None, exc: BaseException) -> InvalidArgumentError:
    """The error for a profile that cannot be read; the text of a parser's error is not
    repeated (it quotes the file's lines, keys and secrets among them)."""
    quoted = isinstance(exc, configparser.Error | ValueError)  # (UnicodeDecodeError too)
    said = "its text is not shown: it may quote the file" if quoted else str(exc)[:200]
    return InvalidArgumentError(
        f"the AWS profile {profile or 'default'} cannot be read: {type(exc).__name__}: {said}"
    )
