"""What an old-format (not zip) PyTorch pickle claims for its storages, read without running
it.

``torch.save(..., _use_new_zipfile_serialization=False)`` writes pickles one after the
other (torch's magic number, its protocol version, a description of the machine, then the
object, then the list of storage keys) and after them each storage's bytes: an 8-byte
count, then the data. The object's pickle names each storage by a persistent id,
``("storage", <torch.FloatStorage>, key, location, numel, view)``, and torch's legacy loader
allocates ``numel`` elements for it the moment it meets the id, before any of its bytes are
read: a 512 KB file claiming 2**31 float64 elements makes ``torch.load`` allocate 16 GiB.

:func:`refuse_overclaimed` reads those ids first, with :func:`pickletools.genops` and a
stack of plain values (nothing is imported, called or built), and refuses a pickle whose
storages claim more bytes than the file holds after its object: every claim is then
backed by bytes really in the file before torch allocates it. A pickle this cannot follow
is left to torch, which refuses it before any storage.

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.zeros(4)}, buf, _use_new_zipfile_serialization=False)
    >>> claims(io.BytesIO(buf.getvalue()))
    (16, 313)
    >>> refuse_overclaimed(MemorySource(buf.getvalue()))  # 16 bytes claimed, and held
"""

from __future__ import annotations

import pickletools
from typing import Any, NamedTuple

from ..core.errors import FormatError, quoted_name
from ..core.source import Source
from ._arrays import BufferedSourceFile

__all__ = ["claims", "refuse_overclaimed"]

_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER, the first pickle
_HEAD = 3  # the pickles before the object's: the magic number, the protocol, the machine

_ITEMSIZE = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8,
    "QInt32Storage": 4,
}
"""Bytes per element of torch's storage classes (any other: 1, the least a claim can be)."""


class _Global(NamedTuple):
    """A class a pickle names (``GLOBAL``), never imported."""

    module: str
    name: str


_ANY = object()  # a value the scan does not follow

_LITERALS = frozenset(
    {
        *("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"),
        *("STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE"),
        *("SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"),
    }
)
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_TUPLE": ()}


class _Scan:
    """The stack and memo of one pickle, as far as plain values go."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[int] = []  # where each mark is in the stack (as pickle keeps them)
        self.memo: dict[int, Any] = {}
        self.ids: list[tuple[Any, ...]] = []

    def pop_mark(self) -> list[Any]:
        """The items above the topmost mark (the mark removed)."""
        at = self.marks.pop()  # (IndexError: no mark, as pickle's own error)
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def take(self, n: int) -> list[Any]:
        """The top ``n`` items, removed: an IndexError when fewer are above the top mark
        (pickle's own "stack underflow")."""
        if len(self.stack) - (self.marks[-1] if self.marks else 0) < n:
            raise IndexError("stack underflow")
        items = self.stack[len(self.stack) - n :]
        del self.stack[len(self.stack) - n :]
        return items

    def top(self) -> Any:
        """The top item, left in place (an IndexError when the frame is empty)."""
        (item,) = self.take(1)
        self.stack.append(item)
        return item

    def op(self, opcode: pickletools.OpcodeInfo, arg: Any) -> None:
        name, stack = opcode.name, self.stack
        if name in _LITERALS:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name == "MARK":
            self.marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            self.memo[arg] = self.top()
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.top()
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(self.memo.get(arg, _ANY))
        elif name == "GLOBAL":
            module, _, attr = str(arg).partition(" ")
            stack.append(_Global(module, attr))
        elif name == "STACK_GLOBAL":
            module, attr = self.take(2)
            stack.append(_Global(str(module), str(attr)))
        elif name == "TUPLE":
            stack.append(tuple(self.pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            stack.append(tuple(self.take(int(name[-1]))))
        elif name == "STOP":
            pass  # (the pickle's value stays on the stack, to be looked at)
        elif name == "BINPERSID":
            (pid,) = self.take(1)
            if isinstance(pid, tuple):
                self.ids.append(pid)
            stack.append(_ANY)
        else:  # any other opcode: its effect on the stack, by pickletools' description
            before = opcode.stack_before
            if pickletools.markobject in before:
                self.pop_mark()
                before = before[: before.index(pickletools.markobject)]
            elif name == "POP" and self.marks and self.marks[-1] == len(stack):
                self.pop_mark()  # (POP of an empty frame pops its mark)
                before = []
            self.take(len(before))
            stack.extend(_ANY for _ in opcode.stack_after)


def _storage_bytes(pid: tuple[Any, ...]) -> tuple[Any, int] | None:
    """``(key, bytes claimed)`` of a storage's persistent id, or None for another id."""
    if len(pid) != 6 or pid[0] not in ("storage", b"storage"):
        return None
    kind, key, numel = pid[1], pid[2], pid[4]
    if not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
        return None  # not a count torch could allocate from
    size = _ITEMSIZE.get(kind.name, 1) if isinstance(kind, _Global) else 1
    return key, numel * size


def claims(f: Any) -> tuple[int, int] | None:
    """``(bytes the storages claim, offset where the object's pickle ends)`` of the
    old-format pickle in file object ``f`` (each storage counted once), or None when it is
    not one this can follow (torch then refuses it before any storage); an ``EOFError``
    when a length in it (a string's) runs past the end of the file.

    Example:
        >>> import io, torch
        >>> buf = io.BytesIO()
        >>> torch.save([torch.ones(3, dtype=torch.float64)], buf,
        ...            _use_new_zipfile_serialization=False)
        >>> claims(io.BytesIO(buf.getvalue()))[0]
        24
    """
    try:
        for index in range(_HEAD + 1):
            scan = _Scan()
            for opcode, arg, _pos in pickletools.genops(f):
                scan.op(opcode, arg)
            if index == 0 and scan.stack[-1:] != [_MAGIC]:
                return None  # torch: "Invalid magic number; corrupt file?"
    except ValueError as exc:
        if "remain" in str(exc):  # pickletools: "expected N bytes in ..., but only M remain"
            raise EOFError(str(exc)) from None
        return None  # not a pickle this follows: torch's unpickler refuses it
    except (IndexError, TypeError, EOFError, UnicodeDecodeError, KeyError):
        return None
    owned: dict[Any, int] = {}
    for n, pid in enumerate(scan.ids):
        found = _storage_bytes(pid)
        if found is not None:  # a key not followed counts on its own (never less)
            key = found[0] if isinstance(found[0], str | bytes | int) else (_ANY, n)
            owned.setdefault(key, found[1])  # (torch allocates a key's storage once)
    return sum(owned.values()), int(f.tell())


def refuse_overclaimed(source: Source) -> None:
    """Raise a :class:`~tensorfile.errors.FormatError` when the old-format pickle in
    ``source`` claims more bytes for its storages than the file holds after its object's
    pickle (where their bytes are), or a length that runs past the end of the file, before
    torch allocates what it claims."""
    with BufferedSourceFile(source) as f:  # (a string's claimed length is no allocation)
        try:
            found = claims(f)
        except EOFError as exc:
            raise FormatError(
                f"{quoted_name(source.name)}: the pickle claims more than the file holds: {exc}",
                offset=f.tell(),
                format="pytorch",
            ) from None
    if found is None:
        return
    claimed, end = found
    held = max(0, source.size - end)
    if claimed > held:
        raise FormatError(
            f"{quoted_name(source.name)}: the pickle's storages claim {claimed:,} bytes, but "
            f"the file holds {held:,} after the pickle (an old-format PyTorch file keeps their "
            "bytes there): the file is not what it says",
            offset=end,
            format="pytorch",
        )
