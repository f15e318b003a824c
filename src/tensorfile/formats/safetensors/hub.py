"""Hub checkpoints planned before a byte is written, and hub folders read as chunks.

Writing: :func:`plan_hub` lays out a whole checkpoint from its tensors' names, dtypes and
shapes alone: the shard split (huggingface_hub's rule, as :func:`write_sharded` does), each
file's header and every tensor's absolute byte range. Writers that fill the files at those
offsets from many places at once (the ranks of ``torch.distributed.checkpoint``) need
nothing else; the files they produce are byte for byte what
:func:`~tensorfile.safetensors.numpy.save_sharded` writes for the same tensors. With
``checksum=``, each header holds fixed-length placeholder digests, and
:meth:`FilePlan.header_with` gives the header with the real ones (same length).

Reading: :func:`hub_chunks` finds the files of a checkpoint folder (local or remote, through
a :class:`~tensorfile.sources.Store`) and says which part of which tensor each file holds: a
``model.safetensors`` or an index's shards hold whole tensors; a folder of per-rank files as
torch's ``HuggingFaceStorageWriter`` leaves them (``DCP_SHARDING_INFO`` in each header's
metadata) holds pieces of tensors at the offsets it records.

Example:
    >>> p = plan_hub([("a", "F32", (2,)), ("b", "U8", (3,))], max_shard_size=10**9)
    >>> [(f.name, f.regions["a"], f.regions["b"]) for f in p.files], p.index is None
    ([('model.safetensors', (120, 128), (128, 131))], True)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tensorfile.core.digests import placeholder
from tensorfile.core.dtypes import DType, from_safetensors
from tensorfile.core.errors import FormatError, InvalidArgumentError, SourceError
from tensorfile.core.reader import Reader
from tensorfile.formats import _index
from tensorfile.formats.safetensors._sharded import (
    INDEX_SUFFIX,
    SUFFIX,
    _names,
    _sizes,
    check_prefix,
    plan_shards,
    publish,
)
from tensorfile.formats.safetensors._writer import _digest_metadata, _layout, _Spec
from tensorfile.sources import Store

__all__ = [
    "SHARDING_KEY",
    "FilePlan",
    "HubChunk",
    "HubPlan",
    "check_prefix",
    "hub_chunks",
    "plan_hub",
    "publish",
    "remove_stale",
]

SHARDING_KEY = "DCP_SHARDING_INFO"
"""The header metadata key of torch's per-rank files: ``{fqn: {"saved_offsets": [...]}}``."""

MAX_SHARDING_TEXT = 64 << 20


@dataclass(frozen=True)
class FilePlan:
    """One file of a planned checkpoint: its name, header, and each tensor's absolute
    ``(start, stop)`` byte range."""

    name: str
    header: bytes
    regions: dict[str, tuple[int, int]]
    size: int
    _specs: list[_Spec] = field(repr=False)
    _metadata: dict[str, str] | None = field(repr=False)

    def header_with(self, digests: Mapping[str, str]) -> bytes:
        """The header with ``digests`` (``name -> "algorithm:hex"``, every tensor of the
        file) in place of the placeholders: the same length, so it is written over them."""
        header, _ = _layout(self._specs, _digest_metadata(self._metadata, digests), 8)
        if len(header) != len(self.header):
            raise InvalidArgumentError(f"{self.name}: the digests do not fit their placeholders")
        return header


@dataclass(frozen=True)
class HubPlan:
    """A planned checkpoint: its files in order, and its index (None for one file)."""

    files: list[FilePlan]
    index_name: str
    index: bytes | None
    total_size: int
    single_name: str
    """The name the checkpoint has as one file (``model.safetensors``)."""

    @property
    def names(self) -> list[str]:
        """The file names, the index (when there is one) last."""
        return [f.name for f in self.files] + ([self.index_name] if self.index else [])


def plan_hub(
    entries: Sequence[tuple[str, str, tuple[int, ...]]],
    *,
    max_shard_size: int,
    metadata: Mapping[str, str] | None = None,
    shard_metadata: Mapping[str, str] | None = None,
    checksum: str | None = None,
    prefix: str = "model",
) -> HubPlan:
    """Lay out the checkpoint of ``entries`` (``(name, safetensors dtype, shape)``, in the
    order the split takes them) as :func:`write_sharded` writes it: ``shard_metadata`` in
    every file's header, ``metadata`` in the index (beside ``total_size``), or in the file
    when there is one; ``checksum`` reserves digests of that algorithm.

    Example:
        >>> p = plan_hub([("a", "U8", (4,)), ("b", "U8", (4,))], max_shard_size=6)
        >>> p.names
        ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', \
'model.safetensors.index.json']
    """
    specs, sizes = _sizes(entries, None)
    shards = plan_shards(sizes, max_shard_size) or [[]]
    names = _names(prefix, len(shards))
    per_shard = dict(shard_metadata or {})
    files = []
    for fname, shard in zip(names, shards, strict=True):
        meta = {**per_shard, **dict(metadata or {})} if len(shards) == 1 else per_shard
        placed = [
            _Spec(
                n,
                from_safetensors(specs[n][0]),
                specs[n][1],
                from_safetensors(specs[n][0]).nbytes(math.prod(specs[n][1])),
            )
            for n in shard
        ]
        file_meta: dict[str, str] | None = dict(meta) if meta else None
        if checksum is not None:
            file_meta = _digest_metadata(file_meta, {s.name: placeholder(checksum) for s in placed})
        header, ordered = _layout(placed, file_meta, 8)
        regions: dict[str, tuple[int, int]] = {}
        pos = len(header)
        for s in ordered:
            regions[s.name] = (pos, pos + s.nbytes)
            pos += s.nbytes
        files.append(FilePlan(fname, header, regions, pos, placed, dict(meta) if meta else None))
    total = sum(n for _, n in sizes)
    index = None
    if len(files) > 1:
        weight_map = {n: fname for fname, shard in zip(names, shards, strict=True) for n in shard}
        doc = {"metadata": {"total_size": total, **dict(metadata or {})}, "weight_map": weight_map}
        index = json.dumps(doc, indent=2).encode()
    return HubPlan(files, prefix + INDEX_SUFFIX, index, total, prefix + SUFFIX)


def remove_stale(store: Store, prefix: str, keep: set[str]) -> list[str]:
    """Remove the files of an earlier checkpoint in ``store``'s folder that are not in
    ``keep`` (``<prefix>.safetensors``, ``<prefix>-0000k-of-0000n.safetensors``, the index:
    huggingface_hub's names), the index first; the names removed."""
    pattern = re.compile(re.escape(prefix) + r"(-\d{5}-of-\d{5})?" + re.escape(SUFFIX) +
                         r"(" + re.escape(INDEX_SUFFIX[len(SUFFIX):]) + r")?")  # fmt: skip
    stale = [n for n in store.list_files() if pattern.fullmatch(n) and n not in keep]
    stale.sort(key=lambda n: not n.endswith(INDEX_SUFFIX))  # never a shard before its index
    for name in stale:
        store.remove(name)
    return stale


@dataclass(frozen=True)
class HubChunk:
    """A tensor's piece in one file: the whole tensor (``offsets`` all 0) in a plain
    checkpoint, a rank's box of it in torch's per-rank files; ``dtype`` and ``start`` (its
    first byte in the file) are the file's."""

    name: str
    file: str
    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: DType
    start: int


def hub_chunks(
    store: Store,
    *,
    open_file: Callable[[str], Reader],
    prefix: str = "model",
    close: bool = True,
) -> tuple[list[HubChunk], dict[str, Mapping[str, str]]]:
    """The chunks of the checkpoint in ``store``'s folder and each file's header metadata,
    each file opened by ``open_file(name)`` and closed once read (a checkpoint may have more
    files than a process may keep open; ``close=False``: left to ``open_file``'s owner, a
    bounded cache of readers): ``<prefix>.safetensors.index.json``'s shards, else
    ``<prefix>.safetensors``, else every ``*.safetensors`` file of the folder (torch's
    per-rank files, each header's ``DCP_SHARDING_INFO`` placing its tensors; a file
    without it holds whole tensors). A tensor two files both hold whole, a folder with no
    checkpoint, or one holding shards named as huggingface_hub names them
    (``model-00001-of-00002.safetensors``) without their index (a save that did not
    finish, or a broken checkpoint: never loaded as a mix of what is there) is a
    :class:`~tensorfile.errors.FormatError`.
    """
    chunks: list[HubChunk] = []
    metadata: dict[str, Mapping[str, str]] = {}
    for name in _checkpoint_files(store, prefix):
        reader = open_file(name)
        try:
            meta = reader.metadata if isinstance(reader.metadata, Mapping) else {}
            metadata[name] = meta
            placed = _sharding(meta, store.url(name))
            for tname in reader.keys():
                info = reader.info(tname)
                if info.layout != "dense":
                    raise FormatError(f"{store.url(name)}: tensor {tname!r} is not dense")
                offs = placed.get(tname) if placed is not None else None
                if offs is None:
                    offs = (0,) * len(info.shape)
                if len(offs) != len(info.shape):
                    raise FormatError(
                        f"{store.url(name)}: {SHARDING_KEY} places {tname!r} with "
                        f"{len(offs)} offsets; it has {len(info.shape)} dimensions"
                    )
                chunks.append(
                    HubChunk(
                        tname, name, offs, tuple(info.shape), info.dtype, info.byte_range.start
                    )
                )
        finally:
            if close:
                reader.close()
    return chunks, metadata


_TORCH_RANK_FILE = re.compile(r"shard-\d{5}-model-\d{5}-of-\d{5}" + re.escape(SUFFIX))
"""torch's per-rank files (``HuggingFaceStorageWriter(save_distributed=True)``)."""

_HUB_SHARD = re.compile(r".+-\d{5}-of-\d{5}" + re.escape(SUFFIX))
"""huggingface_hub's names of shards (``model-00001-of-00002.safetensors``)."""


def _checkpoint_files(store: Store, prefix: str) -> list[str]:
    index = prefix + INDEX_SUFFIX
    if store.file_size(index) is not None:
        raw = store.read_bounded(index, "the checkpoint index", _index.MAX_INDEX_BYTES)
        if raw is None:
            raise SourceError(f"{store.url(index)} vanished while it was read")
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            raise FormatError(f"{store.url(index)} is not valid JSON") from None
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise FormatError(f"{store.url(index)} has no 'weight_map' of names to shard files")
        out: list[str] = []
        for shard in weight_map.values():
            if shard not in out:
                if shard in ("", ".", "..") or _plain(shard) != shard:
                    raise FormatError(
                        f"{store.url(index)} names a shard outside its folder: {shard!r:.200}"
                    )
                out.append(shard)
        return out
    single = prefix + SUFFIX
    if store.file_size(single) is not None:
        return [single]
    if prefix != "model":  # (the files of any save are found by their own names only)
        raise SourceError(f"{store.url()} holds no {prefix!r} checkpoint: no {index}, no {single}")
    try:
        listed = store.list_files()
    except SourceError:
        listed = []
    found = [n for n in listed if n.endswith(SUFFIX) and not n.startswith(".")]
    if not found:
        raise SourceError(
            f"{store.url()} holds no checkpoint: no {index}, no {single} and no *.safetensors files"
        )
    shards = [n for n in found if _HUB_SHARD.fullmatch(n) and not _TORCH_RANK_FILE.fullmatch(n)]
    if shards:
        raise FormatError(
            f"{store.url()} holds shards of a checkpoint ({', '.join(sorted(shards)[:3])}"
            f"{'...' if len(shards) > 3 else ''}) but not their index: a save that did not "
            "finish, or a broken checkpoint; tensorfile does not load what is left of it"
        )
    return found


def _plain(shard: str) -> str | None:
    """``shard`` normalised when it is a plain name of a file in the index's folder or
    below it (the links a publication keeps an old checkpoint by are in a hidden folder),
    else None: the rule of :func:`tensorfile.formats._index.shard_name`."""
    try:
        return _index.shard_name("index", shard)
    except InvalidArgumentError:
        return None


def _sharding(metadata: Mapping[str, str], shown: str) -> dict[str, tuple[int, ...]] | None:
    """The offsets torch's per-rank file records for its tensors (None: none recorded)."""
    text = metadata.get(SHARDING_KEY)
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > MAX_SHARDING_TEXT:
        raise FormatError(f"{shown}: {SHARDING_KEY} is not JSON text of a usable size")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise FormatError(f"{shown}: {SHARDING_KEY} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{shown}: {SHARDING_KEY} is not a JSON object")
    out: dict[str, tuple[int, ...]] = {}
    for name, entry in doc.items():
        offs = entry.get("saved_offsets") if isinstance(entry, dict) else None
        if not isinstance(offs, list) or not all(type(o) is int and 0 <= o < 1 << 62 for o in offs):
            raise FormatError(f"{shown}: {SHARDING_KEY} entry {name!r:.100} has no list of offsets")
        out[name] = tuple(offs)
    return out
