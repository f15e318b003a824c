"""PyTorch pickles (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) as a read-only registry entry:
``pytorch``.

Read by tensorfile's own reader of the weights-only subset
(:mod:`~tensorfile.formats._unpickle`), never by ``torch.load`` or any other unpickler: a
pickle is read opcode by opcode, containers and plain values are built by tensorfile, and
tensors are views over the file's own bytes (a zip's ``data/<key>`` record, or an
old-format file's storages after its pickles), each checked against its storage as it is
made. A pickle that needs anything but tensors, containers and plain values (an object of
any other class, a call of any other function) is refused unread (an
:class:`~tensorfile.errors.UnsupportedError` naming it), and nothing a pickle claims is an
allocation: storages are the file's bytes, and what copying calls make is bounded by the
file's size. The bytes are read once (:mod:`~tensorfile.formats._pickle_bytes`: a local
file mapped through the descriptor opened, a remote one copied once into memory); a zip's
records are found by tensorfile's own strict zip reader (no torch needed). Each distinct
tensor becomes one array (one tensor listed many times is one array):
a contiguous one shares the file's bytes, and copies of the others together take at most
twice the bytes their storages hold. What the pickle flattens to is bounded by the file's
size too (:mod:`~tensorfile.formats._pickle_values`): entries read again through shared
containers, and the characters of names and of plain values' text, each refused past a
budget the file's size sets.

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

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import dtypes
from ..core.catalog import ByteRange, Catalog, Component, TensorInfo
from ..core.errors import FormatError, InvalidArgumentError, UnsupportedError, quoted_name
from ..core.reader import brief
from ..core.source import Source
from ..sources import MemorySource
from . import metadata_text
from ._arrays import ArraysReader, ArraysSource, Segment
from ._pickle_bytes import pinned
from ._pickle_calls import Stored
from ._pickle_values import Checkpoint, Plain, describe, plain_value, walk
from ._unpickle import read

__all__ = [
    "Checkpoint",
    "PickleReader",
    "check_plain",
    "describe",
    "load_tensors",
    "open_reader",
    "plain_value",
    "read_catalog",
    "read_checkpoint",
]


def _load(source: Source) -> Any:
    """The object the pickle in ``source`` holds, read once by tensorfile's own reader."""
    with pinned(source) as held:
        return read(held)


def check_plain(blob: bytes | memoryview, where: str) -> None:
    """Check, without running anything, that the ``torch.save`` bytes ``blob`` hold only
    what this module reads: tensors, containers (dicts, lists, tuples, sets) and plain
    values (numbers, text, bytes, None, ``torch.Size``, dtypes, devices). An object of any
    other class or any other call (a numpy array or scalar, a class of the program) is a
    :class:`~tensorfile.errors.FormatError` naming ``where`` and what the pickle asks for,
    and so is a blob that is no PyTorch pickle. What passes is what
    ``torch.load(weights_only=True)`` loads.

    Example:
        >>> import io, random, torch
        >>> buf = io.BytesIO()
        >>> torch.save({"step": 7, "rng": torch.get_rng_state(), "py": random.getstate()}, buf)
        >>> check_plain(buf.getvalue(), "state")  # passes: returns None
        >>> buf = io.BytesIO()
        >>> torch.save(print, buf)
        >>> check_plain(buf.getvalue(), "state")
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.FormatError: state: the pickle names builtins.print, ...
    """
    try:
        _load(MemorySource(bytes(blob), where))
    except UnsupportedError as exc:
        raise FormatError(str(exc), format="pytorch") from None


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
    """The tensors (:class:`~tensorfile.formats._pickle_values.Stored` records over the
    file's bytes) and other entries of the pickle in ``source``, by flattened name; with
    ``key``, those under it only (see the module docstring)."""
    found = walk(_load(source), source.name, source.size)
    return found if key is None else _select(found, key, source.name)


def load_tensors(
    source: Source, *, key: str | None = None
) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """The tensors of the pickle in ``source`` as numpy arrays (a contiguous one over the
    file's bytes, read-only; the others copied, at most twice the bytes their storages
    hold), and its other entries as they were read, by flattened name (see the module
    docstring)."""
    found = read_checkpoint(source, key=key)
    where = quoted_name(source.name)
    tensors: dict[str, Stored] = found.tensors
    roots = {id(r): r.nbytes for r in (t.storage.root()[0] for t in tensors.values())}
    held = min(sum(roots.values()), source.size)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    made: dict[str, np.ndarray[Any, Any]] = {}  # one array for each view
    copied = served = 0
    for name, t in tensors.items():
        served += t.nbytes  # (what every name serves: converted, hashed, verified each)
        if served > _SERVED * source.size + _SERVED_MIN:
            raise UnsupportedError(
                f"{where}: the pickle's names serve more than {_SERVED} times the file's "
                f"{source.size:,} bytes (at tensor {brief(name)}): one storage named again "
                "and again; tensorfile serves no more than that"
            )
        view = t.key()
        if view not in made:
            arr = t.array()
            if not t.contiguous():
                copied += t.nbytes
                if copied > _COPIES * held:
                    raise UnsupportedError(
                        f"{where}: copying the pickle's views of its storages would take more "
                        f"than twice the {held:,} bytes they hold (at tensor {brief(name)}); "
                        "tensorfile copies no more than that"
                    )
                arr = np.ascontiguousarray(arr)
            made[view] = arr
        arrays[name] = made[view]
    return arrays, found.values


_SERVED, _SERVED_MIN = 4, 64 << 20
"""What all of a pickle's names may serve together: 4 times the file's bytes and 64 MiB (a
model whose embedding and output share their weights serves under twice its file)."""

_COPIES = 2
"""How many times the bytes of a pickle's storages its distinct non-contiguous views may
take copied (a matrix, its transpose and a slice of its columns: 1.5)."""


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
