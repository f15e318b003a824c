"""What a loaded PyTorch pickle holds, flattened into tensors and plain values by dotted name
(:func:`walk`), and its plain values rendered as JSON-like values (:class:`Plain`), in time
and memory that grow with the file, not with what its memo references make of it.

A pickle's memo lets a few bytes refer again to anything already built: one list at every
level of a nest, a key of 64 KiB under itself a thousand times, one big list in every entry
of the top dict. So each file gets budgets, one of each, counted as the pickle is read:

* entries read again through a container referred to more than once (:data:`MIN_ENTRIES`,
  and one more for each 16 bytes of the file): past it the walk is refused, and a plain
  value's later repeats become a short text naming where it was first rendered;
* characters of flattened names (:data:`MIN_TEXT`, and :data:`TEXT_PER_BYTE` more for each
  byte of the file), and as many of plain values' text (texts, keys, the text of other
  values, the texts that stand for repeats): past either, a
  :class:`~tensorfile.errors.FormatError` naming the limit;
* a name quoted in a text (a repeat, a note) is cut (:func:`~tensorfile.core.values.brief`),
  and each container is looked into once to learn whether it leads to a tensor, however
  often it is referred to.

Example:
    >>> plain_value([["a"], 2]), describe({"lr": 0.1, "betas": (0.9, 0.999)})
    ([['a'], 2], 'dict of 2 values')
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..core.errors import FormatError, UnsupportedError, quoted_name
from ..core.values import brief, sized
from ._arrays import file_stem
from ._pickle_calls import Global, Pairs, PickledSet, Size, Storage, Stored, python_key

__all__ = ["MIN_ENTRIES", "MIN_TEXT", "MIN_VALUE_TEXT", "TEXT_PER_BYTE", "Checkpoint"]
__all__ += ["Plain", "describe"]
__all__ += ["plain_value", "walk"]


_MIN_NAMED = 1 << 14
"""Entries (tensors and values) any pickle may flatten to; past it, one for each 32 bytes
of the file (an honest tensor takes more: a name, a rebuild and its storage)."""

MIN_ENTRIES = 1 << 17
"""Entries any pickle may flatten to twice, through containers it refers to more than once
(131,072); past it, one for each 16 bytes of the file. The same count bounds what a file's
plain values render twice of a container referred to twice."""

MIN_TEXT = 32 << 20
"""Characters of flattened names any pickle may have (33,554,432); past it,
:data:`TEXT_PER_BYTE` for each byte of the file."""

MIN_VALUE_TEXT = 4 << 20
"""Characters of its plain values' text (as JSON metadata writes it: a control character is
6) any pickle may have (4,194,304); past it, :data:`TEXT_PER_BYTE` for each byte of the
file."""

_ESCAPED = dict.fromkeys([*range(32), ord('"'), ord("\\")])
"""What JSON escapes (control characters, quotes, backslashes): removed to count them."""


def _controls(text: str) -> int:
    """The control characters of ``text`` (JSON writes each as 6 characters)."""
    return len(text) - len(text.translate(dict.fromkeys(range(32))))


TEXT_PER_BYTE = 16
"""Characters of names (and of plain values' text) a pickle may have for each of its bytes
beyond :data:`MIN_TEXT` (a state dict's names take fewer bytes than the file's)."""

_DEPTH = 64
"""How deep plain values are followed into nested containers (deeper: a text saying so)."""

_CUT = 200
"""Characters a plain value's name keeps (it is only ever shown in a note or a repeat)."""

_NOTES = 4
"""Notes kept for one entry (three are shown, a fourth says there are more)."""

_INT_BITS = 14_000
"""The largest integer kept as a number (about 4,200 digits: Python writes no more);
larger ones are the text of their size."""

_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
"""Values that are leaves of a checkpoint (torch.Size, dtypes and devices are too)."""

_PLAIN = frozenset({type(None), bool, int, float, str, bytes})
"""The commonest values that are no container (the check that skips them is the fast one)."""

_SMALL = frozenset({type(None), bool, float})
"""Values that are their own plain value (and integers of up to 64 bits)."""

_BIG = 1 << 64

_LEFT = -2
"""The parent of a stack entry that marks the end of a container's walk."""


class Checkpoint(NamedTuple):
    """What a pickle holds, flattened: its tensors and its other entries (plain values:
    numbers, text, lists, dicts of them) by dotted name, in the pickle's order."""

    tensors: dict[str, Any]
    values: dict[str, Any]


class _Budget:
    """Characters of ``what`` a pickle of ``size`` bytes may make (None: no limit)."""

    def __init__(self, where: str, size: int | None, what: str, least: int = MIN_TEXT) -> None:
        self.least = least
        self.limit = sys.maxsize if size is None else least + TEXT_PER_BYTE * size
        self.left = self.limit
        self.where, self.size, self.what = where, size, what

    def check(self, n: int) -> None:
        """Refuse now (before they are made) ``n`` characters more than the budget has."""
        if n > self.left:
            self.spend(n)

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise FormatError(
                f"{quoted_name(self.where)}: the pickle's {self.what} take more than "
                f"{self.limit:,} characters (tensorfile's limit: {TEXT_PER_BYTE} for each of "
                f"its {self.size:,} bytes and {self.least:,} more): its containers repeat "
                "long keys or values (a dict nested under one long key again and again, a "
                "long text or list referred to over and over)",
                format="pytorch",
            )


def _key_text(key: Any) -> str:
    """A key's text in a name: a text as it is, a number as ``str`` has it, another key (a
    tuple, bytes, a storage) as its :func:`~tensorfile.core.values.brief` repr, bounded in
    length and in the time it takes (a long bytes key or a storage's elements are never
    all written out, however many dicts share the key)."""
    if isinstance(key, str):
        return str(key)
    if type(key) in _SMALL or (type(key) is int and -_BIG < key < _BIG):
        return str(key)
    if isinstance(key, Global):
        return key.name
    if isinstance(key, Storage):
        return _storage_text(key)
    if isinstance(key, Stored):
        return f"<tensor of {key.nbytes:,} bytes>"
    return brief(key)


def _storage_text(storage: Storage) -> str:
    return f"<storage of {storage.nbytes:,} bytes>"


def _is_container(value: Any) -> bool:
    return isinstance(value, Mapping | Pairs | list | tuple) and not isinstance(value, Size)


def _members(value: Any) -> Any:
    return value.values() if isinstance(value, Mapping | Pairs) else value


def _children(value: Any, name: str, names: _Budget) -> list[tuple[str, Any]]:
    """The named children of a container that holds containers: a dict's by the text of
    their keys (``0`` for the integer 0), a list's and a tuple's by their index; their names
    are counted against ``names`` before they are made."""
    names.spend(len(value) * (len(name) + 1))
    items = _items(value, names.where) if isinstance(value, Mapping | Pairs) else enumerate(value)
    out: list[tuple[str, Any]] = []
    for key, child in items:
        text = _key_text(key)
        names.spend(len(text))
        out.append((f"{name}.{text}" if name else text, child))
    return out


def _items(value: Mapping[Any, Any] | Pairs, where: str) -> list[tuple[Any, Any]]:
    """A dict's items as Python's dict keeps them: keys it takes for one (``1`` and
    ``True``, a key set twice) are one, the first key with the last value."""
    if isinstance(value, Mapping):
        return list(value.items())
    merged: dict[tuple[str, Any], list[Any]] = {}
    for key, child in value.pairs:
        try:
            told = python_key(key)
        except UnsupportedError as exc:
            raise UnsupportedError(f"{quoted_name(where)}: {exc}") from None
        found = merged.get(told)
        if found is None:
            merged[told] = [key, child]
        else:
            found[1] = child
    return [(k, v) for k, v in merged.values()]


def _too_many(where: str, most: int) -> None:
    raise UnsupportedError(
        f"{quoted_name(where)}: the pickle flattens to more than {most:,} entries (one for "
        "each 32 bytes of the file and 16,384): a list of thousands of one-byte values, or "
        "an entry listed again and again through the memo"
    )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _holding(obj: Any) -> set[int]:
    """The ids of the containers in ``obj`` that hold a tensor, at any depth: each container
    is looked into once however often it is referred to (a cycle or a shared list costs
    one step a reference), and one that holds only plain values is not remembered at all."""
    up: dict[int, list[int]] = {id(obj): []}  # a container's id -> the ids of those holding it
    held: list[int] = []  # the containers that hold a tensor themselves
    seen = {id(obj)}
    stack = [obj] if _is_container(obj) else []
    while stack:
        value = stack.pop()
        direct = False
        for member in _members(value):
            if type(member) in _PLAIN:
                continue
            if isinstance(member, Stored):
                direct = True
            elif _is_container(member):
                parents = up.get(id(member))
                if parents is not None:
                    parents.append(id(value))
                elif id(member) not in seen:  # (looked into once: h08)
                    seen.add(id(member))
                    if any(
                        type(m) not in _PLAIN and (isinstance(m, Stored) or _is_container(m))
                        for m in _members(member)
                    ):  # (a container of plain values alone cannot lead to a tensor)
                        up[id(member)] = [id(value)]
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


def walk(obj: Any, where: str, size: int) -> Checkpoint:
    """Flatten ``obj``, loaded from the ``size``-byte pickle ``where`` (see
    :mod:`~tensorfile.formats.torch_pickle`), without recursion: a dict nested thousands
    deep, which ``torch.load`` accepts, is walked like any other. Only the containers that
    hold a tensor are opened: any other (a list of five million numbers, one that holds
    itself) is one plain value, whatever it holds. A container of tensors shared by two
    entries is read under both names; one that holds itself is, inside itself, a text value
    naming it. Refused: more entries read again through a container walked before than the
    file's budget (a pickle can refer to one dict twice at every level: 2**60 entries in a
    few bytes), and names longer in all than the file's budget of characters."""
    holding = _holding(obj)
    limit = size // 16 + MIN_ENTRIES
    promised, most = 1, size // 32 + _MIN_NAMED  # (entries to come, at least; at most)
    names = _Budget(where, size, "flattened names")
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
        opened = _is_container(value) and (parent < 0 or id(value) in holding)
        if opened and id(value) in path:
            value, opened = f"(the same object as {brief(path[id(value)])})", False
            names.spend(len(value))
        if opened:  # the top's entries are entries, tensors or not
            if id(value) in walked:
                again += len(value)
                if again > limit:
                    raise UnsupportedError(
                        f"{quoted_name(where)}: the pickle refers to its containers so often "
                        f"that it flattens to more than {limit:,} entries read twice"
                    )
            promised += len(value) - 1  # (each child is an entry, or holds one at least)
            if promised > most:
                _too_many(where, most)
            walked.add(id(value))
            path[id(value)] = name
            stack.append((name, value, _LEFT))  # popped once every child is walked
            stack.extend(reversed([(n, v, 0) for n, v in _children(value, name, names)]))
            continue
        if isinstance(value, Storage):  # (a bare storage, as torch.load gives it: its bytes)
            value = Stored.whole(value, where)
        into = found.tensors if isinstance(value, Stored) else found.values
        if not name and parent >= 0:
            raise UnsupportedError(f"{quoted_name(where)}: the pickle has an entry of empty name")
        name = name or file_stem(where)  # a lone tensor or value: named after the file
        if "\0" in name or (not name.isascii() and not _utf8(name)):
            raise FormatError(
                f"{quoted_name(where)}: the pickle names an entry with a NUL or a lone "
                f"surrogate ({brief(name)}), which no file format can hold as a name",
                format="pytorch",
            )

        if name in into:
            raise UnsupportedError(
                f"{quoted_name(where)}: two entries flatten to the name {brief(name)} (a dotted "
                "key and a nested dict); rename one"
            )
        into[name] = value
    return found


def _type_name(value: Any) -> str:
    if value is None:
        return "None"
    return (
        "dict"
        if isinstance(value, Pairs)
        else "set"
        if isinstance(value, PickledSet)
        else type(value).__name__
    )


def describe(value: Any) -> str:
    """A short description of a checkpoint entry that is not a tensor.

    Example:
        >>> describe(3), describe(None), describe({"a": 1, "b": 2}), describe([0.5, 1.0])
        ('int', 'None', 'dict of 2 ints', 'list of 2 floats')
        >>> describe([{"lr": 0.1}]), describe(["a", 1]), describe(())
        ('list of 1 dict', 'list of 2 values', 'empty tuple')
    """
    if not isinstance(value, Mapping | Pairs | list | tuple | set | frozenset):
        return _type_name(value)
    kind = "dict" if isinstance(value, Mapping) else _type_name(value)
    members = list(value.values() if isinstance(value, Mapping | Pairs) else value)
    if not members:
        return f"empty {kind}"
    types = {_type_name(v) for v in members}
    what = types.pop() if len(types) == 1 else "value"
    many = "" if len(members) == 1 or what == "None" else ("es" if what[-1] == "s" else "s")
    return f"{kind} of {len(members):,} {what}{many}"


def _cut(name: str) -> str:
    return name if len(name) <= _CUT else name[: _CUT - 3] + "..."


class Plain:
    """The plain values of one pickle (``where``, ``size`` bytes; None: no limit on their
    text), rendered entry by entry (:meth:`entry`) with one budget for the file: the
    containers on the path being rendered (a repeat: a cycle), those rendered once (a
    repeat of one costs the budget of entries, past it a text naming where it was first
    rendered), the characters of text made, and what was noted for the entry."""

    def __init__(self, where: str = "", size: int | None = None) -> None:
        self.path: dict[int, str] = {}
        self.done: dict[int, str] = {}
        self.left = MIN_ENTRIES + (size or 0) // 16
        self.text = _Budget(where, size, "plain values, as JSON text,", MIN_VALUE_TEXT)
        self.notes: list[str] = []
        self.said: dict[str, str] = {}  # a name: the text that stands for a repeat of it

    def entry(self, value: Any, name: str) -> tuple[Any, list[str]]:
        """Entry ``name``'s plain value (see :func:`plain_value`) and what was noted."""
        self.notes = []
        return self.render(value, name, 0), self.notes

    def _note(self, text: str) -> None:
        if len(self.notes) < _NOTES:
            self.notes.append(text)

    def _string(self, value: str, name: str) -> str:
        """``value``, or, where it holds a lone surrogate (which UTF-8 cannot hold, and a
        pickle can), the same text with it escaped (``\\ud800``), noted."""
        # (as JSON metadata writes it: a control character is 6 characters, a quote 2)
        escaped = len(value) - len(value.translate(_ESCAPED))
        self.text.spend(len(value) + escaped + 4 * _controls(value))
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self._note(f"{brief(name)}: a lone surrogate in {brief(value)}, kept escaped")
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value

    def _same(self, first: str) -> str:
        """The text that stands for a container rendered first as ``first`` (it counts)."""
        said = self.said.get(first)
        if said is None:
            said = self.said[first] = f"(the same object as {brief(first)})"
        self.text.spend(len(said))
        return said

    def _other(self, value: Any) -> str:
        """The text of a value that is no number, text or container: bytes as ``str`` has
        them (refused before they are made if their length alone is past the budget), a
        complex number, dtype, device or class too; anything else (a storage, whose ``str``
        shows every element, a tensor) by its type and size, never its ``str``."""
        if isinstance(value, bytes | bytearray):
            self.text.check(len(value))
            return str(value)
        if isinstance(value, Global):
            return value.name
        if isinstance(value, Storage):
            return _storage_text(value)
        torch = sys.modules.get("torch")
        if isinstance(value, complex | type) or (
            torch is not None and isinstance(value, torch.dtype | torch.device)
        ):
            return str(value)
        return sized(value) or f"<{type(value).__name__}>"

    def render(self, value: Any, name: str, depth: int) -> Any:
        """``value`` (named ``name``, ``depth`` containers deep) as a plain value."""
        if type(value) in _SMALL or isinstance(value, bool | float):
            return value
        if isinstance(value, int):
            if -_BIG < value < _BIG:
                return value
            self.text.spend(value.bit_length() // 3)
            return value if value.bit_length() <= _INT_BITS else brief(value)
        if isinstance(value, str):
            return self._string(value, name)
        if not isinstance(value, Mapping | Pairs | list | tuple | set | frozenset):
            return self._string(self._other(value), name)
        if id(value) in self.path:
            return self._same(self.path[id(value)])
        first = self.done.get(id(value))
        if first is not None and len(value):
            if self.left < len(value):  # (a pickle can refer to one list twice at each level)
                return self._same(first)
            self.left -= len(value)
        name = _cut(name)
        self.done.setdefault(id(value), name)  # (a repeat, however deep, costs the budget)
        if depth >= _DEPTH:
            return self._string(f"({describe(value)}, nested more than {_DEPTH} deep)", name)
        self.path[id(value)] = name
        try:
            if isinstance(value, Mapping | Pairs):
                return self._mapping(value, name, depth)
            unordered = isinstance(value, set | frozenset)  # (a pickle's: in its order)
            items = sorted(value, key=_order) if unordered else value
            return [
                v
                if type(v) in _SMALL or (type(v) is int and -_BIG < v < _BIG)
                else self.render(v, f"{name}.{i}", depth + 1)
                for i, v in enumerate(items)
            ]
        finally:
            del self.path[id(value)]

    def _mapping(self, value: Mapping[Any, Any] | Pairs, name: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        keys: dict[str, Any] = {}
        for k, v in _items(value, self.text.where):
            text = self._string(_key_text(k), f"{name} key")
            if text in keys:
                self._note(
                    f"{brief(name)}: keys {brief(keys[text])} and {brief(k)} are both "
                    f"{brief(text)} as text; the first kept"
                )
                continue
            keys[text] = k
            out[text] = self.render(v, f"{name}.{text[:_CUT]}", depth + 1)
        return out


def _order(value: Any) -> tuple[str, str]:
    """A set's order: by type, then by text (a plain value's; a container's is not
    rendered, which could take as long as the container is deep; an integer too long to
    print, by its size)."""
    if not isinstance(value, _SCALARS):
        return type(value).__name__, ""
    return type(value).__name__, brief(value) if isinstance(value, int) else repr(value)


def plain_value(value: Any, name: str = "", *, notes: list[str] | None = None) -> Any:
    """A checkpoint entry (named ``name``) as a JSON-like value, the form metadata keeps it
    in: dicts (keys as text), lists (tuples and sets too), text, numbers, booleans and None;
    anything else (bytes, a complex number, a torch dtype or device) as its text,
    ``str(value)``. A container that holds itself is, inside itself, a text naming it; what
    cannot be kept as it is (two keys with one text, ``0`` and ``"0"``; a lone surrogate in
    a text) is added to ``notes`` (the first few).

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
    found, noted = Plain().entry(value, name)
    if notes is not None:
        notes.extend(noted)
    return found
