"""What a file that is not a tensor file looks like: the words format detection's errors use.

Format detection (:func:`tensorfile.formats.detect`) recognises the tensor formats by their
magic numbers and the safetensors header; everything here runs only after it has failed, to
make the error say what the bytes are instead (an HTML page, a JSON document, a Git LFS
pointer, a PyTorch checkpoint...) and show them (:func:`not_a_tensor_file`). The other
functions take bytes already read and never read more, so nothing here can allocate
according to a size a file claims.

Example:
    >>> looks_like(b"<!DOCTYPE html>\\n<html><head><title>Index of /models</title>")
    'an HTML page'
    >>> print(shown(b"\\x00\\x01hello, world, and more"))
    b'\\x00\\x01hello, world, '...
    >>> index_shards(b'{"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}')
    ['m-1.safetensors', 'm-2.safetensors']
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ..core.errors import TensorFileError, UnknownFormatError, UnsupportedError, quoted_name
from ..core.source import Source

__all__ = [
    "JSON_WHITESPACE",
    "SHOWN_BYTES",
    "SNIFF_BYTES",
    "index_message",
    "index_shards",
    "is_text",
    "looks_like",
    "looks_like_json",
    "not_a_tensor_file",
    "printable",
    "resemblance",
    "shown",
]

SHOWN_BYTES = 16
"""How many first bytes an error shows."""

JSON_WHITESPACE = b" \t\n\r"
"""The four bytes JSON allows between tokens."""

SNIFF_BYTES = 4096
"""Bytes read to say what an unknown file looks like."""

_SMALL_JSON = 1 << 20  # a JSON file this small is parsed to see whether it is an index
_MAX_INDEX_BYTES = 64 << 20  # the largest index parsed (as the operations' limit)
_SHORTEST = 10  # no tensor file is shorter (safetensors: the length prefix and "{}")

_BOM = b"\xef\xbb\xbf"
_ERROR_KEY = re.compile(rb'^\{\s*"(?:error|errors|message)"\s*:')  # {"error": ...}
_TEXT = frozenset(range(0x20, 0x7F)) | frozenset(b"\t\n\r\f\v")

# (prefix, what a file starting with it is); checked in order, first match wins
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"version https://git-lfs.github.com/spec/", "a Git LFS pointer (run `git lfs pull`)"),
    (b"\x80\x02", "a Python pickle (an old PyTorch checkpoint?)"),
    (b"\x80\x03", "a Python pickle (an old PyTorch checkpoint?)"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
)


def is_text(data: bytes) -> bool:
    """Whether every byte of ``data`` is printable ASCII or whitespace (a safetensors length
    prefix never is: its high bytes are zero).

    Example:
        >>> is_text(b'{"weight'), is_text((100).to_bytes(8, "little"))
        (True, False)
    """
    return all(b in _TEXT for b in data)


def _strip(head: bytes) -> bytes:
    """``head`` without a UTF-8 byte order mark and leading whitespace."""
    return head.removeprefix(_BOM).lstrip(JSON_WHITESPACE + b"\f\v")


def looks_like_json(head: bytes) -> bool:
    """Whether ``head`` starts like a JSON object or array written as text.

    Example:
        >>> looks_like_json(b'\\n  {"metadata": {}}'), looks_like_json(b"{\\x00\\x00")
        (True, False)
    """
    text = _strip(head)
    return text[:1] in (b"{", b"[") and is_text(text[:64])


def looks_like(head: bytes, signatures: Iterable[tuple[bytes, str]] = ()) -> str | None:
    """What the file starting with ``head`` seems to be, as words for a message, or None.
    ``signatures`` are more ``(prefix, words)`` pairs (the registry's, for the formats whose
    magic numbers it holds).

    Example:
        >>> looks_like(b"\\x80\\x02}q\\x00"), looks_like(b"\\x00\\x07\\xff")
        ('a Python pickle (an old PyTorch checkpoint?)', None)
        >>> looks_like(b"PK\\x03\\x04\\x00", [(b"PK", "a zip archive")])
        'a zip archive'
    """
    for prefix, what in (*_SIGNATURES, *signatures):
        if head.startswith(prefix):
            return what
    text = _strip(head)
    lower = text[:1024].lower()
    if lower.startswith((b"<!doctype html", b"<html")) or (
        lower.startswith(b"<") and (b"<html" in lower or b"<head" in lower or b"<body" in lower)
    ):
        return "an HTML page"
    if lower.startswith(b"<?xml"):
        return "an XML document"
    if looks_like_json(head):
        if text[:1] == b"{" and _ERROR_KEY.search(text[:256]):
            return "a JSON error response (a failed download?)"
        return "a JSON document"
    if text and _is_utf8_text(head):
        return "a text file"
    return None


def _is_utf8_text(head: bytes) -> bool:
    """Whether ``head`` is UTF-8 text without control characters (a cut last character is
    allowed: ``head`` is a prefix of the file)."""
    text = head.decode("utf-8", errors="ignore")
    if len(text.encode("utf-8")) < len(head) - 3:
        return False
    return all(c.isprintable() or c in "\t\n\r\f\v" for c in text)


def shown(head: bytes) -> str:
    """The first :data:`SHOWN_BYTES` of ``head`` as a Python bytes literal (printable, one
    line), followed by ``...`` when there are more.

    Example:
        >>> shown(b"GGU")
        "b'GGU'"
    """
    more = "..." if len(head) > SHOWN_BYTES else ""
    return repr(bytes(head[:SHOWN_BYTES])) + more


def printable(text: str, limit: int = 80) -> str:
    """``text`` shortened to ``limit`` characters, quoted with escapes when it holds
    characters a terminal should not be sent (control characters, line breaks).

    Example:
        >>> printable("model-00001.safetensors"), printable("a\\nb")
        ('model-00001.safetensors', "'a\\\\nb'")
    """
    short = text if len(text) <= limit else text[: limit - 3] + "..."
    return short if short.isprintable() else repr(short)


def _no_number(text: str) -> None:
    """Numbers are not needed (and ``int()`` refuses one of over 4,300 digits)."""


def index_shards(data: bytes) -> list[str] | None:
    """The shard files a sharded checkpoint's index names (each once, in order of first
    mention), or None when ``data`` is not one: a JSON object with a ``weight_map`` object.

    Example:
        >>> index_shards(b'{"metadata": {"total_size": 8}, "weight_map": {}}')
        []
        >>> index_shards(b'{"model_type": "llama"}') is None
        True
    """
    try:
        doc: Any = json.loads(
            data, parse_int=_no_number, parse_float=_no_number, parse_constant=_no_number
        )
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested absurdly deep
        return None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        return None
    return list(dict.fromkeys(v for v in weight_map.values() if isinstance(v, str)))


def not_a_tensor_file(
    source: Source, head: bytes, known: str, signatures: Iterable[tuple[bytes, str]]
) -> TensorFileError:
    """The error for a file detection does not recognise (``head``: its first bytes),
    saying what it looks like: :class:`UnsupportedError` for a sharded checkpoint's index,
    else :class:`UnknownFormatError`. ``known`` lists the formats for the message,
    ``signatures`` are :func:`looks_like`'s. Reads at most :data:`SNIFF_BYTES` (a JSON file
    that may be an index: the whole of it, up to 64 MiB)."""
    name, size = source.name, source.size
    if size == 0:
        return UnknownFormatError(
            f"{quoted_name(name)} is empty (0 bytes), not a tensor file tensorfile knows ({known})",
            path=name,
        )
    sniff = head if size <= len(head) else source.read(0, min(size, SNIFF_BYTES))
    if (
        looks_like_json(sniff)
        and (b'"weight_map"' in sniff or size <= _SMALL_JSON)
        and size <= _MAX_INDEX_BYTES
    ):
        data = sniff if size <= len(sniff) else source.read(0, size)
        shards = index_shards(data)
        if shards is not None:
            return UnsupportedError(index_message(name, shards))
    what = looks_like(sniff, signatures)
    shown_name = quoted_name(name)
    prefix = f"{shown_name} looks like {what}, not" if what else f"{shown_name} is not"
    first = sniff[:SHOWN_BYTES]
    if size < _SHORTEST:
        detail = (
            f"it is only {size} byte{'s' if size > 1 else ''} long ({shown(sniff)}), "
            "too short for any of them"
        )
    else:
        detail = _first_bytes(sniff, size)
    return UnknownFormatError(
        f"{prefix} a tensor file tensorfile knows ({known}): {detail}",
        path=name,
        head=first,
        size=size,
    )


def _first_bytes(sniff: bytes, size: int) -> str:
    """The words that show a ``size``-byte file's first bytes (``sniff``: at least them)."""
    first = sniff[:SHOWN_BYTES]
    if size <= len(first):
        return f"its {size} bytes are {shown(sniff)}"
    return f"its first {len(first)} of {size:,} bytes are {shown(sniff)}"


def resemblance(source: Source, what_not: str) -> str | None:
    """The start of a message for a file a format's reader refused at its first bytes (a
    safetensors header length that is really text), when the file looks like something
    else: ``"NAME looks like WHAT, not WHAT_NOT: its first 16 of N bytes are ..."``; None
    when it looks like nothing :func:`looks_like` knows. Reads at most :data:`SNIFF_BYTES`.

    Example:
        >>> from tensorfile.sources import MemorySource
        >>> lfs = b"version https://git-lfs.github.com/spec/v1\\noid sha256:0\\nsize 9\\n"
        >>> print(resemblance(MemorySource(lfs, name="m.safetensors"), "a safetensors file"))
        m.safetensors looks like a Git LFS pointer (run `git lfs pull`), not a safetensors \
file: its first 16 of 63 bytes are b'version https://'...
        >>> resemblance(MemorySource(bytes(64)), "a safetensors file") is None
        True
    """
    size = source.size
    sniff = source.read(0, min(size, SNIFF_BYTES))
    what = looks_like(sniff)
    if what is None:
        return None
    name = source.name
    subject = "the data" if name.startswith("<") and name.endswith(">") else quoted_name(name)
    return f"{subject} looks like {what}, not {what_not}: {_first_bytes(sniff, size)}"


def index_message(name: str, shards: list[str]) -> str:
    """The message that refuses a sharded checkpoint index naming ``shards``."""
    listed = ", ".join(printable(s) for s in shards[:3])
    more = f" and {len(shards) - 3:,} more" if len(shards) > 3 else ""
    which = f" ({listed}{more})" if shards else ""
    return (
        f"{quoted_name(name)} is a sharded checkpoint index (like "
        "model.safetensors.index.json) naming "
        f"{len(shards):,} shard{'' if len(shards) == 1 else 's'}{which}, not a tensor file: "
        "open it by its path (tensorfile.open reads the index and its shards as one file), "
        "or open the shards themselves"
    )
