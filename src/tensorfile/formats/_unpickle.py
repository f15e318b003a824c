"""tensorfile's own reader of PyTorch pickles: the weights-only subset, read opcode by opcode,
never handed to ``torch.load`` or any other unpickler.

``torch.load(weights_only=True)`` runs what a pickle asks of a list of allowed functions,
and each of them can be asked for more than the file holds (a storage of any size, a
stride-0 view unbound into a billion tensors, a text encoded a million times). Guarding it
meant a second reader that had to agree with torch's on everything; this module is instead
the only reader. It knows the opcodes ``torch.save`` writes (protocol 2, and those
torch's weights-only unpickler reads), builds containers, numbers and text itself, and
makes tensors as :class:`~tensorfile.formats._pickle_values.Stored` records: a storage (the
bytes of a zip record, ``data/<key>``, or of an old-format file's storage, after its
pickles), an offset, a size and a stride, checked against the storage's bytes as they are
made. Nothing is imported, called or allocated because a pickle says so:

* a call is one of those tensor checkpoints use (:data:`CALLS`: the tensor and parameter
  rebuilds, ``OrderedDict()``, ``Counter``, ``set``, ``complex``, ``bytearray`` and
  ``_codecs.encode`` of text, ``torch.Size``, ``torch.device``), with the arguments they
  take; any other global is an :class:`~tensorfile.errors.UnsupportedError` naming it;
* dicts are kept as their pairs (:class:`~tensorfile.formats._pickle_values.Pairs`) and
  sets as their items: no key of a file is ever hashed, so no crafted keys can make
  building one quadratic;
* each call counts what it makes (a tensor 32 items, a copy its length) against twice the
  file's bytes and 1 Mi, empty containers against one for each 4 bytes, and at most 65,536
  marks are open at once (a :class:`~tensorfile.errors.FormatError` past any of them): a
  call repeated through the memo at 5 bytes a call cannot make hundreds of times the file;
* a tensor has at most 64 dimensions, non-negative sizes, strides and offset, lies within
  its storage and holds each of its elements once (a stride-0 view claiming a billion
  elements of one stored value is refused, naming the tensor's layout);
* a storage's bytes are the file's: a zip's record (found by tensorfile's own zip reader,
  which takes a zip only as torch.save writes it: :func:`._pickle_bytes.zip_records`),
  at least as long as the storage claims; an old-format file's after its five pickles,
  each behind its count of elements, which must be the one the pickle claims; a storage
  never given bytes by the file is refused.

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.arange(4.0)}, buf)
    >>> found = read(MemorySource(buf.getvalue(), "m.pt"))
    >>> [(name, t.array().tolist()) for name, t in found.items()]
    [('w', [0.0, 1.0, 2.0, 3.0])]
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import Any

from ..core.errors import FormatError, UnsupportedError, quoted_name
from ..core.source import Source
from ..sources import LocalSource
from . import NPZ
from ._pickle_bytes import fold, zip_records
from ._pickle_calls import (
    CALLS,
    COSTS,
    TYPES,
    Bad,
    Global,
    Pairs,
    PickledSet,
    Storage,
    Stored,
    TorchName,
    index,
    plain_state,
    rename,
    show,
    storage_dtype,
)

__all__ = ["read"]

_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER, the first pickle
_PROTOCOL = 1001  # torch.serialization.PROTOCOL_VERSION, the second
_LINE = 1 << 10  # the longest GLOBAL line read (module or name)
_MARKS = 1 << 16  # the most marks open at once (the depth of nested MARKs)
_CONTAINERS = "]}\x8f"  # EMPTY_LIST, EMPTY_DICT, EMPTY_SET: each a new container

TORCH_NAMES = frozenset(f"torch.{n}" for n in (
    "bfloat16", "bool", "complex128", "complex32", "complex64", "float16", "float32",
    "float64", "float4_e2m1fn_x2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "qint8", "qint32",
    "quint8", "quint2x4", "quint4x2", "per_tensor_affine", "per_tensor_symmetric",
    "per_channel_affine", "per_channel_symmetric", "per_channel_affine_float_qparams", "int1",
    "int2", "int3", "int4", "int5", "int6", "int7", "uint1", "uint2", "uint3", "uint4",
    "uint5", "uint6", "uint7",
))  # fmt: skip
"""The torch globals that are data (dtypes, quantization schemes) torch.load takes, by
their own names (not aliases such as ``torch.float``)."""


_OTHER_STORAGES = frozenset(
    f"torch.{stem}Storage" for stem in ("ComplexDouble", "QInt8", "QUInt8", "QInt32", "QUInt4x2",
                                        "QUInt2x4")
)  # fmt: skip
"""Storage classes torch.load takes that tensorfile does not read (refused, naming why)."""

WHY = {
    "torch._utils._rebuild_sparse_tensor": "a sparse tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_nested_tensor": "a nested tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_qtensor": "a quantized tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": "it converts a tensor while loading",
    "torch._utils._rebuild_device_tensor_from_numpy": "it converts an array while loading",
    "torch._utils._rebuild_wrapper_subclass": "a tensor subclass without storage",
    "torch._utils._rebuild_meta_tensor_no_storage": "a tensor on the meta device has no data",
}


class _Machine:
    """One pickle's stack, marks and memo, read from ``data`` (bytes of the whole file, or
    of a zip's ``data.pkl``) from ``pos``."""

    def __init__(self, data: Any, pos: int, where: str, reader: _Reader) -> None:
        self.data, self.pos, self.end, self.where = data, pos, len(data), where
        self.stack: list[Any] = []
        self.marks: list[int] = []  # (where each open MARK stands in the stack)
        self.memo: dict[int, Any] = {}
        self.reader = reader

    def read(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise Bad(f"{n:,} bytes asked, {max(0, self.end - self.pos):,} left")
        found = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return found

    def line(self) -> str:
        stop = min(self.end, self.pos + _LINE)
        found = bytes(self.data[self.pos : stop])
        cut = found.find(b"\n")
        if cut < 0:
            raise Bad("a GLOBAL without its end of line (or longer than 1 KiB)")
        self.pos += cut + 1
        try:
            return found[:cut].decode("ascii")
        except UnicodeDecodeError:
            raise Bad("a GLOBAL whose name is not ASCII") from None

    def above(self, n: int) -> None:
        """Refuse unless ``n`` items lie above the last open mark."""
        if len(self.stack) - (self.marks[-1] if self.marks else 0) < n:
            raise Bad("stack underflow")

    def pop(self) -> Any:
        self.above(1)
        return self.stack.pop()

    def top(self) -> Any:
        self.above(1)
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Bad("no mark")
        at = self.marks.pop()
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def run(self) -> Any:
        """The pickle's value, read up to its ``STOP``."""
        while True:
            at = self.pos
            key = self.read(1)[0]
            try:
                done, value = self.step(key)
            except Bad as exc:
                raise Bad(f"{exc} (opcode 0x{key:02x} at offset {at:,})") from None
            except UnicodeDecodeError:
                raise Bad(f"text that is not UTF-8 (opcode 0x{key:02x} at offset {at:,})") from None
            if done:
                return value

    def step(self, key: int) -> tuple[bool, Any]:
        op, push = chr(key), self.stack.append
        if op in _FIXED:
            if op in _CONTAINERS:
                self.reader.made(op)
            push(_FIXED[op]())
        elif op in _NUMBERS:
            size, fmt = _NUMBERS[op]
            push(struct.unpack(fmt, self.read(size))[0])
        elif op == "X":  # BINUNICODE
            push(str(self.read(struct.unpack("<I", self.read(4))[0]), "utf-8", "surrogatepass"))
        elif op == "U":  # SHORT_BINSTRING, read as UTF-8 text (as torch does)
            push(self.read(self.read(1)[0]).decode("utf-8"))
        elif op == "\x8a":  # LONG1
            push(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))
        elif op == "c":  # GLOBAL
            module, name = self.line(), self.line()
            push(self.reader.global_(rename(module, name)))
        elif op == "(":  # MARK
            if len(self.marks) >= _MARKS:
                raise Bad(f"more than {_MARKS:,} marks open at once")
            self.marks.append(len(self.stack))
        elif op == "t":  # TUPLE
            self.reader.made(op)
            push(tuple(self.pop_mark()))
        elif op in "\x85\x86\x87":  # TUPLE1, TUPLE2, TUPLE3
            n = key - 0x84
            self.reader.made(op)
            self.above(n)
            self.stack[-n:] = [tuple(self.stack[-n:])]
        elif op in "hj":  # BINGET, LONG_BINGET
            index = self.read(1)[0] if op == "h" else struct.unpack("<I", self.read(4))[0]
            if index not in self.memo:
                raise Bad(f"memo entry {index} was never stored")
            push(self.memo[index])
        elif op in "qr":  # BINPUT, LONG_BINPUT
            index = self.read(1)[0] if op == "q" else struct.unpack("<I", self.read(4))[0]
            self.memo[index] = self.top()
        elif op == "R":  # REDUCE
            args = self.pop()
            self.stack[-1:] = [self.call(self.top(), args)]
        elif op == "\x81":  # NEWOBJ: only nn.Parameter(tensor, requires_grad) is made
            args, cls = self.pop(), self.pop()
            if cls != Global("torch.nn.parameter.Parameter") or not (
                isinstance(args, tuple)
                and len(args) in (1, 2)
                and isinstance(args[0], Stored)
                and all(isinstance(a, bool) for a in args[1:])
            ):
                raise UnsupportedError(self.refusal(cls, "a new object of it"))
            self.charge(32, "torch.nn.parameter.Parameter")  # (a tensor, as a rebuild's)
            push(args[0].copy())  # (a Parameter is a new object, as torch makes it)
        elif op == "b":  # BUILD
            self.build(self.pop(), self.top())
        elif op == "a":  # APPEND
            item = self.pop()
            self.items_of(list).append(item)
        elif op == "e":  # APPENDS
            items = self.pop_mark()
            self.items_of(list).extend(items)
        elif op == "s":  # SETITEM
            value, name = self.pop(), self.pop()
            self.items_of(Pairs).append((name, value))
        elif op == "u":  # SETITEMS
            items = self.pop_mark()
            if len(items) % 2:
                raise Bad("an odd number of items to set")
            self.items_of(Pairs).extend(zip(items[::2], items[1::2], strict=True))
        elif op == "Q":  # BINPERSID
            push(self.reader.storage(self.pop(), self))
        elif op == "\x80":  # PROTO (any: what each opcode is decides)
            self.read(1)
        elif op == ".":  # STOP
            return True, self.pop()
        else:
            raise Bad("an opcode tensorfile's pickle reader does not read")
        return False, None

    def items_of(self, kind: type) -> Any:
        """The items of the container on top of the stack (a list's, a dict's pairs)."""
        target = self.top()
        if kind is list and isinstance(target, list) and not isinstance(target, PickledSet):
            return target
        if kind is Pairs and isinstance(target, Pairs):
            return target.pairs
        raise Bad(f"no {'list' if kind is list else 'dict'} to add to")

    def build(self, state: Any, target: Any) -> None:
        """``BUILD``: a dict's attributes (a state dict's ``_metadata``) are set aside (what
        flattening reads are its items); any other state (a tensor's, which ``torch.save``
        never writes) is refused."""
        if isinstance(target, Pairs) and target.ordered and isinstance(state, Pairs):
            return  # (torch sets an OrderedDict's or Counter's __dict__: a plain dict has none)
        if isinstance(target, Stored):  # (torch would run tensor.set_(*state))
            what = f"with {show(state)} as a tensor's state"
            raise UnsupportedError(self.refusal(Global("torch.Tensor.set_"), what))
        what = f"with {show(state)} as the state of {show(target)}"
        raise UnsupportedError(self.refusal(Global("object.__setstate__"), what))

    def refusal(self, func: Any, what: str = "") -> str:
        name = (
            func.name
            if isinstance(func, Global)
            else str(func)[:200]
            if isinstance(func, TorchName)
            else f"a {type(func).__name__} value"
        )
        why = WHY.get(name, "a tensor checkpoint does not need it")
        how = f" ({what})" if what else ""
        return (
            f"{quoted_name(self.where)}: the pickle calls {name}{how}, which tensorfile's "
            f"pickle reader refuses: {why} (it never runs code from a pickle)"
        )

    def charge(self, n: int, name: str) -> None:
        """Count ``n`` items a copying call makes against the file's budget."""
        if n > self.reader.budget:
            raise FormatError(
                f"{quoted_name(self.where)}: the pickle's calls of {name} copy {n:,} more "
                f"items, past the {self.reader.budget:,} left of what its size allows (2 for "
                "each of its bytes and 1 Mi)",
                format="pytorch",
            )
        self.reader.budget -= n

    def call(self, func: Any, args: Any, nested: bool = False) -> Any:
        """What calling ``func`` with ``args`` makes (see :data:`CALLS`)."""
        if not isinstance(args, tuple):
            raise Bad("a call whose arguments are not a tuple")
        name = func.name if isinstance(func, Global) else ""
        if name == "torch._tensor._rebuild_from_type_v2" and not nested and len(args) == 4:
            inner, kind, inner_args, state = args
            if kind in TYPES and plain_state(state):  # (added attributes: set aside)
                made = self.call(inner, inner_args, nested=True)
                if isinstance(made, Stored):  # (torch makes it a tensor of that type)
                    return made
        made = CALLS.get(name)
        if made is not None:  # (each call makes something: a tensor's catalog entry most)
            self.charge(COSTS.get(name, 1), name)
        found = made(self, args) if made is not None else None
        if found is None:
            shown = ", ".join(show(a) for a in args)
            raise UnsupportedError(self.refusal(func, f"with ({shown})" if made else ""))
        return found


class _Reader:
    """What one file's pickles share: its storages by key, where their bytes are."""

    def __init__(self, where: str, budget: int, legacy: bool) -> None:
        self.where, self.legacy = where, legacy
        self.budget = budget  # (items copying calls may still make)
        self.containers = budget // 8  # (empty containers the pickle may still make)
        self.storages: dict[str, Storage] = {}
        self.views: dict[str, Storage] = {}

    def made(self, op: str) -> None:
        """Count one new container: each takes ~100 bytes for the one byte that asks for it,
        so a file may make one for each 4 of its bytes (an honest one makes far fewer)."""
        self.containers -= 1
        if self.containers < 0:
            raise FormatError(
                f"{quoted_name(self.where)}: the pickle makes more containers than its size "
                "allows (one for each 4 of its bytes and 128 Ki)",
                format="pytorch",
            )

    def global_(self, name: str) -> Any:
        if name in CALLS or name in WHY or name == "torch._tensor._rebuild_from_type_v2":
            return Global(name)
        if name in ("torch.Tensor", "torch.nn.parameter.Parameter"):
            return Global(name)
        if storage_dtype(name) is not None or name in _OTHER_STORAGES:
            return Global(name)  # (a storage class: one it does not read is refused by name)
        if name in TORCH_NAMES:
            return TorchName(name)  # (a dtype or a quantization scheme: data, not code)
        raise UnsupportedError(
            f"{quoted_name(self.where)}: the pickle names {name[:200]}, which tensorfile's "
            "pickle reader refuses: it reads tensors, containers and plain values only "
            "(it never imports or runs code from a pickle)"
        )

    def storage(self, pid: Any, m: _Machine) -> Storage:
        """The storage a persistent id names: ``("storage", <class>, key, location, numel)``
        and, in an old-format file, a view of it ``(view key, offset, numel)`` or None."""
        size = 6 if self.legacy else 5
        if not isinstance(pid, tuple) or len(pid) != size or pid[0] != "storage":
            raise Bad(f"a persistent id that is no storage's: {show(pid)}")
        kind, key, location, numel = pid[1:5]
        dtype = storage_dtype(kind.name) if isinstance(kind, Global) else None
        ok = isinstance(key, str) and len(key) <= 256 and isinstance(location, str)
        ok = ok and "\0" not in key  # (torch looks a record up by a C string: cut at NUL)
        if dtype is None or not ok or not index(numel):
            raise UnsupportedError(self.refusal_pid(pid, m))
        nbytes = numel * dtype.itemsize
        if key in self.views:  # (torch's loader keeps roots and views in one table)
            raise FormatError(
                f"{quoted_name(self.where)}: storage {key[:100]!r} has a storage view's key: "
                "the file is not what it says",
                format="pytorch",
            )
        storage = self.storages.setdefault(key, Storage(key, dtype, nbytes))
        if (storage.dtype, storage.nbytes) != (dtype, nbytes):
            raise FormatError(
                f"{quoted_name(self.where)}: storage {key!r} is named twice with different "
                f"types or sizes ({show(pid)}): the file is not what it says",
                format="pytorch",
            )
        view = pid[5] if self.legacy else None
        return storage if view is None else self.view(storage, view)

    def view(self, root: Storage, view: Any) -> Storage:
        """An old-format storage view: ``(key, offset, numel)`` elements of ``root``."""
        if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[0], str)):
            raise Bad(f"a storage view that is no (key, offset, size): {show(view)}")
        key, offset, numel = view
        item = root.dtype.itemsize
        if key in self.storages:  # (torch's loader keeps roots and views in one table)
            raise FormatError(
                f"{quoted_name(self.where)}: storage view {key[:100]!r} has a storage's key: "
                "the file is not what it says",
                format="pytorch",
            )
        if not (index(offset) and index(numel)) or (offset + numel) * item > root.nbytes:
            raise FormatError(
                f"{quoted_name(self.where)}: storage view {key!r} ({show(view)}) reaches "
                f"past its storage {root.key!r} of {root.nbytes:,} bytes: the file is not "
                "what it says",
                format="pytorch",
            )
        made = self.views.setdefault(
            key, Storage(key, root.dtype, numel * item, root, offset * item)
        )
        if (made.base, made.start, made.nbytes) != (root, offset * item, numel * item):
            raise FormatError(
                f"{quoted_name(self.where)}: storage view {key!r} is named twice with "
                "different extents: the file is not what it says",
                format="pytorch",
            )
        return made

    def refusal_pid(self, pid: Any, m: _Machine) -> str:
        named = isinstance(pid[1], Global | TorchName)  # (a class tensorfile reads, or not)
        kind = (pid[1].name if isinstance(pid[1], Global) else str(pid[1])) if named else ""
        stem = kind.rpartition(".")[2]
        kind = kind or show(pid[1])
        why = (
            "a quantized storage; tensorfile reads dense tensors"
            if stem.startswith("Q")
            else "complex128, which no tensor file format holds"
            if stem == "ComplexDoubleStorage"
            else "its key must be a short text without NUL, its location a text and its "
            "size a count"
            if named and storage_dtype(kind) is not None
            else "not a storage class torch.save writes"
            if named
            else "its class must be a storage class"
        )
        return (
            f"{quoted_name(self.where)}: a storage of the pickle ({show(pid)}) is of "
            f"{kind}, which tensorfile's pickle reader does not read: {why}"
        )


_FIXED: dict[str, Callable[[], Any]] = {
    "N": lambda: None,
    "\x88": lambda: True,
    "\x89": lambda: False,
    ")": tuple,
    "]": list,
    "}": Pairs,
    "\x8f": PickledSet,
}
_NUMBERS = {"J": (4, "<i"), "K": (1, "<B"), "M": (2, "<H"), "G": (8, ">d")}


def _fail(where: str, exc: Bad) -> FormatError:
    return FormatError(
        f"{quoted_name(where)}: not a PyTorch pickle tensorfile reads: {exc}", format="pytorch"
    )


def _bytes_of(source: Source) -> Any:
    """The whole file's bytes, without copying them where the system can map them."""
    buffer = source.buffer()
    if buffer is not None:
        return buffer
    if isinstance(source, LocalSource) and source.size:
        with_fd = source.fileno()
        return memoryview(mmap.mmap(with_fd, source.size, access=mmap.ACCESS_READ))
    return memoryview(source.read(0, source.size)) if source.size else memoryview(b"")


def _big_endian(where: str) -> UnsupportedError:
    return UnsupportedError(
        f"{quoted_name(where)}: a big-endian PyTorch file; tensorfile reads little-endian ones"
    )


def _budget(source: Source) -> int:
    """Items a file's calls may make: twice its bytes and 1 Mi (an honest call makes no
    more items than the bytes that ask for it)."""
    return 2 * source.size + (1 << 20)


def _zipped(source: Source, data: Any) -> Any:
    where = source.name
    pickle, records = zip_records(data, where)
    order = records.get("byteorder")
    if order is not None and bytes(data[order[0] : order[0] + order[1]]) != b"little":
        raise _big_endian(where)
    reader = _Reader(where, _budget(source), legacy=False)
    machine = _Machine(pickle, 0, f"{where}: data.pkl", reader)
    try:
        found = machine.run()
    except Bad as exc:
        raise _fail(f"{where}: data.pkl", exc) from None
    for key, storage in reader.storages.items():
        start, held = records.get(fold(f"data/{key}"), (0, -1))
        if storage.nbytes != held:  # (torch reads a record of exactly the storage's size)
            what = "no record" if held < 0 else f"a record of {held:,}"
            raise FormatError(
                f"{quoted_name(where)}: storage {key!r} claims {storage.nbytes:,} bytes, but "
                f"has {what}: the file is not what it says",
                format="pytorch",
            )
        storage.data = data[start : start + storage.nbytes]
    return found


def _is_tar(head: bytes) -> bool:
    """Whether ``head`` (a file's first 512 bytes) is a tar header: torch.load tries a file
    as a (very old) tar checkpoint before reading it as pickles, so a file that is both is
    read otherwise by torch."""
    if len(head) < 512:
        return False
    try:
        stored = int(head[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    unsigned = sum(head[:148]) + 8 * 32 + sum(head[156:512])
    signed = unsigned - 2 * sum(b for b in head[:148] + head[156:512] if b > 127)
    return stored in (unsigned, signed)


def _legacy(source: Source, data: Any) -> Any:
    where = source.name
    if _is_tar(bytes(data[:512])):
        raise FormatError(
            f"{quoted_name(where)}: the file is also a tar archive, which torch.load would "
            "read instead of its pickles: the file is not what it says",
            format="pytorch",
        )
    reader = _Reader(where, _budget(source), legacy=True)
    pos, values = 0, []
    try:
        for index in range(5):
            machine = _Machine(data, pos, where, reader)
            values.append(machine.run())
            pos = machine.pos
            if index == 0 and values[0] != _MAGIC:
                raise Bad("its first pickle is not torch's magic number")
            if index == 1 and values[1] != _PROTOCOL:
                raise Bad(f"its protocol version is not {_PROTOCOL}")
            if index == 2 and isinstance(values[2], Pairs):
                if ("little_endian", False) in values[2].pairs:
                    raise _big_endian(where)
            if index == 2 and (reader.storages or reader.views):
                raise Bad("a storage named outside the object's pickle")
    except Bad as exc:
        raise _fail(where, exc) from None
    keys = values[4]  # (a list, in the order torch reads the storages: not a set's)
    if type(keys) is not list or not all(isinstance(k, str) for k in keys):
        raise _fail(where, Bad("its list of storage keys is not a list of texts"))
    for key in keys:
        storage = reader.storages.get(key)
        if storage is None or storage.data is not None:
            raise FormatError(
                f"{quoted_name(where)}: the list of storage keys names {key[:100]!r}, which is "
                f"{'listed twice' if storage else 'no storage of the pickle'}: the file is not "
                "what it says",
                format="pytorch",
            )
        head = bytes(data[pos : pos + 8])
        count = struct.unpack("<q", head)[0] if len(head) == 8 else -1
        item = storage.dtype.itemsize
        if count * item != storage.nbytes or pos + 8 + storage.nbytes > len(data):
            raise FormatError(
                f"{quoted_name(where)}: storage {key!r} claims {storage.nbytes:,} bytes, but "
                f"the file holds {max(0, len(data) - pos - 8):,} after offset {pos:,}, behind "
                f"a count of {count:,} elements: the file is not what it says",
                offset=pos,
                format="pytorch",
            )
        storage.data = data[pos + 8 : pos + 8 + storage.nbytes]
        pos += 8 + storage.nbytes
    unread = [k for k, s in reader.storages.items() if s.data is None]
    if unread:
        raise FormatError(
            f"{quoted_name(where)}: storage {unread[0][:100]!r} is never read from the file "
            "(the pickle's list of storage keys leaves it out): the file is not what it says",
            format="pytorch",
        )
    return values[3]


def read(source: Source) -> Any:
    """The object the PyTorch pickle in ``source`` (zip or old format) holds: containers
    (dicts as :class:`~tensorfile.formats._pickle_values.Pairs`), plain values, and tensors
    as :class:`~tensorfile.formats._pickle_values.Stored` records over the file's bytes
    (see the module docstring)."""
    data = _bytes_of(source)
    if bytes(data[: len(NPZ.magic)]) == NPZ.magic:
        return _zipped(source, data)
    return _legacy(source, data)
