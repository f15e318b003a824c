"""Sharded checkpoints as huggingface_hub writes them: ``model-00001-of-00003.safetensors``
shards and ``model.safetensors.index.json`` (``{"metadata": {"total_size": N, ...},
"weight_map": {tensor: shard}}``, ``json.dump(indent=2)``), or one ``model.safetensors`` when
everything fits.

The split is huggingface_hub's (``split_state_dict_into_shards_factory``): tensors in order,
a new shard when the next tensor would take the current one over ``max_shard_size``, a
tensor bigger than that alone in a shard of its own; tensors that share a storage (torch)
go in the shard of the first of them, the storage counted once, at its whole size. Sizes
are decimal (``"5GB"``) or binary (``"5GiB"``).

Atomic as a whole: every shard is written under a staging name first and only then moved
into place, the index last, so a failure (or a SIGKILL) at any instant never leaves an index
naming a shard that is missing or from another save. When the new shards' names are all new
in the folder, the old index stays valid until the new one replaces it in one rename (the
folder always holds the old checkpoint or the new one); when they would overwrite the old
save's files, those are first linked under hidden names and the old index pointed at the
links, so it still names the old checkpoint whole until the new index replaces it (where
links cannot be made, the old index is removed first: no claim rather than a false one,
see :func:`publish`). Files of an earlier save
that the new one did not write (``model-*-of-*.safetensors``, ``model.safetensors``, the
index) are removed only after success.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_sharded
    >>> d = tempfile.mkdtemp()
    >>> save_sharded({"a": np.zeros(300, np.float32), "b": np.ones(300, np.float32)}, d,
    ...              max_shard_size="1KB")
    ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', \
'model.safetensors.index.json']
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from tensorfile.core.atomic import atomic_write, remove_stale_temps, write_all
from tensorfile.core.dtypes import from_safetensors
from tensorfile.core.errors import InvalidArgumentError, SourceError, TensorFileError
from tensorfile.core.sizes import parse_size
from tensorfile.formats import SAFETENSORS, _index
from tensorfile.formats.safetensors._encode import check_name
from tensorfile.formats.safetensors._parse import N_LEN, parse_header, parse_header_length
from tensorfile.formats.safetensors._writer import StreamWriter

__all__ = [
    "INDEX_SUFFIX",
    "check_prefix",
    "parse_size",
    "plan_shards",
    "publish",
    "remove_old_links",
    "write_sharded",
]

SUFFIX = SAFETENSORS.suffixes[0]
INDEX_SUFFIX = SUFFIX + _index.INDEX_SUFFIX
_STAGING = ".tensorfile-staging-"


def plan_shards(
    sizes: Sequence[tuple[str, int]],
    max_shard_size: int,
    storages: Mapping[str, Hashable] | None = None,
) -> list[list[str]]:
    """huggingface_hub's split of ``(name, nbytes)`` pairs into shards of names.

    ``storages`` maps names to a storage id: a name whose storage an earlier name has is not
    counted and goes in that name's shard, after the shard's own names (as huggingface_hub
    orders them).

    Example:
        >>> plan_shards([("a", 6), ("b", 6), ("c", 20), ("d", 3)], 10)
        [['a'], ['c'], ['b', 'd']]
        >>> plan_shards([("q", 8), ("k", 8), ("x", 4)], 10, {"q": 1, "k": 1})
        [['q', 'k'], ['x']]
    """
    shards: list[list[str]] = []
    current: list[str] = []
    size = 0
    first: dict[Hashable, str] = {}
    later: dict[str, list[str]] = {}
    for name, n in sizes:
        sid = None if storages is None else storages.get(name)
        if sid is not None:
            if sid in first:
                later[first[sid]].append(name)
                continue
            first[sid] = name
            later[name] = []
        if n > max_shard_size:
            shards.append([name])
            continue
        if current and size + n > max_shard_size:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += n
    if current:
        shards.append(current)
    for shard in shards:
        shard.extend(t for name in list(shard) for t in later.get(name, ()))
    return shards


def _names(prefix: str, count: int) -> list[str]:
    if count == 1:
        return [prefix + SUFFIX]
    return [f"{prefix}-{k:05d}-of-{count:05d}{SUFFIX}" for k in range(1, count + 1)]


def _sizes(
    entries: Sequence[tuple[str, str, tuple[int, ...]]],
    storages: Mapping[str, tuple[Hashable, int]] | None,
) -> tuple[dict[str, tuple[str, tuple[int, ...]]], list[tuple[str, int]]]:
    """The writer's specs and the split's ``(name, counted bytes)``, each entry checked."""
    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    sizes = []
    for entry in entries:
        if not isinstance(entry, tuple | list) or len(entry) != 3:
            raise InvalidArgumentError(f"expected (name, dtype, shape) entries, got {entry!r}")
        name, dtype, shape = entry
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"tensor names are non-empty text, got {name!r}")
        check_name(name)  # (the format's rule: ``__metadata__`` names no tensor)
        if name in specs:
            raise InvalidArgumentError(f"tensor {name!r} appears twice")
        try:
            dt = from_safetensors(dtype)
        except (KeyError, TypeError):
            raise InvalidArgumentError(f"tensor {name!r}: unknown dtype {dtype!r}") from None
        dims = _dims(shape)
        if dims is None:
            raise InvalidArgumentError(f"tensor {name!r}: bad shape {shape!r}")
        specs[name] = (dtype, dims)
        nbytes = dt.nbytes(math.prod(dims))
        if storages is not None and name in storages:
            nbytes = storages[name][1]
        sizes.append((name, nbytes))
    return specs, sizes


def _dims(shape: Any) -> tuple[int, ...] | None:
    """``shape`` as a tuple of non-negative ints (numpy integers too); None when it is not."""
    if not isinstance(shape, tuple | list):
        return None
    try:
        dims = tuple(operator.index(d) for d in shape if not isinstance(d, bool))
    except TypeError:
        return None
    return dims if len(dims) == len(shape) and all(d >= 0 for d in dims) else None


def check_prefix(prefix: object) -> str:
    """``prefix`` if it is a plain file name stem (letters, digits, ``_``, ``.``, ``-``; not
    starting with ``.``), else an :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> check_prefix("model")
        'model'
    """
    if (
        not isinstance(prefix, str)
        or not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix)
        or prefix.startswith(".")
    ):
        raise InvalidArgumentError(f"prefix {prefix!r}: a plain file name stem")
    return prefix


def write_sharded(
    entries: Sequence[tuple[str, str, tuple[int, ...]]],
    data: Callable[[str], Any],
    directory: str | os.PathLike[str],
    *,
    max_shard_size: int,
    metadata: Mapping[str, str] | None = None,
    prefix: str = "model",
    shard_metadata: Mapping[str, str] | None = None,
    storages: Mapping[str, tuple[Hashable, int]] | None = None,
    tick: Callable[[str], None] | None = None,
    checksum: str | None = None,
) -> list[str]:
    """Write a checkpoint tensor by tensor (memory: one tensor at a time).

    ``entries`` are ``(name, safetensors dtype, shape)``; ``data(name)`` gives a tensor's
    raw little-endian bytes (bytes, memoryview or array), once per tensor, in writing order.
    ``shard_metadata`` goes in every shard's header, ``metadata`` in the index (beside
    ``total_size``), and in the file itself when there is one file (huggingface_hub's rule).
    ``storages`` (torch) maps names to ``(storage id, storage bytes)`` for the split (see
    :func:`plan_shards`). Returns the names written, relative to ``directory``, the index
    last.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> write_sharded([("a", "U8", (4,)), ("b", "U8", (4,))], lambda n: b"abcd", d,
        ...               max_shard_size=6)
        ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', \
'model.safetensors.index.json']
    """
    check_prefix(prefix)
    if isinstance(max_shard_size, bool) or not isinstance(max_shard_size, int):
        raise InvalidArgumentError(f"max_shard_size is a number of bytes, got {max_shard_size!r}")
    if max_shard_size < 1:
        raise InvalidArgumentError(f"max_shard_size {max_shard_size}: must be at least 1 byte")
    folder = os.fspath(directory)
    if not isinstance(folder, str) or not folder:
        raise InvalidArgumentError("the directory must be a non-empty path")
    meta = _text_map(metadata, "metadata")
    per_shard = _text_map(shard_metadata, "shard metadata")
    specs, sizes = _sizes(entries, storages)
    ids = None if storages is None else {n: s[0] for n, s in storages.items()}
    plan = plan_shards(sizes, max_shard_size, ids) or [[]]
    names = _names(prefix, len(plan))
    total = sum(n for _, n in sizes) if ids is None else _counted(sizes, ids)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot create {folder}: {exc.strerror or exc}") from exc
    _remove_staging(folder)
    tag = f"{_STAGING}{os.getpid()}-"
    staged: list[tuple[str, str]] = []
    try:
        for fname, shard in zip(names, plan, strict=True):
            header_meta = {**per_shard, **meta} if len(plan) == 1 else per_shard
            stage = os.path.join(folder, tag + fname)
            staged.append((stage, os.path.join(folder, fname)))
            shard_specs = {n: specs[n] for n in shard}  # each shard: its own tensors' digests
            with StreamWriter(stage, shard_specs, header_meta or None, checksum=checksum) as w:
                for n in shard:
                    w.write(n, data(n))
                    if tick is not None:
                        tick(n)
    except BaseException:
        for stage, _ in staged:
            _unlink(stage)
        raise
    written = list(names)
    index = None
    if len(plan) > 1:
        weight_map = {n: fname for fname, shard in zip(names, plan, strict=True) for n in shard}
        doc = {"metadata": {"total_size": total, **meta}, "weight_map": weight_map}
        index = json.dumps(doc, indent=2).encode()
        written.append(prefix + INDEX_SUFFIX)
    publish(folder, staged, prefix, index, tag=f"{os.getpid()}")
    return written


def publish(
    folder: str,
    staged: Sequence[tuple[str, str]],
    prefix: str,
    index: bytes | None,
    *,
    tag: str,
    keep: Sequence[str] = (),
    fsync: bool = False,
) -> None:
    """Move the ``(staging path, final path)`` files of a new checkpoint into ``folder`` and
    write its ``index`` (None: one file) last; then remove the files of the checkpoint it
    replaces that it did not write (``keep`` names other files to leave).

    Until the new index (or the new ``model.safetensors``) is in place, the folder holds the
    old checkpoint whole: where a new shard takes the name of a shard the old index names,
    the old shard is first linked under a hidden name (``.tensorfile-prev-<tag>/<name>``:
    in a hidden folder, which readers that take every ``*.safetensors`` of the folder do not
    list, under its own name, which transformers and huggingface_hub want of a shard) and
    the old index rewritten to name the links, so every file it names stays the old one.
    Where links cannot be made, the old index is removed before the first such rename (a
    kill in that window leaves no index: no claim rather than a false one).

    Readers disagree on a folder holding both an index and ``model.safetensors``
    (transformers takes the file, huggingface_hub and tensorfile the index), so a change of
    layout never leaves the two naming different checkpoints: an old single file is first
    reached through an index (naming a link to it) and removed, so that the new index
    replaces it in one rename; a new single file is committed by rewriting the old index to
    name it (under a hidden link), then put in place, then the index removed. Where links
    cannot be made, the old order stands.
    """
    index_path = os.path.join(folder, prefix + INDEX_SUFFIX)
    single = os.path.join(folder, prefix + SUFFIX)
    links = _Links(folder, tag)
    try:
        if any(os.path.lexists(final) for _, final in staged) and os.path.lexists(index_path):
            if not _keep_old(folder, index_path, {os.path.basename(f) for _, f in staged}, links):
                _unlink(index_path)  # it may name files about to change: until the new one, none
        moving = list(staged)
        if index is not None and os.path.lexists(single) and not os.path.lexists(index_path):
            _single_behind_index(single, index_path, links, fsync)
        if index is None and len(staged) == 1 and os.path.lexists(index_path):
            if _commit_through_index(staged[0], index_path, links, fsync):
                moving = []
        for stage, final in moving:
            os.replace(stage, final)
        if index is not None:
            _write_index(index_path, index, fsync)
        elif fsync:
            _fsync_folder(folder)
    finally:
        links.close()
    written = {os.path.basename(f) for _, f in staged} | set(keep)
    if index is not None:
        written.add(prefix + INDEX_SUFFIX)
    _remove_stale(folder, prefix, written)  # (leftovers: neither of these two raises, the
    remove_old_links(folder, prefix)  # new checkpoint being published)


_PREV = ".tensorfile-prev-"


def remove_old_links(folder: str, prefix: str) -> None:
    """Remove the hidden links that kept an old checkpoint of ``prefix`` while a new one was
    published (``.tensorfile-prev-<tag>/``, and the ``.tensorfile-prev-<tag>-<name>`` files
    of earlier versions): call it once the new checkpoint's index (or file) is in place.
    Links that an index of the folder names are kept (another prefix's checkpoint, left by
    a save killed mid-publication, may live only there), all of them where an index cannot
    be read, and links named as another prefix's shards; what cannot be removed is left
    (this never raises, and never follows a symbolic link)."""
    named = _named_links(folder)
    if named is None:
        return
    own = _pattern(prefix)
    tail = re.compile("-" + own.pattern + "$")
    for name in _listing(folder):
        if not name.startswith(_PREV) or name in named:
            continue
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # (a link file of an earlier version, or anything but a folder)
            if tail.search(name) or not name.endswith(SUFFIX):
                _discard(path)
            continue
        try:
            for inner in _listing(fd):
                if own.fullmatch(inner) or not inner.endswith(SUFFIX):
                    _discard(inner, dir_fd=fd)
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):  # (not empty: what was not to be removed is left)
            os.rmdir(path)


def _named_links(folder: str) -> set[str] | None:
    """The ``.tensorfile-prev-*`` names that the weight map of an index in ``folder``
    reaches; None when an index there cannot be read (it may name any of them)."""
    named: set[str] = set()
    for name in (n for n in _listing(folder) if n.endswith(INDEX_SUFFIX)):
        try:
            weight_map, _ = _index.read_index(os.path.join(folder, name), local=True)
        except (TensorFileError, OSError):
            return None
        named.update(os.path.normpath(shard).split(os.sep)[0] for shard in weight_map.values())
    return named


def _listing(folder: str | int) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


class _Links:
    """The hidden links folder of one publication, ``.tensorfile-prev-<tag>/``: made fresh
    on first use (a name already there, an earlier save's or a planted symbolic link, is
    never used: no links then) and reached through its descriptor only."""

    def __init__(self, folder: str, tag: str) -> None:
        self.rel = f"{_PREV}{tag}"
        self.path = os.path.join(folder, self.rel)
        self.fd: int | None = None
        self.tried = False

    def link(self, path: str, name: str) -> str | None:
        """A hard link to ``path`` as ``name`` in the folder, its path relative to the
        checkpoint's folder (None: links cannot be made there)."""
        if not self.tried:
            self.tried = True
            with contextlib.suppress(OSError):
                os.mkdir(self.path)
                self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            if self.fd is None:
                return None
            _unlink(name, dir_fd=self.fd)
            os.link(path, name, dst_dir_fd=self.fd)
        except OSError:
            return None
        return f"{self.rel}/{name}"

    def drop(self, name: str) -> None:
        if self.fd is not None:
            _discard(name, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _index_of(path: str, link: str, index_path: str, fsync: bool) -> bool:
    """Write ``index_path`` naming ``link`` (relative to its folder) for every tensor of
    the safetensors file ``path``; False (nothing written) when its header cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = parse_header_length(f.read(N_LEN), size)
            header = parse_header(f.read(n), size)
    except (OSError, TensorFileError):
        return False
    doc = {
        "metadata": {"total_size": header.data_len},
        "weight_map": dict.fromkeys(header.names, link),
    }
    _write_index(index_path, json.dumps(doc, indent=2).encode(), fsync)
    return True


def _single_behind_index(single: str, index_path: str, links: _Links, fsync: bool) -> None:
    """Make the old checkpoint of one file an index naming a link to it, and remove the
    file's own name (the index then holds the old checkpoint, whichever rule a reader
    follows, until the new index replaces it)."""
    link = links.link(single, os.path.basename(single))
    if link is None:
        return
    if not _index_of(single, link, index_path, fsync):
        links.drop(os.path.basename(single))
        return
    _unlink(single)


def _commit_through_index(
    staged: tuple[str, str], index_path: str, links: _Links, fsync: bool
) -> bool:
    """Commit a new checkpoint of one file over one with an index: the index rewritten to
    name the new file's link (the commit), the file renamed into place, then the index
    removed; False (nothing done) where that cannot be done."""
    stage, final = staged
    link = links.link(stage, os.path.basename(final))
    if link is None:
        return False
    if not _index_of(stage, link, index_path, fsync):
        links.drop(os.path.basename(final))
        return False
    os.replace(stage, final)
    _unlink(index_path)
    return True


def _keep_old(folder: str, index_path: str, taken: set[str], links: _Links) -> bool:
    """Link the old index's shards that new files will replace under hidden names and point
    the old index at them; False (nothing changed) where that cannot be done."""
    try:
        weight_map, _ = _index.read_index(index_path, local=True)
    except (TensorFileError, OSError):
        return False
    renamed: dict[str, str] = {}
    for shard in dict.fromkeys(weight_map.values()):
        if shard in taken and os.path.basename(shard) == shard:
            link = links.link(os.path.join(folder, shard), shard)
            if link is None:
                return False
            renamed[shard] = link
    try:
        with open(index_path, "rb") as f:
            doc = json.loads(f.read(_index.MAX_INDEX_BYTES + 1))
        doc["weight_map"] = {k: renamed.get(v, v) for k, v in weight_map.items()}
        _write_index(index_path, json.dumps(doc, indent=2).encode(), False)
    except (OSError, ValueError, TypeError, TensorFileError):
        return False
    return True


def _write_index(path: str, data: bytes, fsync: bool) -> None:
    """Write the index ``path`` atomically (a temporary file renamed into place)."""
    with atomic_write(path, fsync=fsync) as fd:
        write_all(fd, memoryview(data))


def _fsync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _text_map(value: Mapping[str, str] | None, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidArgumentError(f"{what} must map text to text, got {value!r:.200}")
    return {str(k): str(v) for k, v in value.items()}


def _counted(sizes: list[tuple[str, int]], ids: Mapping[str, Hashable]) -> int:
    """The total with each storage counted once (huggingface_hub's ``total_size``)."""
    seen: set[Hashable] = set()
    total = 0
    for name, n in sizes:
        sid = ids.get(name)
        if sid is not None:
            if sid in seen:
                continue
            seen.add(sid)
        total += n
    return total


def _unlink(path: str, *, dir_fd: int | None = None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _discard(path: str, *, dir_fd: int | None = None) -> bool:
    """Remove a leftover (never following a symbolic link); False where it cannot be
    removed (a folder, a name another user owns)."""
    try:
        os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _remove_staging(folder: str) -> None:
    """What a killed save left: its staging files (named with its process id, removed once
    that process is gone) and the temporary files of staging files it was writing (removed
    by :func:`remove_stale_temps`, which leaves a live writer's alone)."""
    for name in os.listdir(folder):
        if name.startswith(_STAGING):
            pid = name[len(_STAGING) :].partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                _unlink(os.path.join(folder, name))
        elif name.startswith("." + _STAGING) and ".tensorfile-" in name[len(_STAGING) + 1 :]:
            remove_stale_temps(os.path.join(folder, name[1:].rpartition(".tensorfile-")[0]))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # (another thread's save, perhaps)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid no process can have)
    return True


def _remove_stale(folder: str, prefix: str, keep: set[str]) -> None:
    """The files of an earlier save that this one did not write (huggingface_hub's
    pattern); what cannot be removed is left (never raises), and no shard outlives an
    index that could not be removed."""
    pattern = re.compile(f"{_pattern(prefix).pattern}({re.escape(_index.INDEX_SUFFIX)})?")
    stale = [n for n in _listing(folder) if pattern.fullmatch(n) and n not in keep]
    for name in sorted(stale, key=lambda n: not n.endswith(".json")):  # an index first: it
        if not _discard(os.path.join(folder, name)) and name.endswith(".json"):
            return  # must never outlive a shard it names


def _pattern(prefix: str) -> re.Pattern[str]:
    """The names of ``prefix``'s checkpoint files (one file, or shards)."""
    return re.compile(re.escape(prefix) + r"(-\d{5}-of-\d{5})?" + re.escape(SUFFIX))
