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
together take at most twice the bytes of the storages they view.

What the pickle holds becomes tensors and metadata by these rules (a training checkpoint,
``{"model_state_dict": ..., "optimizer_state_dict": ..., "epoch": 3, "char2idx": {...}}``,
is read whole):

* dicts, lists and tuples that hold tensors are flattened with dotted names
  (``{"model": {"w": t}}``: ``model.w``; an optimizer's ``{"state": {0: {"exp_avg": t}}}``:
  ``state.0.exp_avg``; ``{"layers": [t, u]}``: ``layers.0``, ``layers.1``), a key that is
  not text by its text (``str(key)``); two entries that flatten to the same name (a dotted
  key and a nested dict, ``0`` and ``"0"``) are refused, naming it;
* a lone tensor: one tensor named after the file (``lone.pt``: ``lone``);
* every other entry (a number, text, None, a list or dict that holds no tensor) is not a
  tensor: it becomes a metadata value under its dotted name (``epoch``,
  ``optimizer_state_dict.param_groups``), kept whole as a JSON-like value
  (:func:`plain_value`: dict keys as text, tuples as lists; bytes, complex numbers, torch
  dtypes and devices as their text; a container inside itself as a text naming it; two
  keys with one text, or a lone surrogate, noted in its description) in the reader's
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
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

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
from ..core.source import Source
from . import metadata_text
from ._arrays import ArraysReader, ArraysSource, Segment, file_stem
from ._pickle_bytes import load, pinned
from ._pickle_claims import scan, torch_rules

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


_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
"""Values that are leaves of a checkpoint (torch.Size, dtypes and devices are too)."""


class Checkpoint(NamedTuple):
    """What a pickle holds, flattened: its tensors and its other entries (plain values:
    numbers, text, lists, dicts of them) by dotted name, in the pickle's order."""

    tensors: dict[str, Any]
    values: dict[str, Any]


def _is_container(value: Any, torch: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) and not isinstance(value, torch.Size)


def _children(value: Any, name: str) -> list[tuple[str, Any]]:
    """The named children of a container that holds containers: a dict's by the text of
    their keys (``0`` for the integer 0), a list's and a tuple's by their index."""
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    return [(f"{name}.{key}" if name else str(key), child) for key, child in items]


_LEFT = -2
"""The parent of a stack entry that marks the end of a container's walk."""


_PLAIN = frozenset({type(None), bool, int, float, str, bytes})
"""The commonest values that are no container (the check that skips them is the fast one)."""

_NUMBERS = frozenset({type(None), bool, int, float})
"""The values that are their own plain value."""


def _members(value: Any) -> Any:
    return value.values() if isinstance(value, Mapping) else value


def _holding(obj: Any, torch: Any) -> set[int]:
    """The ids of the containers in ``obj`` that hold a tensor, at any depth: each container
    is looked into once however often it is referred to (a cycle or a shared list costs
    nothing more), and one that holds only plain values is not remembered at all."""
    up: dict[int, list[int]] = {}  # a container's id -> the ids of the containers holding it
    held: list[int] = []  # the containers that hold a tensor themselves
    seen = {id(obj)}
    stack = [obj] if _is_container(obj, torch) else []
    while stack:
        value = stack.pop()
        direct = False
        for member in _members(value):
            if type(member) in _PLAIN:
                continue
            if isinstance(member, torch.Tensor):
                direct = True
            elif _is_container(member, torch) and any(
                type(m) not in _PLAIN and (isinstance(m, torch.Tensor) or _is_container(m, torch))
                for m in _members(member)
            ):  # (a container of plain values alone cannot lead to a tensor)
                up.setdefault(id(member), []).append(id(value))
                if id(member) not in seen:
                    seen.add(id(member))
                    stack.append(member)
        if direct:
            held.append(id(value))
    found = set(held)
    while held:
        for parent in up.get(held.pop(), ()):
            if parent not in found:
                found.add(parent)
                held.append(parent)
    return found


def _walk(obj: Any, where: str, limit: int) -> Checkpoint:
    """Flatten ``obj`` (see the module docstring) without recursion: a dict nested thousands
    deep, which ``torch.load`` accepts, is walked like any other. Only the containers that
    hold a tensor are opened: any other (a list of five million numbers, one that holds
    itself) is one plain value, whatever it holds. A container of tensors shared by two
    entries is read under both names; one that holds itself is, inside itself, a text value
    naming it; more than ``limit`` entries read again through a container walked before (a
    pickle can refer to one dict twice at every level: 2**60 entries in a few bytes) is
    refused. (Entries read once cost no budget: there are no more of them than objects
    ``torch.load`` made.)"""
    torch = sys.modules["torch"]
    holding = _holding(obj, torch)
    found = Checkpoint({}, {})
    stack: list[tuple[str, Any, int]] = [("", obj, -1)]
    path: dict[int, str] = {}  # the containers being walked (a repeat of one: a cycle)
    walked: set[int] = set()  # the containers walked (a repeat of one: shared)
    again = 0  # the entries read again, through a shared container
    while stack:
        name, value, parent = stack.pop()
        if parent == _LEFT:
            del path[id(value)]
            continue
        opened = _is_container(value, torch) and (parent < 0 or id(value) in holding)
        if opened and id(value) in path:
            value, opened = f"(the same object as {path[id(value)]!r})", False
        if opened:  # the top's entries are entries, tensors or not
            if id(value) in walked:
                again += len(value)
                if again > limit:
                    raise UnsupportedError(
                        f"{quoted_name(where)}: the pickle refers to its containers so often "
                        f"that it flattens to more than {limit:,} entries read twice"
                    )
            walked.add(id(value))
            path[id(value)] = name
            stack.append((name, value, _LEFT))  # popped once every child is walked
            stack.extend(reversed([(n, v, 0) for n, v in _children(value, name)]))
            continue
        into = found.tensors if isinstance(value, torch.Tensor) else found.values
        name = name or file_stem(where)  # a lone tensor or value: named after the file
        if name in into:
            raise UnsupportedError(
                f"{quoted_name(where)}: two entries flatten to the name {name!r} (a dotted key and "
                "a nested dict); rename one"
            )
        into[name] = value
    return found


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


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def describe(value: Any) -> str:
    """A short description of a checkpoint entry that is not a tensor.

    Example:
        >>> describe(3), describe(None), describe({"a": 1, "b": 2}), describe([0.5, 1.0])
        ('int', 'None', 'dict of 2 ints', 'list of 2 floats')
        >>> describe([{"lr": 0.1}]), describe(["a", 1]), describe(())
        ('list of 1 dict', 'list of 2 values', 'empty tuple')
    """
    if not isinstance(value, Mapping | list | tuple | set | frozenset):
        return _type_name(value)
    kind = "dict" if isinstance(value, Mapping) else type(value).__name__
    members = list(value.values() if isinstance(value, Mapping) else value)
    if not members:
        return f"empty {kind}"
    types = {_type_name(v) for v in members}
    what = types.pop() if len(types) == 1 else "value"
    many = "" if len(members) == 1 or what == "None" else ("es" if what[-1] == "s" else "s")
    return f"{kind} of {len(members):,} {what}{many}"


_MIN_ENTRIES = 1 << 17
"""Entries any pickle may flatten to twice, through containers it refers to more than once
(131,072); past it, one for each 16 bytes of the file. The same count bounds what
:func:`plain_value` renders twice of a container referred to twice."""

_DEPTH = 64
"""How deep :func:`plain_value` follows nested containers (deeper: a text saying so)."""


def _text(value: str, name: str, notes: list[str]) -> str:
    """``value``, or, where it holds a lone surrogate (which UTF-8 cannot hold, and a pickle
    can), the same text with it escaped (``\\ud800``), noted."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        notes.append(f"{name!r}: a lone surrogate in {value!r}, kept escaped")
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


class _Plain:
    """One :func:`plain_value` call: the containers on the path being rendered (a repeat:
    a cycle), those rendered once (a repeat of one costs the budget) and what was noted."""

    def __init__(self, notes: list[str]) -> None:
        self.path: dict[int, str] = {}
        self.done: dict[int, str] = {}
        self.left = _MIN_ENTRIES
        self.notes = notes

    def render(self, value: Any, name: str, depth: int) -> Any:
        if type(value) in _NUMBERS or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return _text(value, name, self.notes)
        if not isinstance(value, Mapping | list | tuple | set | frozenset):
            return _text(str(value), name, self.notes)
        if id(value) in self.path:
            return f"(the same object as {self.path[id(value)]!r})"
        first = self.done.get(id(value))
        if first is not None and len(value):
            if self.left < len(value):  # (a pickle can refer to one list twice at each level)
                return f"(the same object as {first!r})"
            self.left -= len(value)
        if depth >= _DEPTH:
            return f"({describe(value)}, nested more than {_DEPTH} deep)"
        self.done.setdefault(id(value), name)
        self.path[id(value)] = name
        try:
            if isinstance(value, Mapping):
                return self._mapping(value, name, depth)
            items = sorted(value, key=_order) if isinstance(value, set | frozenset) else value
            return [
                v if type(v) in _NUMBERS else self.render(v, f"{name}.{i}", depth + 1)
                for i, v in enumerate(items)
            ]
        finally:
            del self.path[id(value)]

    def _mapping(self, value: Mapping[Any, Any], name: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        keys: dict[str, Any] = {}
        for k, v in value.items():
            text = _text(k if isinstance(k, str) else str(k), f"{name} key", self.notes)
            if text in keys:
                self.notes.append(
                    f"{name!r}: keys {keys[text]!r} and {k!r} are both {text!r} as text; "
                    "the first kept"
                )
                continue
            keys[text] = k
            out[text] = self.render(v, f"{name}.{text}", depth + 1)
        return out


def _order(value: Any) -> tuple[str, str]:
    """A set's order: by type, then by text (a plain value's; a container's is not
    rendered, which could take as long as the container is deep)."""
    return type(value).__name__, repr(value) if isinstance(value, _SCALARS) else ""


def plain_value(value: Any, name: str = "", *, notes: list[str] | None = None) -> Any:
    """A checkpoint entry (named ``name``) as a JSON-like value, the form metadata keeps it
    in: dicts (keys as text), lists (tuples and sets too), text, numbers, booleans and None;
    anything else (bytes, a complex number, a torch dtype or device) as its text,
    ``str(value)``. A container that holds itself is, inside itself, a text naming it; what
    cannot be kept as it is (two keys with one text, ``0`` and ``"0"``; a lone surrogate in
    a text) is added to ``notes``.

    Example:
        >>> plain_value({"betas": (0.9, 0.999), 0: None, "d": b"x"})
        {'betas': [0.9, 0.999], '0': None, 'd': "b'x'"}
        >>> loop = [1]
        >>> loop.append(loop)
        >>> notes = []
        >>> plain_value(loop, "h"), plain_value({0: "a", "0": "b"}, "m", notes=notes), notes
        ([1, "(the same object as 'h')"], {'0': 'a'}, ["'m': keys 0 and '0' are both '0' as \
text; the first kept"])
    """
    return _Plain([] if notes is None else notes).render(value, name, 0)


def read_checkpoint(source: Source, *, key: str | None = None) -> Checkpoint:
    """The tensors (torch tensors, as loaded) and other entries of the pickle in ``source``,
    by flattened name; with ``key``, those under it only (see the module docstring)."""
    found = _walk(_load(source), source.name, source.size // 16 + _MIN_ENTRIES)
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
            raise UnsupportedError(f"{where}: tensor {name!r} is {t.layout}; only dense tensors")
        if t.is_meta or t.is_quantized:
            kind = "on the meta device (it has no data)" if t.is_meta else "quantized"
            raise UnsupportedError(f"{where}: tensor {name!r} is {kind}")
        _refuse_repeats(t, f"{where}: tensor {name!r}")
    held = sum({_view(t)[0]: t.untyped_storage().nbytes() for t in found.tensors.values()}.values())
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
                        f"than twice the {held:,} bytes they hold (at tensor {name!r}); "
                        "tensorfile copies no more than that"
                    )
            try:
                made[view] = to_numpy(t.detach().cpu().contiguous())
            except UnsupportedError as exc:
                raise UnsupportedError(f"{where}: tensor {name!r}: {exc}") from None
        arrays[name] = made[view]
    return arrays, found.values


_COPIES = 2
"""How many times the bytes of a pickle's storages its distinct non-contiguous views may
take copied (a matrix, its transpose and a slice of its columns: 1.5)."""


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
                f"{quoted_name(source.name)}: tensor {name!r} has dtype {arr.dtype}, which no "
                "tensor format holds"
            ) from None
        rng = ByteRange(at, at + arr.nbytes)
        tensors[name] = TensorInfo(name, dt, tuple(arr.shape), {"data": Component(rng, dt)})
        segments.append(Segment(at, arr.nbytes, _keep(arr)))
        at += arr.nbytes
    attributes: dict[str, Any] = {}
    described: dict[str, str] = {}
    for name, value in values.items():
        notes: list[str] = []
        attributes[name] = plain_value(value, name, notes=notes)
        lost = f" ({'; '.join(notes[:3])}{'...' if len(notes) > 3 else ''})" if notes else ""
        described[name] = describe(value) + lost
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
