"""URLs as the HTTP stack and the messages see them: credentials never shown, bad URLs refused.

* :func:`redact` is what every message, source name and ``--json`` document shows of a URL
  of any scheme: scheme, host, port and path; never ``user:password@``, the query string
  (which often carries a signature or a token) or the fragment. It never fails.
* :func:`scrub` cleans the text of an exception raised by someone else (the standard
  library, fsspec) before tensorfile repeats it: the raw URL and each of its secrets are
  replaced.
* :func:`parse_http_url` checks an ``http(s)://`` URL once, up front, and returns what a
  request needs (ASCII host, port, request target, credentials); a malformed URL or an
  out-of-range port is an :class:`~tensorfile.errors.InvalidArgumentError` that names the
  redacted URL, never a ``ValueError`` from deep inside ``urllib`` or ``http.client``.

Example:
    >>> redact("s3://KEY:SECRET@bucket/m.safetensors?versionId=1#frag")
    's3://bucket/m.safetensors'
    >>> url = "s3://bucket/m.safetensors?token=abcd1234"
    >>> scrub("no such file: /bucket/m.safetensors?token=abcd1234", url)
    'no such file: /bucket/m.safetensors?***'
    >>> u = parse_http_url("https://me:pw@Example.org:8443/m.safetensors?sig=x")
    >>> u.host, u.port, u.target, u.user, u.password
    ('example.org', 8443, '/m.safetensors?sig=x', 'me', 'pw')
    >>> u.name
    'https://example.org:8443/m.safetensors'
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ...core.errors import InvalidArgumentError

__all__ = ["HttpURL", "parse_http_url", "redact", "scrub", "secrets_of", "split_url", "userinfo"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_HOSTPORT = re.compile(r"(\[[0-9A-Za-z:.%]*\]|[^\[\]:@]*)(:[0-9]*)?")
_HOST_AND_PORT = re.compile(r"(\[[^\]]*\]|[^\[\]:]*)(?::(.*))?", re.DOTALL)
_PORT = re.compile(r"[0-9]{1,5}")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MALFORMED_USER = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.\-]*:)?/*).*@", re.DOTALL)
"""The user information of text meant as a URL without its ``://`` (``http:/u:pw@h``,
``//u:pw@h``): up to the last ``@`` after the scheme and slashes."""
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_SHORT = 4  # secrets shorter than this are not replaced inside text: the text is withheld
WITHHELD = "(details withheld: they would show the URL's credentials)"


def split_url(url: str) -> tuple[str, str, str, str] | None:
    """``(scheme, authority, path, after)``: ``after`` is the query and fragment (with their
    ``?``/``#``); None when ``url`` has no ``://``.

    Example:
        >>> split_url("https://u:p@h:8080/m.safetensors?sig=x#f")
        ('https', 'u:p@h:8080', '/m.safetensors', '?sig=x#f')
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    cut = len(rest)
    for mark in "?#":
        i = rest.find(mark)
        if i >= 0:
            cut = min(cut, i)
    head, after = rest[:cut], rest[cut:]
    slash = head.find("/")
    authority, path = (head, "") if slash < 0 else (head[:slash], head[slash:])
    return scheme, authority, path, after


def userinfo(authority: str, path: str) -> str | None:
    """The credentials part of a URL (its :func:`split_url` authority and path): before the
    last ``@`` of the authority, or, when a password holds an unescaped ``/``
    (``user:pa/ss@host``), before the last ``@`` of the path too.

    Example:
        >>> userinfo("u:pa", "/ss@host/x"), userinfo("host", "/x")
        ('u:pa/ss', None)
    """
    if "@" in authority:
        return authority.rpartition("@")[0]
    if ":" in authority and "@" in path:
        return authority + path.rpartition("@")[0]
    return None


def redact(url: str, *, malformed: bool = False) -> str:
    """``url`` without credentials, query string or fragment; text without ``://`` is
    returned as it is, unless ``malformed`` (text meant as a URL, such as an endpoint:
    then everything up to its last ``@`` after the scheme and slashes, and its query and
    fragment, are cut too).

    Example:
        >>> redact("https://user:pw@host:8080/m.safetensors?sig=secret")
        'https://host:8080/m.safetensors'
        >>> redact("http://user:pa/ss@host/x")  # an unescaped '/' in the password
        'http://(URL withheld: it may hold credentials)'
        >>> redact("http:///user:pw@host/x")  # one '/' too many: no host, the rest a path
        'http://(URL withheld: it may hold credentials)'
        >>> redact("http:/user:pw@host", malformed=True), redact("//u:p?w@h?t=1", malformed=True)
        ('http:/host', '//h')
    """
    parts = split_url(url)
    if parts is None:
        if not malformed:
            return url
        shown = _MALFORMED_USER.sub(r"\1", url).split("?")[0].split("#")[0]
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", shown)
    scheme, authority, path, _after = parts
    scheme = scheme if _SCHEME.fullmatch(scheme) else "(invalid scheme)"
    if "@" not in authority and (":" in authority or not authority) and "@" in path:
        return f"{scheme}://(URL withheld: it may hold credentials)"  # (or http:///u:pw@h)
    hostport = authority.rpartition("@")[2]
    if _HOSTPORT.fullmatch(hostport) is None:
        return f"{scheme}://(malformed host)"
    shown = f"{scheme}://{hostport.lower()}{path}"
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", shown)


def secrets_of(url: str) -> list[str]:
    """The parts of ``url`` that must never be shown: the user information (whole, user,
    password), the query string and its values, the fragment; each also percent-decoded;
    longest first.

    Example:
        >>> secrets_of("http://u:p%40ss@h/x?token=abc&v=1")
        ['token=abc&v=1', 'u:p%40ss', 'p%40ss', 'u:p@ss', 'p@ss', 'abc', '1', 'u']
    """
    parts = split_url(url)
    if parts is None:
        return []
    _scheme, authority, path, after = parts
    found: list[str] = []
    info = userinfo(authority, path)
    if info is not None:
        user, _, password = info.partition(":")
        found += [info, user, password]
    query, _, fragment = after.partition("#")
    query = query[1:] if query.startswith("?") else query
    if after.startswith("#"):
        query, fragment = "", after[1:]
    found += [query, fragment]
    for pair in query.split("&"):
        found.append(pair.partition("=")[2])
    out: set[str] = set()
    for s in found:
        if s:
            out.add(s)
            out.add(urllib.parse.unquote(s))
    return sorted(out, key=lambda s: (-len(s), s))


def scrub(text: str, *urls: str) -> str:
    """``text`` (a foreign exception's message) with each of ``urls`` shown redacted and
    every secret of theirs replaced by ``***``; when a secret too short to replace safely
    still appears, the whole text is withheld."""
    for url in urls:
        for raw in sorted({url, urllib.parse.unquote(url)}, key=len, reverse=True):
            text = text.replace(raw, redact(url))
        secrets = secrets_of(url)
        for s in secrets:
            if len(s) >= _SHORT:
                text = text.replace(s, "***")
        if any(s in text for s in secrets):
            return WITHHELD
    return text


@dataclass(frozen=True, slots=True)
class HttpURL:
    """An ``http(s)://`` URL checked and taken apart for a request."""

    raw: str
    scheme: str
    host: str
    port: int
    target: str
    user: str | None
    password: str | None

    @property
    def name(self) -> str:
        """The URL as messages show it (:func:`redact`)."""
        return redact(self.raw)

    @property
    def origin(self) -> tuple[str, str, int]:
        """Scheme, host and port: where credentials may go."""
        return (self.scheme, self.host, self.port)

    @property
    def authority(self) -> str:
        """``host[:port]`` for the ``Host`` header (the port only when not the default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def absolute(self) -> str:
        """The absolute-form request target a proxy is sent (no credentials)."""
        return f"{self.scheme}://{self.authority}{self.target}"


def _bad(url: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{redact(url)}: {why}")


def _quote_non_ascii(text: str) -> str:
    return _NON_ASCII.sub(lambda m: urllib.parse.quote(m.group(), safe=""), text)


def parse_http_url(url: str) -> HttpURL:
    """``url`` checked for a request: an ``http``/``https`` scheme, a host, a port from 1 to
    65535, no spaces or control characters; non-ASCII host names IDNA-encoded and non-ASCII
    path characters percent-encoded. Anything else is an :class:`InvalidArgumentError`
    naming the redacted URL."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"a URL must be a string, not {type(url).__name__}")
    if _UNSAFE.search(url):
        raise _bad(url, "the URL contains spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        raise _bad(url, "malformed URL") from None
    if parts.scheme not in ("http", "https"):
        raise _bad(url, "not an http(s) URL")
    if not hostname:
        raise _bad(url, "the URL has no host")
    m = _HOST_AND_PORT.fullmatch(parts.netloc.rpartition("@")[2])
    if m is None:
        raise _bad(url, "malformed host")
    digits = m.group(2)
    if digits:
        if not _PORT.fullmatch(digits) or not 1 <= int(digits) <= 65535:
            raise _bad(url, "the port must be a number from 1 to 65535")
        port = int(digits)
    else:
        port = 443 if parts.scheme == "https" else 80
    try:
        host = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise _bad(url, "the host name is not valid") from None
    target = _quote_non_ascii(parts.path or "/")
    if parts.query:
        target += "?" + _quote_non_ascii(parts.query)
    user = password = None
    if "@" in parts.netloc:
        info = parts.netloc.rpartition("@")[0]
        raw_user, colon, raw_password = info.partition(":")
        user = urllib.parse.unquote(raw_user)
        password = urllib.parse.unquote(raw_password) if colon else None
    return HttpURL(url, parts.scheme, host, port, target, user, password)
