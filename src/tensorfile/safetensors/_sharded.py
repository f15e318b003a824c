"""Sharded checkpoints as huggingface_hub writes them: ``model-00001-of-00003.safetensors``
shards and ``model.safetensors.index.json`` (``{"metadata": {"total_size": N, ...},
"weight_map": {tensor: shard}}``), or one ``model.safetensors`` when everything fits.

The split is huggingface_hub's (``split_state_dict_into_shards_factory``): tensors in order,
a new shard when the next tensor would take the current one over ``max_shard_size``, a
tensor bigger than that alone in a shard of its own. Sizes are decimal (``"5GB"``) or binary
(``"5GiB"``).

Atomic as a whole: every shard is written under a staging name first; then the old index
is removed, the shards are renamed into place, and the new index is written last, so a
failure (or a SIGKILL) at any instant never leaves an index naming a shard that is missing
or from another save. Files of an earlier save that the new one does not reuse
(``model-*-of-*.safetensors``, ``model.safetensors``, the index) are removed only after
success.

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

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.atomic import AtomicFile
from ..core.dtypes import from_safetensors
from ..core.errors import InvalidArgumentError, SourceError
from ..core.sizes import parse_size
from ._writer import StreamWriter

__all__ = ["INDEX_SUFFIX", "parse_size", "plan_shards", "write_sharded"]

INDEX_SUFFIX = ".safetensors.index.json"
_STAGING = ".tensorfile-staging-"


def plan_shards(sizes: Sequence[tuple[str, int]], max_shard_size: int) -> list[list[str]]:
    """huggingface_hub's split of ``(name, nbytes)`` pairs into shards of names.

    Example:
        >>> plan_shards([("a", 6), ("b", 6), ("c", 20), ("d", 3)], 10)
        [['a'], ['c'], ['b', 'd']]
    """
    shards: list[list[str]] = []
    current: list[str] = []
    size = 0
    for name, n in sizes:
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
    return shards


def _names(prefix: str, count: int) -> list[str]:
    if count == 1:
        return [f"{prefix}.safetensors"]
    return [f"{prefix}-{k:05d}-of-{count:05d}.safetensors" for k in range(1, count + 1)]


def write_sharded(
    entries: Sequence[tuple[str, str, tuple[int, ...]]],
    data: Callable[[str], Any],
    directory: str | os.PathLike[str],
    *,
    max_shard_size: int,
    metadata: Mapping[str, str] | None = None,
    prefix: str = "model",
    shard_metadata: Mapping[str, str] | None = None,
    tick: Callable[[str], None] | None = None,
) -> list[str]:
    """Write a checkpoint tensor by tensor (memory: one tensor at a time).

    ``entries`` are ``(name, safetensors dtype, shape)``; ``data(name)`` gives a tensor's
    array or bytes, once per tensor, in writing order. ``shard_metadata`` goes in every
    shard's header, ``metadata`` in the index (beside ``total_size``), and in the file itself
    when there is one file (huggingface_hub's rule). Returns the names written, relative to
    ``directory``, the index last.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix) or prefix.startswith("."):
        raise InvalidArgumentError(f"prefix {prefix!r}: a plain file name stem")
    folder = os.fspath(directory)
    if not isinstance(folder, str) or not folder:
        raise InvalidArgumentError("the directory must be a non-empty path")
    meta = dict(metadata or {})
    per_shard = dict(shard_metadata or {})
    specs = {name: (dtype, tuple(shape)) for name, dtype, shape in entries}
    if len(specs) != len(entries):
        raise InvalidArgumentError("a tensor name appears twice")
    sizes = [(n, from_safetensors(d).nbytes(math.prod(s))) for n, d, s in entries]
    plan = plan_shards(sizes, max_shard_size) or [[]]
    names = _names(prefix, len(plan))
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
            with StreamWriter(stage, {n: specs[n] for n in shard}, header_meta or None) as w:
                for n in shard:
                    w.write(n, data(n))
                    if tick is not None:
                        tick(n)
            staged.append((stage, os.path.join(folder, fname)))
    except BaseException:
        for stage, _ in staged:
            _unlink(stage)
        raise
    index_name = prefix + INDEX_SUFFIX
    index_path = os.path.join(folder, index_name)
    _unlink(index_path)  # from here until the new index exists, no index names anything
    for stage, final in staged:
        os.replace(stage, final)
    written = list(names)
    if len(plan) > 1:
        weight_map = {n: fname for fname, shard in zip(names, plan, strict=True) for n in shard}
        doc = {
            "metadata": {"total_size": sum(n for _, n in sizes), **meta},
            "weight_map": weight_map,
        }
        out = AtomicFile(index_path)
        try:
            os.write(out.fd, json.dumps(doc, indent=2).encode())
            out.commit()
        except BaseException:
            out.abort()
            raise
        written.append(index_name)
    _remove_stale(folder, prefix, set(written))
    return written


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_staging(folder: str) -> None:
    """Staging files of a save that was killed (ours by name)."""
    for name in os.listdir(folder):
        if name.startswith(_STAGING):
            _unlink(os.path.join(folder, name))


def _remove_stale(folder: str, prefix: str, keep: set[str]) -> None:
    """The files of an earlier save that this one did not write (huggingface_hub's pattern)."""
    pattern = re.compile(re.escape(prefix) + r"(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?")
    for name in os.listdir(folder):
        if pattern.fullmatch(name) and name not in keep:
            _unlink(os.path.join(folder, name))
