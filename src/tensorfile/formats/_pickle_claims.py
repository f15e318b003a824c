"""What a PyTorch pickle would make torch allocate, read before ``torch.load`` runs it.

``torch.load(weights_only=True)`` never runs a pickle's own code, but what it does run can
allocate any size a pickle names: the storage of a persistent id
``("storage", <torch.FloatStorage>, key, location, numel[, view])`` (the old format's loader
allocates ``numel`` elements the moment it meets the id, before any of its bytes are
read), ``builtins.bytearray(N)``, a legacy tensor or storage class called with a size
(``torch.FloatTensor(N)``, ``torch.storage.UntypedStorage(N)``), ``_rebuild_qtensor``
(allocates its size and its quantizer's parameters), and rebuilds that convert a tensor
while loading (``_rebuild_device_tensor_from_cpu_tensor(view, torch.float64, ...)``
materializes any stride-0 view). Each call runs as its opcode comes, so a refusal torch
makes further on comes after the allocation.

:func:`scan` reads every pickle torch would (the zip's ``data.pkl``, found by torch's own
zip reader, :mod:`._pickle_bytes`; an old-format
file's five: torch's magic number, its protocol version, a description of the machine,
the object, the list of storage keys), opcode by opcode as torch's weights-only unpickler
reads them, with a stack of plain values (nothing is imported, called or built), and
refuses, before torch runs any of it:

* what it cannot follow: an opcode torch's unpickler does not read either, a length past
  the end, a stack underflow, a memo entry never stored (a :class:`FormatError`; torch
  would refuse it too, but only after running everything before it);
* a call of anything but what tensor checkpoints use (:data:`_CALLS`: tensor and parameter
  rebuilds, ``OrderedDict``, ``Counter``, ``set``, ``complex``, ``torch.Size``,
  ``torch.device``, bytes and bytearrays from their text), or one of those with arguments
  that could allocate more than the pickle holds (``bytearray(N)``, ``set(tensor)``,
  ``OrderedDict((tensor,))``, which unbinds it; a quantized tensor, which tensorfile
  refuses anyway): an :class:`UnsupportedError` naming it; copying calls over one memoized
  argument, past ``16 ×`` the file's size in items (a :class:`FormatError`);
* storages claiming more bytes than the file holds for them: an old-format file keeps
  their bytes after the object's pickle, a zip one in its record ``data/<key>`` (stored,
  as ``torch.save`` writes it); each key counted once, at the element size of its class
  (a legacy tensor class, ``torch.DoubleTensor``, at its dtype's; one unknown at 16, the
  largest) (a :class:`FormatError`);
* a tensor whose offset, size and stride reach past its storage's bytes (torch's ``set_``
  grows an old-format storage to fit, and nothing of the file fills what it grew), or
  with more elements than its storage holds from its offset (a :class:`FormatError`); one
  of more than 64 dimensions, or any state given to a tensor (``tensor.set_(*state)``,
  which ``torch.save`` never writes: an :class:`UnsupportedError`);
* an old-format storage that the list of storage keys leaves out, or an empty one named
  again (torch never fills it from the file: it would hold whatever memory held before;
  a :class:`FormatError`).

A global that torch refuses (``rules.allows``) ends the scan: torch's unpickler stops at
that very opcode, having run only what the scan has checked, and says why itself.

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.zeros(4)}, buf, _use_new_zipfile_serialization=False)
    >>> claims(io.BytesIO(buf.getvalue()))
    (16, 313)
    >>> scan(MemorySource(buf.getvalue()))  # 16 bytes claimed, and held
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from ..core.errors import FormatError, UnsupportedError, quoted_name
from ..core.source import Source
from . import NPZ
from . import _pickle_bytes as _pb
from ._arrays import SourceFile
from ._pickle_bytes import STRICT, Rules, fold, torch_rules, zip_records

__all__ = ["STRICT", "Rules", "claims", "scan", "torch_rules"]

_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER, the first pickle
_HEAD = 3  # the pickles before the object's: the magic number, the protocol, the machine


class _Global(NamedTuple):
    name: str  # module.name, as torch resolves it


class _Thing:
    """A value the scan does not look into: ``kind`` says what it is (``list``, ``dict``,
    ``set``, ``tensor``, ``storage``, ``value``); a storage knows its element size and its
    bytes; a list whose items are kept (the storage keys') has them in ``items``."""

    __slots__ = ("items", "itemsize", "kind", "nbytes", "tensors")

    def __init__(self, kind: str, itemsize: int = 0, nbytes: int = 0) -> None:
        self.kind, self.itemsize, self.nbytes = kind, itemsize, nbytes  # (a container's: items)
        self.items: list[Any] | None = None
        self.tensors = kind == "tensor"  # (whether it is or holds a tensor)


class _Stop(Exception):
    """A global torch refuses: torch's unpickler stops at it."""


class _Bad(Exception):
    """What the scan cannot follow (torch's unpickler would fail there too)."""


_CONTAINERS = ("list", "dict", "set")
_SIMPLE = (bool, int, float, str, bytes, type(None))
_LATIN1 = ("latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1", "iso_8859_1")


def _is(value: Any, *kinds: str) -> bool:
    return isinstance(value, _Thing) and value.kind in kinds


def _iterable(args: tuple[Any, ...]) -> bool:
    """At most one argument: a text, a tuple of plain values, or a container holding no
    tensor (unpacking one as a pair makes an object per row: a stride-0 view's, any)."""
    return len(args) == 0 or (
        len(args) == 1
        and (
            (_is(args[0], *_CONTAINERS) and not args[0].tensors)
            or isinstance(args[0], str)
            or (isinstance(args[0], tuple) and all(isinstance(v, _SIMPLE) for v in args[0]))
        )
    )


def _text_args(args: tuple[Any, ...]) -> bool:
    """``(text, 'latin1')``: bytes as pickle protocol 2 writes them (never a count)."""
    return (
        len(args) in (1, 2)
        and isinstance(args[0], str)
        and (len(args) == 1 or (isinstance(args[1], str) and args[1].lower() in _LATIN1))
    )


def _bytes(args: tuple[Any, ...]) -> bool:
    """``(bytes,)``: a copy of bytes the pickle holds (``_codecs.encode``'s)."""
    return len(args) == 1 and (_is(args[0], "bytes") or isinstance(args[0], bytes))


def _ints(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) <= _DIMS
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )


_TENSOR = "tensor"
_DIMS = 64  # the most dimensions a size or stride may have (numpy's limit)
_CALLS: dict[str, tuple[Callable[[tuple[Any, ...]], bool], str]] = {
    "collections.OrderedDict": (_iterable, "dict"),
    "collections.Counter": (_iterable, "dict"),
    "builtins.set": (_iterable, "set"),
    "builtins.complex": (
        lambda a: len(a) <= 2 and all(type(v) in (int, float) for v in a),
        "value",
    ),
    "builtins.bytearray": (lambda a: not a or _text_args(a) or _bytes(a), "value"),
    "_codecs.encode": (_text_args, "bytes"),
    "torch.Size": (lambda a: not a or (len(a) == 1 and _ints(a[0])), "value"),
    "torch.device": (lambda a: len(a) in (1, 2) and all(type(v) in (str, int) for v in a), "value"),
    "torch.serialization._get_layout": (lambda a: len(a) == 1 and isinstance(a[0], str), "value"),
    "torch._utils._rebuild_tensor": (lambda a: bool(a) and _is(a[0], "storage"), _TENSOR),
    "torch._utils._rebuild_tensor_v2": (lambda a: bool(a) and _is(a[0], "storage"), _TENSOR),
    "torch._utils._rebuild_tensor_v3": (lambda a: bool(a) and _is(a[0], "storage"), _TENSOR),
    "torch._utils._rebuild_parameter": (lambda a: bool(a) and _is(a[0], _TENSOR), _TENSOR),
    "torch._utils._rebuild_parameter_with_state": (
        lambda a: bool(a) and _is(a[0], _TENSOR),
        _TENSOR,
    ),
    "torch._utils._rebuild_meta_tensor_no_storage": (lambda a: True, _TENSOR),  # (no memory)
}
"""The calls tensor checkpoints make, each with what its arguments must be so that it
allocates no more than the pickle holds, and what it makes."""

_WHY = {
    "torch._utils._rebuild_sparse_tensor": "a sparse tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_nested_tensor": "a nested tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": "it converts a tensor while loading",
    "torch._utils._rebuild_device_tensor_from_numpy": "it converts an array while loading",
    "torch._utils._rebuild_wrapper_subclass": "a tensor subclass without storage",
    "torch._utils._rebuild_qtensor": "a quantized tensor; tensorfile reads dense tensors",
}

_NEEDLESS = "a tensor checkpoint does not need it, and it could allocate more than the file holds"
_TYPES = frozenset({"torch.Tensor", "torch.nn.parameter.Parameter"})


_LINE = 1 << 16  # the longest GLOBAL line read
_SHOWN_DEPTH = 4  # how deep a refusal shows nested tuples
_COPIES = frozenset({"collections.OrderedDict", "collections.Counter", "builtins.set",
                     "builtins.bytearray", "_codecs.encode", "torch.Size"})  # fmt: skip
"""The calls that copy or iterate over their argument: each charged its length."""
_SETS = frozenset({"torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
                   "torch._utils._rebuild_tensor_v3"})  # fmt: skip
"""The rebuilds that give a tensor a layout over a storage with ``set_``."""


class _Machine:
    """One pickle's stack, marks and memo, as torch's weights-only unpickler keeps them."""

    def __init__(
        self, f: Any, rules: Rules, where: str, budget: int, size: int, keep: bool = False
    ) -> None:
        self.f, self.rules, self.where = f, rules, where
        self.pos, self.size = int(f.tell()), size  # (where f stands; where it ends)
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.pids: list[tuple[Any, ...]] = []
        self.storages: dict[Any, tuple[int, int]] = {}  # key -> (bytes, itemsize): the first
        self.keep = keep  # (whether lists keep their items)
        self.budget = 16 * budget + (64 << 20)  # items copying calls may still make
        self.held: dict[int, tuple[Any, ...]] = {}  # id -> each tuple holding a tensor

    def read(self, n: int) -> bytes:
        """``n`` bytes, never asking for more than the file holds (no claimed length is an
        allocation)."""
        if n > self.size - self.pos:
            raise _Bad(f"{n:,} bytes asked, {max(0, self.size - self.pos):,} left in the file")
        data: bytes = self.f.read(n)
        if len(data) != n:
            raise _Bad(f"{n:,} bytes asked, {len(data):,} left in the file")
        self.pos += n
        return data

    def pop(self) -> Any:
        if not self.stack:
            raise _Bad("stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise _Bad("no mark")
        items, self.stack = self.stack, self.metastack.pop()
        return items

    def run(self) -> Any:
        """Scan up to the pickle's ``STOP``; its value (a plain value, or what the scan
        keeps of it)."""
        while True:
            at = self.pos
            key = self.read(1)[0]
            try:
                done, value = self.step(key)
            except (_Bad, UnicodeDecodeError) as exc:  # (text that is not UTF-8)
                raise _Bad(f"{exc} (opcode 0x{key:02x} at offset {at:,})") from None
            if done:
                return value

    def step(self, key: int) -> tuple[bool, Any]:
        op, push = chr(key), self.stack.append
        if op in _FIXED:
            push(_FIXED[op]())
            if self.keep and op == "]":
                self.stack[-1].items = []
        elif op in _NUMBERS:
            size, fmt = _NUMBERS[op]
            push(struct.unpack(fmt, self.read(size))[0])
        elif op == "X":  # BINUNICODE
            push(str(self.read(struct.unpack("<I", self.read(4))[0]), "utf-8", "surrogatepass"))
        elif op == "U":  # SHORT_BINSTRING (torch.load decodes it as UTF-8)
            push(self.read(self.read(1)[0]).decode("utf-8"))
        elif op == "\x8a":  # LONG1
            push(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))
        elif op == "c":  # GLOBAL
            push(self.global_())
        elif op == "(":  # MARK
            self.metastack.append(self.stack)
            self.stack = []
        elif op == "t":
            made = self.tuple_(self.pop_mark())  # (pop_mark replaces the stack)
            self.stack.append(made)
        elif op in "\x85\x86\x87":  # TUPLE1, TUPLE2, TUPLE3
            n = key - 0x84
            if len(self.stack) < n:
                raise _Bad("stack underflow")
            self.stack[-n:] = [self.tuple_(self.stack[-n:])]
        elif op in "hj":  # BINGET, LONG_BINGET
            index = self.read(1)[0] if op == "h" else struct.unpack("<I", self.read(4))[0]
            if index not in self.memo:
                raise _Bad(f"memo entry {index} was never stored")
            push(self.memo[index])
        elif op in "qr":  # BINPUT, LONG_BINPUT
            index = self.read(1)[0] if op == "q" else struct.unpack("<I", self.read(4))[0]
            if not self.stack:
                raise _Bad("stack underflow")
            self.memo[index] = self.stack[-1]
        elif op == "R":  # REDUCE
            args = self.pop()
            if not self.stack:
                raise _Bad("stack underflow")
            self.stack[-1] = self.call(self.stack[-1], args)
        elif op == "\x81":  # NEWOBJ: only nn.Parameter(tensor, requires_grad) is built
            args, cls = self.pop(), self.pop()
            if cls != _Global("torch.nn.parameter.Parameter") or not isinstance(args, tuple):
                raise UnsupportedError(self.refusal(cls, "a new object of it"))
            push(_Thing(_TENSOR))
        elif op == "b":  # BUILD: state for a tensor, a parameter or a dict
            state = self.pop()
            if not self.stack:
                raise _Bad("stack underflow")
            if _is(self.stack[-1], _TENSOR):  # (torch: tensor.set_(*state); torch.save
                shown = f"with {_show(state)} as a tensor's state"  # writes none)
                raise UnsupportedError(self.refusal(_Global("torch.Tensor.set_"), shown))
            if self.holds(state) and not _is(state, "dict"):  # (__dict__.update(state))
                shown = f"with {_show(state)}, holding a tensor, as an object's state"
                raise UnsupportedError(self.refusal(_Global("dict.update"), shown))
        elif op == "a":  # APPEND
            self.add([self.pop()])
        elif op == "e":  # APPENDS
            self.add(self.pop_mark())
        elif op == "s":  # SETITEM
            self.put([self.pop(), self.pop()], "dict")
        elif op == "u":  # SETITEMS
            self.put(self.pop_mark(), "dict")
        elif op == "Q":  # BINPERSID
            push(self.storage(self.pop()))
        elif op == "\x80":  # PROTO
            self.read(1)
        elif op == ".":  # STOP
            return True, self.pop()
        else:
            raise _Bad("an opcode torch's weights-only unpickler does not read")
        return False, None

    def global_(self) -> _Global:
        lines = []
        for _ in range(2):
            line = self.f.readline(_LINE)
            self.pos += len(line)
            if not line.endswith(b"\n"):
                raise _Bad("a GLOBAL without its end of line")
            lines.append(line[:-1].decode("utf-8"))
        name = self.rules.rename(lines[0], lines[1])
        if not self.rules.allows(name):
            raise _Stop(name)
        return _Global(name)

    def tuple_(self, items: list[Any]) -> tuple[Any, ...]:
        made = tuple(items)
        if any(self.holds(v) for v in made):
            self.held[id(made)] = made  # (kept: its id is never another's)
        return made

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is or holds a tensor (as far as the scan follows it)."""
        return (isinstance(value, _Thing) and value.tensors) or id(value) in self.held

    def put(self, items: list[Any], kind: str) -> None:
        if not self.stack or not _is(self.stack[-1], kind):
            raise _Bad(f"no {kind} to add to")
        self.stack[-1].nbytes += len(items)
        self.stack[-1].tensors |= any(self.holds(v) for v in items)

    def add(self, items: list[Any]) -> None:
        self.put(items, "list")
        kept = self.stack[-1].items
        if kept is not None:
            kept.extend(items)

    def refusal(self, func: Any, what: str = "") -> str:
        name = func.name if isinstance(func, _Global) else f"a {type(func).__name__} value"
        why = _WHY.get(name, _NEEDLESS)
        how = f" ({what})" if what else ""
        return (
            f"{quoted_name(self.where)}: the pickle calls {name}{how}, which tensorfile "
            f"refuses before torch.load runs it: {why}"
        )

    def call(self, func: Any, args: Any, nested: bool = False) -> _Thing:
        """What calling ``func`` with ``args`` makes, refusing a call that is not one of
        :data:`_CALLS` with the arguments it allows."""
        if not isinstance(args, tuple):
            raise _Bad("a call whose arguments are not a tuple")
        name = func.name if isinstance(func, _Global) else ""
        if name == "torch._tensor._rebuild_from_type_v2" and not nested and len(args) == 4:
            inner, kind, inner_args, _state = args
            if kind in {_Global(t) for t in _TYPES}:
                return self.call(inner, inner_args, nested=True)
        check, made = _CALLS.get(name, (None, ""))
        if check is None or not check(args):
            shown = ", ".join(_show(a) for a in args)
            raise UnsupportedError(self.refusal(func, f"with ({shown})" if check else ""))
        if name in _SETS:
            self.fits(name, args)
        copied = sum(_length(a) for a in args) if name in _COPIES else 0
        if copied > self.budget:  # (torch holds each copy: one memoized text, R calls)
            raise FormatError(
                f"{quoted_name(self.where)}: the pickle's calls of {name} copy {copied:,} "
                f"more items, past the {self.budget:,} left of what its size allows",
                format="pytorch",
            )
        self.budget -= copied
        return _Thing(made, nbytes=len(args[0]) if made == "bytes" else 0)

    def fits(self, name: str, args: tuple[Any, ...]) -> None:
        """Refuse a rebuild whose offset, size and stride reach past its storage: torch's
        ``set_`` grows an old-format storage to fit (an allocation of what the pickle only
        claims, never filled from the file)."""
        storage, itemsize = args[0], args[0].itemsize
        if name == "torch._utils._rebuild_tensor_v3":  # (its own dtype's elements)
            itemsize = _pb.dtype_size(_name(args[6])) if len(args) > 6 else 0
        offset, size, stride = (args[1:4] + (None,) * 3)[:3]
        known = itemsize and _ints((offset,)) and _ints(size) and _ints(stride)
        if not known or len(size) != len(stride):
            shown = ", ".join(_show(a) for a in args)
            what = f"with ({shown}): a layout the scan cannot check against its storage"
            raise UnsupportedError(self.refusal(_Global(name), what))
        reach = 1 + sum(st * (n - 1) for n, st in zip(size, stride, strict=True))
        need = 0 if 0 in size else (offset + reach) * itemsize
        numel = 0 if 0 in size else 1
        for n in size:  # (stopping past the storage: a product of huge numbers is slow)
            numel = numel * n if numel * itemsize <= storage.nbytes else numel
        many = numel and (offset + numel) * itemsize > storage.nbytes  # (stride 0, overlaps)
        if many or need > storage.nbytes:
            what = (
                f"reaches {need:,} bytes into a storage of {storage.nbytes:,}, which torch "
                "would grow to fit"
                if need > storage.nbytes
                else f"has more elements than its storage of {storage.nbytes:,} bytes holds "
                "from that offset (it repeats elements)"
            )
            raise FormatError(
                f"{quoted_name(self.where)}: a tensor of the pickle (offset {offset}, size "
                f"{_show(size)}, stride {_show(stride)}) {what}: the file is not what it says",
                format="pytorch",
            )

    def storage(self, pid: Any) -> _Thing:
        if not isinstance(pid, tuple) or len(pid) not in (5, 6) or pid[0] != "storage":
            raise _Bad(f"a persistent id that is no storage's: {_show(pid)}")
        kind, key, numel = pid[1], pid[2], pid[4]
        view = pid[5] if len(pid) == 6 else None  # (an old-format view: key, offset, numel)
        if not isinstance(key, str) or type(numel) is not int or numel < 0:
            raise _Bad(f"a storage's persistent id torch cannot load: {_show(pid)}")
        if view is not None and not (isinstance(view, tuple) and len(view) == 3):
            raise _Bad(f"a storage view torch cannot load: {_show(pid)}")
        size = _pb.itemsize(_name(kind))
        self.pids.append((key, numel * size))
        nbytes, first = self.storages.setdefault(key, (numel * size, size))  # (the first's)
        if view is not None:  # (a slice of the storage: the first of its key)
            start, stop = (v * size if _ints((v,)) else 0 for v in view[1:])
            part = max(0, min(nbytes, start + stop) - start)
            nbytes = self.storages.setdefault(("view", view[0]), (part, size))[0]
        return _Thing("storage", max(size, first), nbytes)


def _length(value: Any) -> int:
    """The items of a text, bytes, tuple or container (a container's as added)."""
    if isinstance(value, str | bytes | tuple):
        return len(value)
    return value.nbytes if _is(value, "bytes", *_CONTAINERS) else 0


def _name(value: Any) -> str:
    return value.name if isinstance(value, _Global) else ""


def _show(value: Any, depth: int = 0) -> str:
    if isinstance(value, _Global):
        return value.name
    if isinstance(value, _Thing):
        return f"a {value.kind}"
    if isinstance(value, tuple):
        if depth >= _SHOWN_DEPTH and value:
            return "(...)"
        shown = ", ".join(_show(v, depth + 1) for v in value[:6])
        return f"({shown}{', ...' if len(value) > 6 else ''})"
    text = repr(value) if isinstance(value, _SIMPLE) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


_FIXED: dict[str, Callable[[], Any]] = {
    "N": lambda: None,
    "\x88": lambda: True,
    "\x89": lambda: False,
    ")": tuple,
    "]": lambda: _Thing("list"),
    "}": lambda: _Thing("dict"),
    "\x8f": lambda: _Thing("set"),
}
_NUMBERS = {"J": (4, "<i"), "K": (1, "<B"), "M": (2, "<H"), "G": (8, ">d")}


def _fail(where: str, exc: _Bad, offset: int) -> FormatError:
    return FormatError(
        f"{quoted_name(where)}: not a pickle torch.load(weights_only=True) reads: {exc}",
        offset=offset,
        format="pytorch",
    )


def _legacy(source: Source, rules: Rules) -> None:
    with io.BufferedReader(SourceFile(source), 1 << 20) as f:  # (Machine.read bounds n)
        try:
            pids, end = _legacy_pids(f, rules, source.name, source.size, source.size)
        except _Bad as exc:
            raise _fail(source.name, exc, f.tell()) from None
    total = sum(_pb.claimed(pids).values())
    held = max(0, source.size - end)
    if total > held:
        raise FormatError(
            f"{quoted_name(source.name)}: the pickle's storages claim {total:,} bytes, but "
            f"the file holds {held:,} after the pickle (an old-format PyTorch file keeps their "
            "bytes there): the file is not what it says",
            offset=end,
            format="pytorch",
        )


def _legacy_pids(
    f: Any, rules: Rules, where: str, budget: int, size: int
) -> tuple[list[tuple[str, int]], int]:
    """The storage claims of an old-format pickle's object and where it ends; up to a
    global torch refuses (torch runs what comes before it), and where that is."""
    found: list[tuple[str, int]] = []
    end = 0
    for index in range(_HEAD + 2):
        machine = _Machine(f, rules, where, budget, size, keep=index > _HEAD)
        try:
            value = machine.run()
        except _Stop:
            return (machine.pids if index == _HEAD else found), (end or f.tell())
        if index == 0 and value != _MAGIC:
            raise _Bad("its first pickle is not torch's magic number")
        if machine.pids and index != _HEAD:
            raise _Bad("a persistent id outside the object's pickle")
        if index == _HEAD:
            found, end = machine.pids, f.tell()
    keys = value.items if _is(value, "list") else value if isinstance(value, tuple) else None
    if keys is None:
        raise _Bad("its list of storage keys is not a list")
    again = _pb.empty_again(found)
    if again is not None:  # (torch's loader makes it anew, never filled from the file)
        raise FormatError(
            f"{quoted_name(where)}: empty storage {again!r} is named again (torch's "
            "old-format loader gives each later one new memory never read from the file)",
            format="pytorch",
        )
    unread = sorted({k for k, _ in found} - set(keys))  # (torch fills the storages listed)
    if unread:
        raise FormatError(
            f"{quoted_name(where)}: storage {unread[0]!r} is never read from the file (the "
            "pickle's list of storage keys leaves it out: its bytes would be whatever "
            "memory held before): the file is not what it says",
            format="pytorch",
        )
    return found, end


def claims(f: Any, rules: Rules = STRICT) -> tuple[int, int]:
    """``(bytes the storages claim, offset where the object's pickle ends)`` of the
    old-format pickle in file object ``f`` (each storage key counted once, at its class's
    element size); a :class:`FormatError` for a pickle the scan cannot follow.

    Example:
        >>> import io, torch
        >>> buf = io.BytesIO()
        >>> torch.save([torch.ones(3, dtype=torch.float64)], buf,
        ...            _use_new_zipfile_serialization=False)
        >>> claims(io.BytesIO(buf.getvalue()))[0]
        24
    """
    try:
        start = f.tell()
        size, _ = f.seek(0, io.SEEK_END), f.seek(start)
        pids, end = _legacy_pids(f, rules, str(getattr(f, "name", "<pickle>")), 1 << 62, size)
    except _Bad as exc:
        raise _fail(getattr(f, "name", "<pickle>"), exc, f.tell()) from None
    return sum(_pb.claimed(pids).values()), end


def _zipped(source: Source, rules: Rules) -> None:
    where = source.name
    pickle, sizes = zip_records(source)  # (torch's own reader: the data.pkl torch runs)
    machine = _Machine(io.BytesIO(pickle), rules, where, source.size, len(pickle))
    try:
        machine.run()
    except _Bad as exc:
        raise _fail(f"{where}: data.pkl", exc, machine.pos) from None
    except _Stop:
        pass  # (torch stops there, having loaded the storages before it)
    for key, nbytes in _pb.claimed(machine.pids).items():
        held = sizes.get(fold(f"data/{key}"), 0)
        if nbytes > held:
            raise FormatError(
                f"{quoted_name(where)}: storage {key!r} claims {nbytes:,} bytes, but its "
                f"record holds {held:,}: the file is not what it says",
                format="pytorch",
            )


def scan(source: Source, rules: Rules = STRICT) -> None:
    """Refuse the PyTorch pickle in ``source`` (zip or old format) when torch would
    allocate more than the file holds loading it, or when it is one the scan cannot follow
    (see the module docstring); return None when torch may load it."""
    if source.read(0, len(NPZ.magic)) == NPZ.magic:
        _zipped(source, rules)
    else:
        _legacy(source, rules)
