"""Which proxy a request goes through, as every HTTP tool decides it.

``http_proxy`` / ``https_proxy`` (or their upper-case forms; lower case wins, and
``HTTP_PROXY`` is ignored in a CGI environment) name the proxy for each scheme; ``no_proxy``
lists hosts (suffixes, ``host:port``, or ``*``) reached directly: the rules of
:func:`urllib.request.getproxies` and :func:`urllib.request.proxy_bypass`, which also read
the system settings on macOS and Windows. ``http://`` URLs go through the proxy as
absolute-form requests; ``https://`` URLs through a ``CONNECT`` tunnel, so the proxy never
sees what is inside the TLS session. ``user:password@`` in the proxy's URL becomes a
``Proxy-Authorization: Basic`` header, and is never shown.

Example:
    >>> p = parse_proxy("proxy.local:3128")
    >>> p.host, p.port, p.authorization, p.name
    ('proxy.local', 3128, None, 'http://proxy.local:3128')
    >>> parse_proxy("http://me:pw@proxy.local").authorization
    'Basic bWU6cHc='
"""

from __future__ import annotations

import base64
import urllib.request
from dataclasses import dataclass

from ...core.errors import InvalidArgumentError, UnsupportedError
from ._urls import HttpURL, parse_http_url, redact

__all__ = ["Proxy", "parse_proxy", "proxy_for"]


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where to connect and how to authenticate (``name`` is redacted)."""

    host: str
    port: int
    authorization: str | None
    name: str

    @property
    def key(self) -> tuple[str, int, str | None]:
        """What distinguishes two proxies' connections."""
        return (self.host, self.port, self.authorization)


def parse_proxy(url: str) -> Proxy:
    """A proxy from its URL (``host:port`` alone means ``http://host:port``); only HTTP
    proxies are supported."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    scheme = raw.partition("://")[0].lower()
    if scheme != "http":
        raise UnsupportedError(
            f"proxy {redact(raw)}: only http:// proxies are supported (HTTPS URLs still go "
            "through them in a CONNECT tunnel)"
        )
    try:
        parsed = parse_http_url(raw)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"the proxy setting is unusable: {exc}") from None
    authorization = None
    if parsed.user is not None:
        pair = f"{parsed.user}:{parsed.password or ''}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return Proxy(parsed.host, parsed.port, authorization, redact(raw))


def proxy_for(url: HttpURL) -> Proxy | None:
    """The proxy the environment names for ``url``, or None to connect directly."""
    setting = urllib.request.getproxies().get(url.scheme)
    if not setting:
        return None
    if urllib.request.proxy_bypass(f"{url.host}:{url.port}"):
        return None
    return parse_proxy(setting)
