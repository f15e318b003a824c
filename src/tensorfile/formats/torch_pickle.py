"""PyTorch pickles (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) as a read-only registry entry:
``pytorch``.

Read only through ``torch.load(weights_only=True)``: never an unrestricted unpickler, so a
pickle that needs anything but tensors, containers and plain values (an object of any
other class) is refused unexecuted (an :class:`~tensorfile.errors.UnsupportedError` quoting
torch's reason). torch is imported only when such a file is opened (without it: an
UnsupportedError naming the ``torch`` extra). Every pickle is scanned first, without
running it (:mod:`~tensorfile.formats._pickle_claims`), from the very bytes torch then
loads (:mod:`~tensorfile.formats._pickle_bytes`: a local file through the descriptor
opened, mapped with ``mmap=True`` where torch can, so its tensors stay in the page cache;
a remote one read once): one the scan cannot follow, storages claiming
more bytes than the file holds, or a call that could allocate a size the pickle only
claims (``bytearray(N)``) is refused before torch runs any of it. What torch loaded is
checked before it is copied: a tensor claiming more elements than its storage holds (a
stride-0 view) or repeating its elements is refused, naming it; each distinct tensor
becomes one array (one tensor listed many times is copied once), and copies of views
together take at most twice the bytes their storages hold (each byte once, however many
storages view it, and no more than the file's size). What the pickle flattens to is bounded
by the file's size too (:mod:`~tensorfile.formats._pickle_values`): entries read again
through shared containers, and the characters of names and of plain values' text, each
refused past a budget the file's size sets.

What the pickle holds becomes tensors and metadata by these rules (a training checkpoint,
``{"model_state_dict": ..., "optimizer_state_dict": ..., "epoch": 3, "char2idx": {...}}``,
is read whole):

* dicts, lists and tuples that hold tensors are flattened with dotted names
  (``{"model": {"w": t}}``: ``model.w``; an optimizer's ``{"state": {0: {"exp_avg": t}}}``:
  ``state.0.exp_avg``; ``{"layers": [t, u]}``: ``layers.0``, ``layers.1``), a key that is
  not text by its text (``str(key)``; a tuple by its repr, cut short); two entries that
  flatten to the same name (a dotted key and a nested dict, ``0`` and ``"0"``) are
  refused, naming it;
* a lone tensor: one tensor named after the file (``lone.pt``: ``lone``);
* every other entry (a number, text, None, a list or dict that holds no tensor) is not a
  tensor: it becomes a metadata value under its dotted name (``epoch``,
  ``optimizer_state_dict.param_groups``), kept whole as a JSON-like value
  (:func:`plain_value`: dict keys as text, tuples as lists; bytes, complex numbers, torch
  dtypes and devices as their text; a container inside itself as a text naming it, and
  one in several places rendered again while a budget lasts, then as a text naming where
  it was first; two keys with one text, or a lone surrogate, noted in its description)
  in the reader's
  :attr:`~PickleReader.attributes` (``3``), and as text in its ``metadata`` (text as it
  is, other values as JSON: ``"3"``, as every format whose metadata is text has it); the
  catalog's ``extra["not_tensors"]`` describes each
  (``{"epoch": "int", "char2idx": "dict of 80 ints"}``: :func:`describe`), which
  ``inspect`` and ``convert`` report. Converted to safetensors (text metadata only), text
  values are kept as they are and the others as JSON text; zTensor v2 keeps the values;
  npz keeps no metadata (convert says so);
* ``key="model_state_dict"`` (``--key`` on the command line) reads only the entries under
  that dotted name, named from there on (``weight``, not ``model_state_dict.weight``: what
  ``model.load_state_dict`` wants); a key that holds no tensors is refused, naming the
  keys that do.

Only dense (strided) tensors are read. Tensors are served from the loaded arrays
(:meth:`~tensorfile.core.reader.Reader.view` is zero-copy on them); the catalog's format is
``pytorch``. Writing PyTorch pickles is not supported
(:attr:`~tensorfile.formats.Format.writable` is False).

Example:
    >>> import os, tempfile, torch, tensorfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.pt")
    >>> torch.save({"model": {"w": torch.ones(2, 3)}, "epoch": 3}, path)
    >>> with tensorfile.open(path) as f:
    ...     f.format, f.keys(), f.view("model.w").sum(), f.metadata, f.attributes
    ('pytorch', ['model.w'], np.float32(6.0), {'epoch': '3'}, {'epoch': 3})
    >>> with tensorfile.open(path, key="model") as f:
    ...     f.keys(), f.metadata
    (['w'], {})
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..core import dtypes
from ..core.catalog import ByteRange, Catalog, Component, TensorInfo
from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    UnsupportedError,
    quoted_name,
)
from ..core.extras import require
from ..core.reader import brief
from ..core.source import Source
from . import metadata_text
from ._arrays import ArraysReader, ArraysSource, Segment
from ._pickle_bytes import load, pinned
from ._pickle_claims import scan, torch_rules
from ._pickle_values import Checkpoint, Plain, describe, plain_value, walk

__all__ = [
    "Checkpoint",
    "PickleReader",
    "describe",
    "load_tensors",
    "open_reader",
    "plain_value",
    "read_catalog",
    "read_checkpoint",
]


SAFE_TORCH = (2, 6)
"""The oldest torch whose ``torch.load(weights_only=True)`` tensorfile trusts with a pickle:
up to 2.5.1 a crafted file could run code through it (CVE-2025-32434)."""


def torch_is_safe(version: str) -> bool:
    """Whether torch ``version`` (``torch.__version__``) is at least :data:`SAFE_TORCH`.

    Example:
        >>> torch_is_safe("2.5.1+cpu"), torch_is_safe("2.6.0"), torch_is_safe("2.13.0")
        (False, True, True)
    """
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= SAFE_TORCH


def _torch(source: Source) -> Any:
    """torch, new enough that ``torch.load(weights_only=True)`` cannot be bypassed."""
    torch = require("torch", f"{quoted_name(source.name)}: reading a PyTorch pickle", extra="torch")
    if not torch_is_safe(torch.__version__):
        raise UnsupportedError(
            f"{quoted_name(source.name)}: torch {torch.__version__} is installed, and before 2.6 "
            "torch.load(weights_only=True) could be made to run code (CVE-2025-32434); "
            "tensorfile reads pickles only with torch>=2.6 (pip install -U torch)"
        )
    return torch


def _reason(exc: BaseException) -> str:
    """torch's reason for refusing a pickle, in one line: the weights-only unpickler's own
    words (``Unsupported global: GLOBAL builtins.print was not an allowed global by
    default``, ``Trying to load unsupported GLOBAL posix.system whose module posix is
    blocked``) without torch's advice to load the file unsafely; else the first line."""
    text = str(exc)
    for line in (found.strip() for found in text.splitlines()):
        if line.startswith("WeightsUnpickler error:"):
            line = line.removeprefix("WeightsUnpickler error:").strip()
            return line.split(". Please use", 1)[0].rstrip(".")
        if "GLOBAL " in line:
            return line.rstrip(".")
    return text.splitlines()[0] if text else type(exc).__name__


def _load(source: Source) -> Any:
    """``torch.load(weights_only=True)`` of the file in ``source``, with a torch new enough
    that it cannot be bypassed, once :func:`~tensorfile.formats._pickle_claims.scan` found
    nothing in it that would allocate more than the file holds: both read the same bytes
    (:func:`~tensorfile.formats._pickle_bytes.pinned`), never the file again by name."""
    torch = _torch(source)
    with pinned(source) as held:
        scan(held, torch_rules(torch))
        try:
            return load(torch, held)
        except (SourceError, FormatError):
            raise
        except Exception as exc:  # torch's UnpicklingError and friends: the reason is theirs
            raise UnsupportedError(
                f"{quoted_name(source.name)}: refused by torch.load(weights_only=True), the "
                "only way tensorfile reads pickles (it never runs code from one): "
                f"{_reason(exc)}"
            ) from None


def _select(found: Checkpoint, key: str, where: str) -> Checkpoint:
    """The entries under the dotted name ``key``, named from there on."""
    lead = key + "."
    picked = Checkpoint(
        {n[len(lead) :]: v for n, v in found.tensors.items() if n.startswith(lead)},
        {n[len(lead) :]: v for n, v in found.values.items() if n.startswith(lead)},
    )
    if picked.tensors:
        return picked
    if key in found.tensors:
        raise InvalidArgumentError(
            f"{quoted_name(where)}: key {key!r} is a tensor, not a dictionary of them: leave "
            "key out to read it with the others"
        )
    if key in found.values or picked.values:
        what = describe(found.values[key]) if key in found.values else "no tensors"
        raise InvalidArgumentError(f"{quoted_name(where)}: key {key!r} holds no tensors ({what})")
    tops = list(dict.fromkeys(n.split(".", 1)[0] for n in found.tensors if "." in n))
    choose = f": choose one of {', '.join(repr(t) for t in tops)}" if tops else ""
    raise InvalidArgumentError(f"{quoted_name(where)}: the pickle has no key {key!r}{choose}")


def read_checkpoint(source: Source, *, key: str | None = None) -> Checkpoint:
    """The tensors (torch tensors, as loaded) and other entries of the pickle in ``source``,
    by flattened name; with ``key``, those under it only (see the module docstring)."""
    found = walk(_load(source), source.name, source.size)
    return found if key is None else _select(found, key, source.name)


def load_tensors(
    source: Source, *, key: str | None = None
) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """The tensors of the pickle in ``source`` as numpy arrays (sharing memory with what
    torch loaded), and its other entries as they were loaded, by flattened name (see the
    module docstring)."""
    found = read_checkpoint(source, key=key)
    torch = sys.modules["torch"]
    from ..frameworks.torch import to_numpy

    where = quoted_name(source.name)
    for name, t in found.tensors.items():
        if t.layout != torch.strided:
            raise UnsupportedError(
                f"{where}: tensor {brief(name)} is {t.layout}; only dense tensors"
            )
        if t.is_meta or t.is_quantized:
            kind = "on the meta device (it has no data)" if t.is_meta else "quantized"
            raise UnsupportedError(f"{where}: tensor {brief(name)} is {kind}")
        if t.dim() > _NUMPY_DIMS:
            raise UnsupportedError(
                f"{where}: tensor {brief(name)} has {t.dim():,} dimensions; numpy arrays "
                f"have at most {_NUMPY_DIMS}"
            )
        _refuse_repeats(t, f"{where}: tensor {brief(name)}")
    held = min(_held(found.tensors.values()), source.size)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    made: dict[tuple[Any, ...], np.ndarray[Any, Any]] = {}  # one array for each view
    copied = 0
    for name, t in found.tensors.items():
        view = _view(t)
        if view not in made:
            if not t.is_contiguous() or t.is_conj() or t.is_neg():  # (a copy)
                copied += t.numel() * t.element_size()
                if copied > _COPIES * held:
                    raise UnsupportedError(
                        f"{where}: copying the pickle's views of its storages would take more "
                        f"than twice the {held:,} bytes they hold (at tensor {brief(name)}); "
                        "tensorfile copies no more than that"
                    )
            try:
                made[view] = to_numpy(t.detach().cpu().contiguous())
            except UnsupportedError as exc:
                raise UnsupportedError(f"{where}: tensor {brief(name)}: {exc}") from None
        arrays[name] = made[view]
    return arrays, found.values


_NUMPY_DIMS = 64
"""The most dimensions a numpy array has (torch allows more: such a tensor is refused)."""

_COPIES = 2
"""How many times the bytes of a pickle's storages its distinct non-contiguous views may
take copied (a matrix, its transpose and a slice of its columns: 1.5)."""


def _held(tensors: Iterable[Any]) -> int:
    """The bytes the storages of ``tensors`` hold: their memory, each byte counted once
    however many storages share it (an old-format pickle's storage views, zip records
    mapped where they overlap)."""
    spans = sorted({(s.data_ptr(), s.nbytes()) for s in (t.untyped_storage() for t in tensors)})
    held = end = 0
    for start, length in spans:
        held += max(0, start + length - max(start, end))
        end = max(end, start + length)
    return held


def _view(t: Any) -> tuple[Any, ...]:
    """What makes two tensors one array: their storage (by address), offset, sizes,
    strides, dtype and conjugate and negative bits."""
    data = t.untyped_storage().data_ptr()
    return data, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.is_conj(), t.is_neg()


def _refuse_repeats(t: Any, what: str) -> None:
    """Refuse a tensor whose elements are not each held once by its storage: more bytes
    than its storage holds from its offset (a stride-0 view, ``torch.zeros(1).expand(n)``,
    claims ``n`` elements and stores one), or strides that make two elements one (copying
    it would make what the file only claims)."""
    if t.numel() == 0:
        return
    size, stride = tuple(t.shape), tuple(t.stride())
    held = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
    need = t.numel() * t.element_size()
    layout = f"size {size}, stride {stride}"
    if need > held or min(stride, default=0) < 0:
        raise FormatError(
            f"{what} has {t.numel():,} elements ({layout}) needing {need:,} bytes, but its "
            f"storage holds {max(0, held):,} from its offset: the file is not what it says",
            format="pytorch",
        )
    reach = 1
    for step, n in sorted((st, n) for n, st in zip(size, stride, strict=True) if n > 1):
        if step < reach:
            raise UnsupportedError(
                f"{what} repeats elements of its storage ({layout}); tensorfile reads tensors "
                "whose every element is stored"
            )
        reach = step * n


def _keep(arr: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
    return lambda: arr


def _open(source: Source, key: str | None) -> tuple[Catalog, list[Segment]]:
    arrays, values = load_tensors(source, key=key)
    tensors: dict[str, TensorInfo] = {}
    segments = []
    at = source.size
    for name, arr in arrays.items():
        try:
            dt = dtypes.from_numpy(arr.dtype)
        except (KeyError, TypeError, ValueError):
            raise UnsupportedError(
                f"{quoted_name(source.name)}: tensor {brief(name)} has dtype {arr.dtype}, which no "
                "tensor format holds"
            ) from None
        rng = ByteRange(at, at + arr.nbytes)
        tensors[name] = TensorInfo(name, dt, tuple(arr.shape), {"data": Component(rng, dt)})
        segments.append(Segment(at, arr.nbytes, _keep(arr)))
        at += arr.nbytes
    attributes: dict[str, Any] = {}
    described: dict[str, str] = {}
    plain = Plain(source.name, source.size)  # (one budget: a list in every entry is one list)
    kinds: dict[int, str] = {}  # (a value in every entry is described once)
    for name, value in values.items():
        attributes[name], notes = plain.entry(value, name)
        lost = f" ({'; '.join(notes[:3])}{'...' if len(notes) > 3 else ''})" if notes else ""
        kind = kinds.get(id(value))
        if kind is None:
            kind = kinds[id(value)] = describe(value)
        described[name] = kind + lost
    extra = {"attributes": attributes, "not_tensors": described}
    return Catalog("pytorch", metadata_text(attributes), tensors, 0, 0, extra=extra), segments


def read_catalog(source: Source, *, key: str | None = None) -> Catalog:
    """The catalog of the PyTorch pickle in ``source`` (the pickle is loaded to learn it);
    ``key``: the entries under that dotted name only (see the module docstring)."""
    return _open(source, key)[0]


class PickleReader(ArraysReader):
    """A reader over a PyTorch pickle's tensors; :attr:`attributes` are its entries that are
    not tensors, as values (text in :attr:`metadata`)."""

    @property
    def attributes(self) -> dict[str, Any]:
        """The pickle's entries that are not tensors, as JSON-like values by dotted name."""
        found: dict[str, Any] = dict(self.catalog.extra.get("attributes", {}))  # type: ignore[call-overload]
        return found


def open_reader(
    source: Source, *, verify: bool | None = None, key: str | None = None
) -> PickleReader:
    """A reader over the PyTorch pickle in ``source`` (``key``: see :func:`read_catalog`)."""
    catalog, segments = _open(source, key)
    return PickleReader(ArraysSource(source.name, source, segments), catalog)
