"""Which bearer token from the environment a URL's origin gets: a token goes only where the
user said it may go, never to whatever host a URL (from a model card, a README, a forum
post) names.

* ``$HF_TOKEN``, the user's Hugging Face credential, goes only to the Hugging Face Hub, as
  huggingface_hub decides it (its ``_HUB_ORIGINS``): ``https://huggingface.co``,
  ``https://hf.co``, ``https://hub-ci.huggingface.co``, and the origin of ``$HF_ENDPOINT``
  when the user set one (exactly: its scheme, host and port, plain ``http`` only when it
  says so); to none when ``$HF_HUB_DISABLE_IMPLICIT_TOKEN`` is true.
* ``$TENSORFILE_TOKEN``, a token for any server, goes only to the origins
  ``$TENSORFILE_TOKEN_HOSTS`` names (comma-separated): ``host`` or ``host:port`` means
  ``https://host[:port]``; ``http://host[:port]`` names a plain-HTTP origin, exactly.

An explicit ``token=`` (or an ``Authorization`` header, or ``user:password@`` in the URL) is
the caller naming the host, and is not decided here. Nothing returned here follows a
redirect to another origin (:mod:`._exchange`).

Example:
    >>> url = parse_http_url("https://huggingface.co/org/m/resolve/main/m.safetensors")
    >>> env_token(url, {"HF_TOKEN": "hf_abc"})
    ('hf_abc', '$HF_TOKEN')
    >>> print(env_token(parse_http_url("http://example.org/m.safetensors"), {"HF_TOKEN": "hf_abc"}))
    None
    >>> env = {"TENSORFILE_TOKEN": "t", "TENSORFILE_TOKEN_HOSTS": "files.example.org"}
    >>> env_token(parse_http_url("https://files.example.org/m.safetensors"), env)
    ('t', '$TENSORFILE_TOKEN')
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ...core.errors import InvalidArgumentError
from ._urls import HttpURL, parse_http_url, redact

__all__ = ["HF_ORIGINS", "HOSTS_ENV", "env_token", "withheld"]

HOSTS_ENV = "TENSORFILE_TOKEN_HOSTS"
"""The variable naming the origins ``$TENSORFILE_TOKEN`` is sent to."""
HF_ORIGINS = frozenset(
    {("https", "huggingface.co", 443), ("https", "hf.co", 443),
     ("https", "hub-ci.huggingface.co", 443)}
)  # fmt: skip
"""The Hugging Face Hub's origins (huggingface_hub's, besides ``$HF_ENDPOINT``'s)."""
_TRUE = {"1", "ON", "YES", "TRUE"}  # (huggingface_hub's _is_true)

Origin = tuple[str, str, int]


def _origin(text: str) -> Origin | None:
    """The origin of an ``http(s)://`` URL (None: not one)."""
    try:
        return parse_http_url(text).origin
    except InvalidArgumentError:
        return None


def _hf_origins(env: Mapping[str, str]) -> frozenset[Origin]:
    endpoint = env.get("HF_ENDPOINT", "").strip()
    mine = _origin(endpoint.rstrip("/")) if endpoint else None
    return HF_ORIGINS | {mine} if mine else HF_ORIGINS


def _named_origins(env: Mapping[str, str]) -> set[Origin]:
    """The origins ``$TENSORFILE_TOKEN_HOSTS`` names; an entry that is no host, ``host:port``
    or ``http(s)://host[:port]`` is an :class:`~tensorfile.errors.InvalidArgumentError`."""
    found: set[Origin] = set()
    for entry in env.get(HOSTS_ENV, "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        url = entry if "://" in entry else f"https://{entry}"
        origin = _origin(url)
        if origin is None or url.rstrip("/").count("/") > 2 or "@" in url or "?" in url:
            raise InvalidArgumentError(
                f"${HOSTS_ENV}: {redact(url, malformed=True)!r} is not a host, host:port or "
                "http(s)://host[:port]"
            )
        found.add(origin)
    return found


def env_token(url: HttpURL, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(token, variable)`` the environment gives ``url``'s origin (see the module
    docstring), or None."""
    env = os.environ if env is None else env
    if env.get("TENSORFILE_TOKEN") and url.origin in _named_origins(env):
        return env["TENSORFILE_TOKEN"], "$TENSORFILE_TOKEN"
    implicit = env.get("HF_HUB_DISABLE_IMPLICIT_TOKEN", "").upper() not in _TRUE
    if env.get("HF_TOKEN") and implicit and url.origin in _hf_origins(env):
        return env["HF_TOKEN"], "$HF_TOKEN"
    return None


def withheld(url: HttpURL, env: Mapping[str, str] | None = None) -> str:
    """Why no token from the environment went to ``url`` although one is set: a hint for a
    ``401``/``403`` reply (``""`` when none is set).

    Example:
        >>> withheld(parse_http_url("https://example.org/m"), {"TENSORFILE_TOKEN": "t"})
        ' ($TENSORFILE_TOKEN is set but goes only to the hosts $TENSORFILE_TOKEN_HOSTS names)'
    """
    env = os.environ if env is None else env
    held = []
    if env.get("TENSORFILE_TOKEN"):
        held.append(f"$TENSORFILE_TOKEN is set but goes only to the hosts ${HOSTS_ENV} names")
    if env.get("HF_TOKEN"):
        held.append("$HF_TOKEN is set but goes only to the Hugging Face Hub ($HF_ENDPOINT)")
    return f" ({'; '.join(held)})" if held else ""
