"""Sharded checkpoints' index files, which can lie: where each shard named really is.

An index (``model.safetensors.index.json``) maps tensor names to shard files. It may name
only plain relative names (:func:`shard_name`, one rule for local and remote indexes), so a
shard never leaves the checkpoint: a local shard is a local file inside the index's folder
once symlinks are resolved (:func:`local_shards`), a remote one a URL next to the index, on
its host (:func:`remote_shards`), where the index's credentials may go. An index over
:data:`MAX_INDEX_BYTES` is refused before any of it is read (:func:`read_index`).

Example:
    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> index = os.path.join(folder, "model.safetensors.index.json")
    >>> with open(index, "w") as f:
    ...     json.dump({"weight_map": {"w": "model-1.safetensors"}}, f)
    >>> weight_map, _ = read_index(index, local=True)
    >>> local_shards(index, ["model-1.safetensors"]) == {
    ...     "model-1.safetensors": os.path.join(folder, "model-1.safetensors")}
    True
"""

from __future__ import annotations

import glob as _glob
import json
import os
import posixpath
import stat
import urllib.parse
from contextlib import closing

from tensorfile.core.errors import InvalidArgumentError, SourceError, naming
from tensorfile.core.source import Source
from tensorfile.formats import SAFETENSORS
from tensorfile.sources import LocalSource, open_path

__all__ = [
    "INDEX_SUFFIX",
    "MAX_INDEX_BYTES",
    "index_path",
    "is_index",
    "local_shards",
    "read_index",
    "read_index_doc",
    "regular_file",
    "remote_shards",
    "shard_name",
]

INDEX_SUFFIX = ".index.json"
MAX_INDEX_BYTES = 64 << 20
"""The largest ``*.index.json`` read (64 MiB; a 1,000-shard checkpoint's is well under 1 MiB),
checked against the file's size before any of it is read."""


def regular_file(path: str) -> int:
    """The size of the regular file at ``path``; :class:`SourceError` for anything else."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise SourceError(f"{path} is a {kind}, not a tensor file")
    return st.st_size


_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFIFO: "FIFO (named pipe)",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
}


def index_path(path: str) -> str | None:
    """The index of the local checkpoint ``path`` names (the index itself, or the one index in
    a folder), or None when ``path`` is neither."""
    if path.endswith(INDEX_SUFFIX):
        return path
    if os.path.isdir(path):
        found = sorted(
            _glob.glob(
                os.path.join(_glob.escape(path), "*" + SAFETENSORS.suffixes[0] + INDEX_SUFFIX)
            )
        )
        if not found:
            found = sorted(_glob.glob(os.path.join(_glob.escape(path), "*" + INDEX_SUFFIX)))
        if len(found) == 1:
            return found[0]
        if not found:
            raise InvalidArgumentError(
                f"{path} is a folder without a *.safetensors.index.json; pass a file or a glob"
            )
        names = ", ".join(os.path.basename(f) for f in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise InvalidArgumentError(
            f"{path} holds {len(found)} index files ({names}{more}); pass one of them"
        )
    return None


def read_index(index: str, *, local: bool) -> tuple[dict[str, str], str]:
    """The ``weight_map`` of a sharded checkpoint's index (a local path or a URL) and the
    name messages give the index (a URL's without its credentials), refused unread when the
    file is over :data:`MAX_INDEX_BYTES`."""
    weight_map, shown, _ = read_index_doc(index, local=local)
    return weight_map, shown


def read_index_doc(
    index: str, *, local: bool, allow_full_download: bool | None = None
) -> tuple[dict[str, str], str, dict[str, object]]:
    """:func:`read_index`, and the whole index document (read once: its ``metadata``)."""
    if local:
        _check_index_size(index, regular_file(index))
        source: Source = LocalSource(index)
    else:
        source = open_path(index, allow_full_download=allow_full_download)
    shown = source.name if not local else index
    with closing(source), naming(shown):
        _check_index_size(shown, source.size)  # a remote size comes with the first reply
        raw = source.read(0, source.size)
    with naming(shown):
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested arrays
            raise InvalidArgumentError(f"{shown} is not valid JSON: {_short(exc)}") from None
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise InvalidArgumentError(
                f"{shown} has no 'weight_map' of tensor names to shard files"
            )
    return weight_map, shown, doc


def _check_index_size(index: str, size: int) -> None:
    if size > MAX_INDEX_BYTES:
        raise InvalidArgumentError(
            f"{index} is {size:,} bytes, over tensorfile's {MAX_INDEX_BYTES:,}-byte limit for "
            "an index file (real ones are a few hundred kilobytes); it was not read"
        )


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shard_name(index: str, name: str) -> str:
    """``name``, a shard named by the index ``index``, checked and normalised: it must be a
    plain relative name of a file in the index's folder (or below it), the same rule for
    local and remote indexes, so a shard never leaves the checkpoint and a remote index's
    shards keep its origin (and its bearer token goes nowhere else).

    Refused: an empty name, a scheme or drive (any ``:``: ``file:///x``, ``http://h/x``,
    ``C:x``), an absolute or network path (``/x``, ``//host/x``), a ``..`` component, a
    backslash, ``?`` or ``#`` (a URL's query or fragment) and control characters.

    Example:
        >>> shard_name("ckpt/m.safetensors.index.json", "./model-00001-of-00002.safetensors")
        'model-00001-of-00002.safetensors'
        >>> try:
        ...     shard_name("m.safetensors.index.json", "file:///home/me/victim.safetensors")
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        m.safetensors.index.json: shard 'file:///home/me/victim.safetensors' is not a plain \
file name in the index's folder: a scheme or drive (':')
    """
    why = None
    if not name:
        why = "empty"
    elif any(c < " " or c == "\x7f" for c in name):
        why = "a control character"
    elif ":" in name:
        why = "a scheme or drive (':')"
    elif name.startswith("/"):
        why = "a network path ('//')" if name.startswith("//") else "an absolute path"
    elif "\\" in name:
        why = "a backslash"
    elif "?" in name or "#" in name:
        why = "a URL query or fragment ('?', '#')"
    elif ".." in name.split("/"):
        why = "'..' leaves the folder"
    if why is not None:
        raise InvalidArgumentError(
            f"{index}: shard {name!r} is not a plain file name in the index's folder: {why}"
        )
    return posixpath.normpath(name)


def local_shards(index: str, names: list[str]) -> dict[str, str]:
    """Shard name -> local path, each checked to stay in the index's folder once symlinks
    are resolved: inside the folder the index is in, or inside the folder the index file
    really lives in (the Hugging Face cache links every file of a snapshot into ``blobs/``)."""
    folder = os.path.dirname(index)
    roots = {os.path.realpath(folder or "."), os.path.dirname(os.path.realpath(index))}
    out = {}
    for name in names:
        path = os.path.normpath(os.path.join(folder, shard_name(index, name)))
        real = os.path.realpath(path)
        if not any(_inside(real, root) for root in roots):
            raise InvalidArgumentError(
                f"{index}: shard {name!r} is a link to {real}, outside the checkpoint's "
                f"folder {os.path.realpath(folder or '.')}"
            )
        out[name] = path
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def remote_shards(index: str, shown: str, names: list[str]) -> dict[str, str]:
    """Shard name -> URL next to the remote index ``index`` (called ``shown`` in messages):
    same scheme, host, credentials and folder (HTTP paths percent-encoded; the index's query
    string is not carried over)."""
    scheme = index.split("://", 1)[0].lower()
    http = scheme in ("http", "https")
    if http:
        parts = urllib.parse.urlsplit(index)  # the index was fetched: a URL that parses
        folder = parts.path.rpartition("/")[0]
        head = urllib.parse.urlunsplit((parts.scheme, parts.netloc, folder, "", ""))
    else:  # fsspec: its URLs are paths, not percent-encoded
        head = index.rpartition("/")[0]
    out = {}
    for name in names:
        clean = shard_name(shown, name)
        out[name] = f"{head}/{urllib.parse.quote(clean) if http else clean}"
    return out


def is_index(target: str) -> bool:
    """Whether ``target`` (a path or URL) names an index file (a URL's query and fragment
    are not part of its name).

    Example:
        >>> is_index("https://h/m/model.safetensors.index.json?download=true")
        True
    """
    if "://" in target:
        target = target.split("#", 1)[0].split("?", 1)[0]
    return target.endswith(INDEX_SUFFIX)
