"""``safetensors.torch``, drop-in: save/load of torch tensors and models.

``save``, ``save_file``, ``load``, ``load_file``, ``save_model``, ``load_model``,
``storage_ptr`` and ``storage_size``, with the reference's signatures and results. Tensors
are read straight into new torch tensors (bf16, f8 and float4_e2m1fn_x2 included).
Saving checks what the reference checks, in its order and with its words (sparse, shared
and non-contiguous tensors are refused; ``save_model`` makes them contiguous). The
reference's helpers ``_find_shared_tensors``, ``_is_complete``, ``_remove_duplicate_names``
and ``_end_ptr`` are here, for code that imports them. As in the reference, loading goes through the
public :class:`~tensorfile.safetensors.safe_open` (``framework="pt"``), reading every tensor
at once with its :meth:`~tensorfile.safetensors.safe_open.read_tensors`.

Example:
    >>> import torch
    >>> from tensorfile.safetensors.torch import load, save
    >>> load(save({"x": torch.arange(3)}))["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch

from tensorfile.formats.safetensors import faces
from tensorfile.formats.safetensors.faces import (
    load_sharded as _load_sharded,
)
from tensorfile.formats.safetensors.faces import (
    safe_open,
)

from ..core.errors import InvalidArgumentError, InvalidTypeError, SharedTensorsError
from ..core.sizes import parse_size
from ..frameworks.torch import prepare_tensor
from ..loading import check_backend, settle

__all__ = [
    "load",
    "load_file",
    "load_model",
    "load_sharded",
    "save",
    "save_file",
    "save_model",
    "save_sharded",
    "storage_ptr",
    "storage_size",
]


def storage_ptr(tensor: torch.Tensor) -> int:
    """Address of the start of ``tensor``'s storage (0 when it has none)."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except Exception:
        try:
            return int(tensor.storage().data_ptr())  # type: ignore[no-untyped-call]
        except NotImplementedError:
            return 0


def storage_size(tensor: torch.Tensor) -> int:
    """Bytes of ``tensor``'s whole storage."""
    try:
        return int(tensor.untyped_storage().nbytes())
    except AttributeError:
        try:
            return int(tensor.storage().size() * tensor.element_size())  # type: ignore[no-untyped-call]
        except NotImplementedError:
            return int(tensor.nelement() * tensor.element_size())


def _end_ptr(tensor: torch.Tensor) -> int:
    """Address just past ``tensor``'s last element (the reference's helper)."""
    if tensor.nelement():
        return int(tensor.view(-1)[-1].data_ptr()) + tensor.element_size()
    return int(tensor.data_ptr())


def _find_shared_tensors(state_dict: dict[str, torch.Tensor]) -> list[set[str]]:
    """Names whose tensors overlap in memory, grouped (groups of one are unshared), in the
    order of the state dict, as the reference's helper of the same name returns them.

    Example:
        >>> w = torch.zeros(4)
        >>> [sorted(g) for g in _find_shared_tensors({"a": w, "b": w[:2], "c": torch.ones(1)})]
        [['a', 'b'], ['c']]
    """
    by_storage: dict[tuple[Any, int, int], set[str]] = defaultdict(set)
    for name, t in state_dict.items():
        if t.device.type != "meta" and storage_ptr(t) and storage_size(t):
            by_storage[(t.device, storage_ptr(t), storage_size(t))].add(name)
    groups: list[set[str]] = []
    for names in by_storage.values():
        if len(names) < 2:
            groups.append(names)
            continue
        spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
        groups.append({spans[0][2]})
        last_stop = spans[0][1]
        for start, stop, name in spans[1:]:
            if start >= last_stop:
                groups.append({name})
            else:
                groups[-1].add(name)
            last_stop = stop
    return groups


def _is_complete(t: torch.Tensor) -> bool:
    """True when ``t`` covers its whole storage, from its first byte (the reference's helper).

    Example:
        >>> w = torch.zeros(4)
        >>> _is_complete(w), _is_complete(w[:2])
        (True, False)
    """
    return t.data_ptr() == storage_ptr(t) and t.nelement() * t.element_size() == storage_size(t)


def _remove_duplicate_names(
    state_dict: dict[str, torch.Tensor],
    *,
    preferred_names: Iterable[str] | None = None,
    discard_names: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """For each group of shared tensors, the name to keep and the names to drop (the
    reference's helper, used by ``save_model`` and ``load_model``).

    A tensor that shares nothing but covers only part of its storage has no name to keep
    and is refused, as in the reference (:class:`SharedTensorsError`, a ``RuntimeError``).

    Example:
        >>> w = torch.zeros(3, 3)
        >>> dict(_remove_duplicate_names({"A": w, "B": w[:1], "C": w}))
        {'A': ['B', 'C']}
    """
    preferred = set(preferred_names or ())
    discard = set(discard_names or ())
    to_remove: dict[str, list[str]] = defaultdict(list)
    for group in _find_shared_tensors(state_dict):
        complete = {n for n in group if _is_complete(state_dict[n])}
        if not complete:
            raise SharedTensorsError(
                f"Error while trying to find names to remove to save state dict, but found no "
                f"suitable name to keep for saving amongst: {group}. None is covering the "
                "entire storage. Refusing to save/load the model since you could be storing "
                "much more memory than needed."
            )
        keep = sorted(complete)[0]
        if complete - discard:
            keep = sorted(complete - discard)[0]
        if preferred & complete:
            keep = sorted(preferred & complete)[0]
        for name in sorted(group):
            if name != keep:
                to_remove[keep].append(name)
    return to_remove


def _drop_shared(
    state_dict: dict[str, torch.Tensor], metadata: dict[str, str] | None
) -> dict[str, str] | None:
    """Drop from ``state_dict`` the names that share memory with a kept one, each recorded
    in ``metadata`` (made when it is None, set only where the caller has not) as ``dropped
    -> kept``, as the reference's ``save_model`` does; returns ``metadata``.

    Example:
        >>> w = torch.zeros(2)
        >>> state = {"a": w, "b": w}
        >>> _drop_shared(state, None), list(state)
        ({'b': 'a'}, ['a'])
    """
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            if metadata is None:
                metadata = {}
            metadata.setdefault(name, kept)
            del state_dict[name]
    return metadata


def _prepare(tensors: dict[str, torch.Tensor]) -> tuple[list[faces.Prepared], list[Any]]:
    """Check ``tensors`` as the reference does, in its order and with its messages, then
    take each tensor's bytes."""
    if not isinstance(tensors, dict):
        raise InvalidTypeError(
            f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}"
        )
    sparse = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise InvalidTypeError(
                f"Key `{name}` is invalid, expected torch.Tensor but received {type(t)}"
            )
        if t.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise InvalidArgumentError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not "
            "support. You can make it a dense tensor before saving with `.to_dense()` but be "
            "aware this might make a much larger file than needed."
        )
    failing = [g for g in _find_shared_tensors(tensors) if len(g) > 1]
    if failing:
        raise SharedTensorsError(
            f"Some tensors share memory, this will lead to duplicate memory on disk and "
            f"potential differences when loading them again: {failing}. A potential way to "
            "correctly save your model is to use `save_model`."
        )
    for name, t in tensors.items():
        if not t.is_nested and t.device.type != "meta" and not t.is_contiguous():
            raise InvalidArgumentError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not "
                "allowed. It either means you are trying to save tensors which are reference "
                "of each other in which case it's recommended to save only the full tensors, "
                "and reslice at load time, or simply call `.contiguous()` on your tensor to "
                "pack it before saving."
            )
    prepared, keep_alive = [], []
    for name, t in tensors.items():
        dt, shape, data, ref = prepare_tensor(name, t)
        prepared.append(faces.Prepared(name, dt, shape, data))
        keep_alive.append(ref)
    return prepared, keep_alive


def save(
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
    *,
    checksum: str | None = None,
) -> bytes:
    """Serialize torch tensors to the bytes of a safetensors file (``checksum``: see
    :func:`save_file`).

    Example:
        >>> len(save({"a": torch.zeros(2)}))
        72
    """
    prepared, _keep = _prepare(tensors)
    return faces.to_bytes(prepared, metadata, checksum=checksum)


def save_file(
    tensors: dict[str, torch.Tensor],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
    checksum: str | None = None,
) -> None:
    """Save torch tensors to ``filename``, atomically. ``checksum`` (``"xxh3"``,
    ``"crc32c"`` or ``"sha256"``) stores each tensor's digest under the metadata key
    ``tensorfile.digests`` (other readers load the file unchanged).

    Example:
        >>> save_file({"a": torch.zeros(2)}, "model.safetensors")
    """
    prepared, _keep = _prepare(tensors)
    faces.write_file(prepared, filename, metadata, align=align, fsync=fsync, checksum=checksum)


def load(data: bytes | bytearray | memoryview) -> dict[str, torch.Tensor]:
    """Load torch tensors from the bytes of a safetensors file.

    Example:
        >>> load(save({"a": torch.ones(1)}))["a"].tolist()
        [1.0]
    """
    with safe_open._from_bytes(data, framework="pt") as f:
        return f.read_tensors()


def load_file(
    filename: str | os.PathLike[str],
    device: Any = "cpu",
    *,
    backend: str = "auto",
    copy: bool | None = None,
    verify: bool = False,
    cache_dir: str | os.PathLike[str] | bool | None = None,
) -> dict[str, torch.Tensor]:
    """Load every tensor of ``filename`` as torch tensors on ``device`` (``verify=True``:
    check the digests the file records, see ``save_file(..., checksum=...)``).

    As in the reference, ``backend="mmap"`` on the cpu returns tensors backed by a private
    mapping of the file: loading costs only the header, pages are read when touched, and
    writing to a tensor never changes the file. ``backend="pread"`` (or ``copy=True``)
    returns owned tensors, read in parallel straight into their storage (a cold file with
    ``O_DIRECT``). ``backend="auto"`` (the default) picks per file: ``"mmap"`` on a local
    disk, first read ahead in parallel when the file is not in the page cache, and
    ``"pread"`` on a network or FUSE filesystem; :func:`tensorfile.loading.last` says what
    it chose and why. On any other device (``"cuda:0"``...) the tensors are made on the
    device and filled through a small ring of reused pinned host buffers
    (:mod:`tensorfile.frameworks.torch_stream`): the host holds the ring (about 96 MiB),
    never the whole model. ``cache_dir=`` keeps remote files' chunks in a local cache
    (see "Caching remote checkpoints" in docs/guides/remote.md).

    Example:
        >>> save_file({"a": torch.ones(2)}, "model.safetensors")
        >>> lazy = load_file("model.safetensors")
        >>> owned = load_file("model.safetensors", backend="pread")
        >>> lazy["a"].tolist(), owned["a"].tolist()
        ([1.0, 1.0], [1.0, 1.0])
    """
    check_backend(backend)
    owned = bool(copy) or str(device) != "cpu"
    f, choice = safe_open._load(
        filename,
        "pt",
        device,
        verify=verify,
        cache_dir=cache_dir,
        settle=lambda source: settle(source, filename, backend, owned=owned),
    )
    with f:
        return f.read_tensors(copy=copy if copy is not None else owned or choice.backend == "pread")


def save_model(
    model: torch.nn.Module,
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    force_contiguous: bool = True,
) -> None:
    """Save ``model``'s state dict, dropping names that share memory with a kept one.

    Each dropped name is recorded in the metadata as ``dropped -> kept`` (unless the caller
    set that key), as the reference does.

    Example:
        >>> save_model(torch.nn.Linear(2, 2), "linear.safetensors")
    """
    state_dict = model.state_dict()
    metadata = _drop_shared(state_dict, metadata)
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except InvalidArgumentError as exc:
        if force_contiguous or "non contiguous" not in str(exc):
            raise
        raise InvalidArgumentError(
            f"{exc} Or use save_model(..., force_contiguous=True), read the docs for potential "
            "caveats."
        ) from exc


def load_model(
    model: torch.nn.Module,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: Any = "cpu",
    *,
    backend: str = "mmap",
) -> tuple[set[str], list[str]]:
    """Load a file written by :func:`save_model` into ``model``.

    Returns ``(missing, unexpected)`` names (a set and a list, as the reference returns);
    with ``strict`` either being non-empty raises ``RuntimeError``.

    Example:
        >>> model = torch.nn.Linear(2, 2)
        >>> save_model(model, "model.safetensors")
        >>> missing, unexpected = load_model(model, "model.safetensors")
        >>> missing, unexpected
        (set(), [])
    """
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    result = model.load_state_dict(state_dict, strict=False)
    missing = set(result.missing_keys)
    unexpected = list(result.unexpected_keys)
    for dropped in to_removes.values():
        for name in dropped:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += f"\n    Missing key(s) in state_dict: {_quoted(missing)}"
        if unexpected:
            error += f"\n    Unexpected key(s) in state_dict: {_quoted(unexpected)}"
        raise RuntimeError(error)
    return missing, unexpected


def _quoted(names: Iterable[str]) -> str:
    """Names as the reference lists them in ``load_model``'s error: sorted, double-quoted."""
    return ", ".join(f'"{name}"' for name in sorted(names))


def save_sharded(
    tensors: dict[str, torch.Tensor],
    directory: str | os.PathLike[str],
    *,
    max_shard_size: int | str = "5GB",
    metadata: dict[str, str] | None = None,
    checksum: str | None = None,
) -> list[str]:
    """Save a state dict as huggingface_hub's ``save_torch_state_dict`` does: names that
    share memory with a kept one are dropped (each recorded in the metadata as ``dropped
    -> kept``, as :func:`save_model` does), tensors made contiguous, shards
    ``model-00001-of-0000N.safetensors`` with ``{"format": "pt"}`` and
    ``model.safetensors.index.json`` (or one ``model.safetensors``), atomically as a whole;
    ``huggingface_hub.load_torch_model`` and ``transformers`` load the result. Returns the
    file names written, the index last.

    Example:
        >>> import tempfile
        >>> save_sharded(torch.nn.Linear(2, 2).state_dict(), tempfile.mkdtemp())
        ['model.safetensors']
    """
    if not isinstance(tensors, dict):
        raise InvalidArgumentError(f"expected a dict of tensors, got {type(tensors).__name__}")
    size = parse_size(max_shard_size)
    state = dict(tensors)
    specs = {n: _spec(n, t) for n, t in state.items()}  # every value checked first
    meta = _drop_shared(state, dict(metadata) if metadata is not None else None)
    entries = [(n, *specs[n]) for n in state]
    return faces.write_sharded(
        entries,
        lambda n: prepare_tensor(n, state[n])[2],  # one tensor's copy at a time, if any
        directory,
        max_shard_size=size,
        metadata=meta,
        shard_metadata={"format": "pt"},
        storages={n: _storage(n, t) for n, t in state.items()},
        checksum=checksum,
    )


def _spec(name: str, tensor: Any) -> tuple[str, tuple[int, ...]]:
    """``(safetensors dtype, file shape)`` of a tensor about to be saved, without copying it
    (a tensor :func:`prepare_tensor` refuses is refused here, by it)."""
    from ..core import dtypes
    from ..frameworks import f4_shape

    ok = (
        isinstance(tensor, torch.Tensor)
        and tensor.layout == torch.strided
        and not tensor.is_nested
        and tensor.device.type != "meta"
    )
    try:
        dt = dtypes.from_torch(tensor.dtype) if ok else None
    except KeyError:
        dt = None
    if dt is None:
        prepare_tensor(name, tensor)  # raises the error it gives
        raise InvalidArgumentError(f"tensor {name!r} cannot be saved")  # (not reached)
    return dt.name, f4_shape(dt, tuple(tensor.shape), to="file")


def _storage(name: str, tensor: torch.Tensor) -> tuple[Any, int]:
    """huggingface_hub's storage id and size of a tensor once made contiguous (a tensor
    that is not gets a storage of its own)."""
    if not tensor.is_contiguous():
        return ("copy", name), tensor.nelement() * tensor.element_size()
    return (tensor.device, storage_ptr(tensor), storage_size(tensor)), storage_size(tensor)


def load_sharded(
    path: str | os.PathLike[str], device: Any = "cpu", *, verify: bool = False
) -> dict[str, torch.Tensor]:
    """Every tensor of a sharded checkpoint (``model.safetensors.index.json``, a folder
    holding one, or a single file; local or a URL), read as one plan: the shards are read
    in parallel, not one after the other (a tensorfile extension; the reference has none).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = save_sharded(torch.nn.Linear(2, 2).state_dict(), d)
        >>> sorted(load_sharded(d))[:1]
        ['bias']
    """
    return _load_sharded(path, "pt", device, verify=verify)
