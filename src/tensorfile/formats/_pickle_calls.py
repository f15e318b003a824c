"""The values tensorfile's pickle reader (:mod:`._unpickle`) makes (dicts as their pairs,
sets as their items, tensors as checked views of a storage's bytes), and the calls and
globals of a PyTorch pickle it makes values of: tensor and parameter rebuilds, ``OrderedDict()``,
``Counter``, ``set``, ``complex``, bytes from their text, ``torch.Size``, ``torch.device``,
dtypes and storage classes by name; each with the arguments it takes (any other: None,
refused by the reader, naming the call).

Example:
    >>> storage_dtype("torch.FloatStorage").name, dtype_named(TorchName("torch.bfloat16")).name
    ('F32', 'BF16')
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from ..core import dtypes
from ..core.dtypes import DType
from ..core.errors import FormatError, UnsupportedError, quoted_name

__all__ = ["CALLS", "COSTS", "DIMS", "TYPES", "Bad", "Context", "Global", "holds_tensor"]
__all__ += ["UNTYPED", "Pairs", "PickledSet", "Size", "Storage", "Stored", "TorchName"]
__all__ += ["Device", "dtype_named", "index", "plain_state", "python_key", "rename", "show"]
__all__ += ["storage_dtype"]


class Pairs:
    """A dict of a pickle, as its ``(key, value)`` pairs in the pickle's order: no key is
    ever hashed (a file's integer keys can be made to collide, and a dict of them to take
    quadratic time), and a key set twice is kept twice (flattening refuses it, naming it):
    ``Pairs([("a", 1)]).values() == [1]``."""

    __slots__ = ("ordered", "pairs")

    def __init__(self, pairs: list[tuple[Any, Any]] | None = None, ordered: bool = False) -> None:
        self.pairs: list[tuple[Any, Any]] = [] if pairs is None else pairs
        self.ordered = ordered  # (made by OrderedDict() or Counter: torch sets its __dict__)

    def items(self) -> list[tuple[Any, Any]]:
        return self.pairs

    def values(self) -> list[Any]:
        return [v for _, v in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[Any]:
        return (k for k, _ in self.pairs)


class PickledSet(list[Any]):
    """A set of a pickle, as its items (never hashed); rendered like a set."""

    __slots__ = ()


class Size(tuple[int, ...]):
    """A ``torch.Size`` of a pickle: a shape, kept as one value (never flattened)."""

    __slots__ = ()


class TorchName(str):
    """A torch global that is data, not code (``torch.float32``, a layout), by its name."""

    __slots__ = ()


class Storage:
    """A storage of a pickle: its key, dtype (``U8`` for untyped bytes), size in bytes, and its
    bytes once the file gave them (:attr:`data`); a view of another (an old-format file's)
    is ``nbytes`` of its ``base``'s from ``start``."""

    __slots__ = ("base", "data", "dtype", "key", "nbytes", "start")

    def __init__(
        self,
        key: str,
        dtype: DType,
        nbytes: int,
        base: Storage | None = None,
        start: int = 0,
    ) -> None:
        self.key, self.dtype, self.nbytes, self.base, self.start = key, dtype, nbytes, base, start
        self.data: Any = None

    def root(self) -> tuple[Storage, int]:
        """The storage whose bytes this one's are, and where they start in it."""
        return (self, 0) if self.base is None else (self.base, self.start)

    def buffer(self) -> Any:
        """The storage's bytes (a view of the file's)."""
        root, start = self.root()
        return root.data[start : start + self.nbytes]


_MAX_DIM = 1 << 62  # (a size past it is no shape numpy makes)


class Stored:
    """A tensor of a pickle: ``size`` and ``stride`` (in elements) from ``offset`` in a
    storage's bytes, read as ``dtype``; made only by :meth:`checked`."""

    __slots__ = ("dtype", "flags", "numel", "offset", "size", "storage", "stride")

    def __init__(
        self,
        storage: Storage,
        dtype: DType,
        offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        numel: int,
    ) -> None:
        self.storage, self.dtype, self.offset = storage, dtype, offset
        self.size, self.stride, self.numel = size, stride, numel
        self.flags: tuple[str, ...] = ()  # ("conj", "neg"): what torch's view bits ask

    @classmethod
    def checked(
        cls,
        storage: Storage,
        dtype: DType,
        offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        where: str,
    ) -> Stored:
        """The tensor, if it lies within ``storage`` and holds each of its elements once;
        else a :class:`FormatError` (past the storage), or an :class:`UnsupportedError`
        (elements repeated: a stride-0 view, overlapping strides)."""
        item = dtype.itemsize

        def layout() -> str:  # (made only for a refusal: sizes can be long numbers)
            return f"offset {offset:,}, size {_shape(size)}, stride {_shape(stride)}"

        span = item
        for n in size:  # (stopping past the limit: a product of long numbers is slow)
            span = span * max(n, 1) if span < _MAX_DIM else span
        if span >= _MAX_DIM or max((*stride, offset), default=0) >= _MAX_DIM // item:
            raise UnsupportedError(
                f"{quoted_name(where)}: a tensor of the pickle ({layout()}) is too large: its "
                "sizes, strides and offset reach past what an array can address"
            )
        if 0 in size:
            return cls(storage, dtype, offset, size, stride, 0)
        reach = 1 + sum(st * (n - 1) for n, st in zip(size, stride, strict=True))
        if (offset + reach) * item > storage.nbytes:
            raise FormatError(
                f"{quoted_name(where)}: a tensor of the pickle ({layout()}, {dtype.name}) "
                f"reaches {(offset + reach) * item:,} bytes into a storage of "
                f"{storage.nbytes:,}: the file is not what it says",
                format="pytorch",
            )
        numel, step, room = 1, 1, storage.nbytes // item - offset
        for n in size:
            numel *= n
        if numel > room:
            raise FormatError(
                f"{quoted_name(where)}: a tensor of the pickle ({layout()}) has more elements "
                f"than its storage of {storage.nbytes:,} bytes holds from that offset (it "
                "repeats elements): the file is not what it says",
                format="pytorch",
            )
        numel = 1
        for st, n in sorted((st, n) for n, st in zip(size, stride, strict=True) if n > 1):
            if st < step:
                raise UnsupportedError(
                    f"{quoted_name(where)}: a tensor of the pickle ({layout()}) has strides that "
                    "may make two elements one (interleaved or repeating); tensorfile reads "
                    "tensors whose strides it can tell hold every element once"
                )
            step, numel = st * n, numel * n
        return cls(storage, dtype, offset, size, stride, numel)

    def copy(self) -> Stored:
        """Another tensor of the same storage, layout and view bits (a new object)."""
        made = Stored(self.storage, self.dtype, self.offset, self.size, self.stride, self.numel)
        made.flags = self.flags
        return made

    @classmethod
    def whole(cls, storage: Storage, where: str) -> Stored:
        """A bare storage as a tensor: every element of its dtype (bytes when untyped)."""
        numel = storage.nbytes // storage.dtype.itemsize
        return cls.checked(storage, storage.dtype, 0, (numel,), (1,), where)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def contiguous(self) -> bool:
        """Whether the elements lie one after another in row-major order."""
        want = 1
        for n, st in zip(reversed(self.size), reversed(self.stride), strict=True):
            if n > 1 and st != want:
                return False
            want *= n
        return not self.flags  # (a conjugated or negated view is made anew)

    def key(self) -> str:
        """What makes two tensors one array: their bytes, layout, dtype and view bits, as
        text (whose hash is salted: tuples of a file's numbers could be made to collide)."""
        root, start = self.storage.root()
        at = start + self.offset * self.dtype.itemsize
        return f"{id(root)} {at} {self.size} {self.stride} {self.dtype.name} {self.flags}"

    def array(self) -> np.ndarray[Any, Any]:
        """The tensor as a read-only numpy array over the file's bytes (strided as stored)."""
        np_dtype = dtypes.numpy_dtype(self.dtype)
        if not self.numel:
            return np.zeros(self.size, np_dtype)
        item = self.dtype.itemsize
        strides = tuple(st * item for st in self.stride)
        # (frombuffer holds the buffer, so a mapping stays open under the array; numpy
        # checks that the layout lies within it)
        raw = np.frombuffer(self.storage.buffer(), np.uint8)
        made = np.ndarray(self.size, np_dtype, raw, self.offset * item, strides)
        if "conj" in self.flags:
            made = np.conjugate(made)
        if "neg" in self.flags:
            made = np.negative(made)
        made.flags.writeable = False
        return made


def _shape(value: tuple[int, ...]) -> str:
    shown = ", ".join(str(v) for v in value[:8])
    return f"({shown}{', ...' if len(value) > 8 else ''})"


class Context(Protocol):
    """What a call needs of the reader: where it reads, and the budget of copies."""

    where: str

    def charge(self, n: int, name: str) -> None: ...


DIMS = 64  # the most dimensions a tensor may have (numpy's limit)
_SHOWN_DEPTH = 4  # how deep a refusal shows nested tuples

_STORAGES = {"Double": "F64", "Float": "F32", "Half": "F16", "BFloat16": "BF16",
             "Long": "I64", "Int": "I32", "Short": "I16", "Char": "I8", "Byte": "U8",
             "Bool": "BOOL", "ComplexFloat": "C64"}  # fmt: skip
"""The dtype of each of torch's typed storage classes (``torch.FloatStorage``) tensorfile
reads, by stem (``torch.UntypedStorage`` holds bytes: ``_rebuild_tensor_v3`` names the
dtype)."""

_KINDS = {Stored: "a tensor", Storage: "a storage", Pairs: "a dict", PickledSet: "a set"}
"""How a refusal shows the reader's own values."""


class Global:
    """A ``GLOBAL`` the pickle named, as ``module.name`` (one value, never a container)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Global) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("Global", self.name))

    def __repr__(self) -> str:
        return self.name


class Device(str):
    """A ``torch.device`` by its text (``cuda:1``); as a key, not equal to that text."""

    __slots__ = ()


def python_key(key: Any) -> tuple[str, Any]:
    """What tells two dict keys (or set items) apart exactly as Python does, without
    hashing the key (a file's numbers can be made to collide; this text's hashes are
    salted): ``1``, ``1.0`` and ``True`` alike, ``0.0`` and ``-0.0`` alike. Only text,
    bytes, numbers and None are keys tensorfile tells apart; any other (a tuple, a complex
    number, a device, a tensor, NaN, whose equality is Python's own business) is an
    :class:`UnsupportedError`: no checkpoint keys a dict by one."""
    if isinstance(key, bool):
        key = int(key)
    if isinstance(key, float) and key == key:  # (not NaN: it equals nothing)
        if not key.is_integer():
            return ("number", repr(key))
        key = int(key)
    if isinstance(key, int):
        return ("number", str(key))  # (a LONG1 holds at most 2,040 bits: ~615 digits)
    if type(key) in (str, bytes):
        return (type(key).__name__, key)
    if key is None:
        return ("none", "")
    raise UnsupportedError(
        f"a dict key or set item that is {show(key)}; tensorfile reads dicts keyed (and "
        "sets made) of text, bytes, numbers and None"
    )


class Bad(Exception):
    """What the reader cannot follow: a :class:`FormatError` once its place is known."""


def show(value: Any, depth: int = 0) -> str:
    """A short text of a value in a refusal (bounded: tuples cut, long texts cut)."""
    if isinstance(value, Global):
        return value.name
    if isinstance(value, tuple) and not isinstance(value, Size):
        if depth >= _SHOWN_DEPTH and value:
            return "(...)"
        shown = ", ".join(show(v, depth + 1) for v in value[:6])
        return f"({shown}{', ...' if len(value) > 6 else ''})"
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, bool | int | float | str | bytes | type(None)):
        text = repr(value[:40] if isinstance(value, str | bytes) else value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(value).__name__}"


def _ints(value: Any) -> bool:
    """Whether ``value`` is a tuple of at most 64 non-negative integers."""
    return (
        isinstance(value, tuple)
        and len(value) <= DIMS
        and all(type(v) is int and v >= 0 for v in value)
    )


def index(value: Any) -> bool:
    return type(value) is int and value >= 0


def _text_args(args: tuple[Any, ...]) -> bool:
    """``(text, 'latin1')``: bytes as pickle protocol 2 writes them."""
    return (
        len(args) == 2
        and isinstance(args[0], str)
        and isinstance(args[1], str)
        and args[1].lower() in ("latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1")
    )


def rename(module: str, name: str) -> str:
    return f"{'builtins' if module == '__builtin__' else module}.{name}"


def holds_tensor(value: Pairs) -> bool:
    return any(isinstance(v, Stored | list | tuple | Pairs) for _, v in value.pairs)


TYPES = (Global("torch.Tensor"), Global("torch.nn.parameter.Parameter"))


def _rebuild(m: Context, args: tuple[Any, ...], dtype: Any = None) -> Stored | None:
    """A tensor over ``args[0]``'s storage (``storage, offset, size, stride, ...``)."""
    if len(args) < 4 or not isinstance(args[0], Storage):
        return None
    storage, offset, size, stride = args[:4]
    if isinstance(size, Size):
        size = tuple(size)
    dt = storage.dtype
    if dtype is not None:
        dt = dtype_named(dtype)
        if dt is None:
            raise UnsupportedError(
                f"{quoted_name(m.where)}: a tensor of the pickle is of {str(dtype)[:100]}, which "
                "tensorfile does not read (complex32, packed sub-byte and bits types)"
            )
    if (
        dt is None
        or not (index(offset) and _ints(size) and _ints(stride))
        or len(size) != len(stride)
    ):
        if isinstance(size, tuple) and len(size) > DIMS:
            raise UnsupportedError(
                f"{quoted_name(m.where)}: a tensor of the pickle has {len(size):,} dimensions; "
                f"tensorfile reads tensors of at most {DIMS}"
            )
        return None
    return Stored.checked(storage, dt, offset, size, stride, m.where)


def _v2(m: Context, args: tuple[Any, ...]) -> Stored | None:
    made = _rebuild(m, args) if len(args) in (6, 7) else None
    return _flagged(made, args[6] if len(args) == 7 else None)


def _v3(m: Context, args: tuple[Any, ...]) -> Stored | None:
    made = _rebuild(m, args, args[6]) if len(args) in (7, 8) else None
    return _flagged(made, args[7] if len(args) == 8 else None)


def _flagged(made: Stored | None, metadata: Any) -> Stored | None:
    """``made`` with the view bits ``torch.save`` keeps beside a tensor (``{"conj": True}``,
    ``{"neg": True}``: torch sets a bit whose key is there, whatever its value); None
    (refused) for any other metadata, a conjugate bit on a tensor that is not complex, or a
    negative one on a bool tensor (torch fails on both)."""
    if made is None or metadata is None:
        return made
    if not isinstance(metadata, Pairs):
        return None
    flags = []
    for key, value in metadata.pairs:
        if not isinstance(key, str) or not isinstance(value, bool):
            return None
        kind = made.dtype.kind
        if (key == "conj" and kind == "complex") or (key == "neg" and kind != "bool"):
            flags.append(key)
        else:
            return None
    made.flags = tuple(sorted(set(flags)))
    return made


_TENSOR_ATTRIBUTES = frozenset({
    "data", "real", "imag", "grad", "requires_grad", "names", "retains_grad", "grad_fn",
    "T", "H", "mT", "mH", "shape", "dtype", "device", "layout", "is_leaf", "output_nr",
    "_base", "_cdata", "_grad", "_grad_fn", "_version", "_backward_hooks",
    "_post_accumulate_grad_hooks",
})  # fmt: skip
"""The attributes a tensor's pickled state could set that change what it holds or is."""


def plain_state(state: Any) -> bool:
    """Whether ``state`` (torch sets it with ``setattr``) only adds attributes, set aside
    (``p.note = "x"``): None, a dict of them or a ``(dict, slots)`` pair; never one naming a
    tensor's own (``data``, ``real``: torch would change its values or shape)."""
    parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
    return all(  # (one level: a dict, None, or a pair of them; nothing nested)
        part is None
        or (
            isinstance(part, Pairs)
            and all(
                type(key) is str and key not in _TENSOR_ATTRIBUTES and not key.startswith("__")
                for key, _ in part.pairs
            )
        )
        for part in parts
    )


def _parameter(m: Context, args: tuple[Any, ...]) -> Stored | None:
    if len(args) in (3, 4) and isinstance(args[0], Stored):  # (a new object, as torch's)
        return args[0].copy() if len(args) == 3 or plain_state(args[3]) else None
    return None


def _ordered(m: Context, args: tuple[Any, ...]) -> Pairs | None:
    return Pairs(ordered=True) if not args else None


def _counter(m: Context, args: tuple[Any, ...]) -> Pairs | None:
    if not args:
        return Pairs(ordered=True)
    if len(args) == 1 and isinstance(args[0], Pairs) and not holds_tensor(args[0]):
        m.charge(len(args[0].pairs), "collections.Counter")
        return Pairs(list(args[0].pairs), ordered=True)
    return None


def _set(m: Context, args: tuple[Any, ...]) -> PickledSet | None:
    if not args:
        return PickledSet()
    items = args[0] if len(args) == 1 else None
    if isinstance(items, list | tuple):
        m.charge(len(items), "builtins.set")
        try:
            return PickledSet(_distinct(items))
        except UnsupportedError:  # (an item tensorfile does not tell apart: refused)
            return None
    return None


def _distinct(items: list[Any] | tuple[Any, ...]) -> list[Any]:
    """``items`` without repeats, in order, the first of each kept, told apart as Python's
    set does (:func:`python_key`: 1, 1.0 and True are one) but never hashed."""
    seen: dict[tuple[str, Any], None] = {}
    out = []
    for v in items:
        key = python_key(v)
        if key not in seen:
            seen[key] = None
            out.append(v)
    return out


def _complex(m: Context, args: tuple[Any, ...]) -> complex | None:
    if len(args) <= 2 and all(type(v) in (int, float) for v in args):
        try:
            return complex(*args)
        except OverflowError:
            raise Bad("a complex number too large") from None
    return None


def _encode(m: Context, args: tuple[Any, ...]) -> bytes | None:
    if not _text_args(args):
        return None
    m.charge(len(args[0]), "_codecs.encode")
    try:
        return bytes(args[0].encode("latin1"))
    except UnicodeEncodeError:
        raise Bad("bytes as text with a character past latin-1") from None


def _bytearray(m: Context, args: tuple[Any, ...]) -> bytearray | None:
    if not args:
        return bytearray()
    if len(args) == 1 and isinstance(args[0], bytes):
        m.charge(len(args[0]), "builtins.bytearray")
        return bytearray(args[0])
    encoded = _encode(m, args)
    return None if encoded is None else bytearray(encoded)


def _size(m: Context, args: tuple[Any, ...]) -> Size | None:
    if not args:
        return Size()
    if len(args) == 1 and _ints(args[0]):
        m.charge(len(args[0]), "torch.Size")
        return Size(args[0])
    return None


def _device(m: Context, args: tuple[Any, ...]) -> Device | None:
    if len(args) == 1 and isinstance(args[0], str) and len(args[0]) <= 64:
        return Device(args[0])
    if len(args) == 2 and isinstance(args[0], str) and len(args[0]) <= 64 and index(args[1]):
        return Device(f"{args[0]}:{args[1]}")
    return None


def _layout(m: Context, args: tuple[Any, ...]) -> TorchName | None:
    ok = len(args) == 1 and isinstance(args[0], str) and len(args[0]) <= 64
    return TorchName(args[0]) if ok else None


CALLS: dict[str, Callable[[Context, tuple[Any, ...]], Any]] = {
    "torch._utils._rebuild_tensor": lambda m, a: _rebuild(m, a) if len(a) == 4 else None,
    "torch._utils._rebuild_tensor_v2": _v2,
    "torch._utils._rebuild_tensor_v3": _v3,
    "torch._utils._rebuild_parameter": _parameter,
    "torch._utils._rebuild_parameter_with_state": _parameter,
    "collections.OrderedDict": _ordered,
    "collections.Counter": _counter,
    "builtins.set": _set,
    "builtins.complex": _complex,
    "builtins.bytearray": _bytearray,
    "_codecs.encode": _encode,
    "torch.Size": _size,
    "torch.device": _device,
    "torch.serialization._get_layout": _layout,
}
"""The calls tensor checkpoints make, each making its value from the arguments it takes
(None: arguments it does not take, refused)."""

COSTS = {name: 32 for name in CALLS if name.startswith("torch._utils._rebuild_tensor")}
"""Items a call counts against the file's budget before what it copies (1 when not here): a
tensor becomes an entry of the catalog, and an honest one takes 50 bytes of pickle or more."""


def dtype_named(value: Any) -> DType | None:
    """The dtype a ``torch.<dtype>`` global names (None: not one tensorfile reads)."""
    if not isinstance(value, TorchName) or not value.startswith("torch."):
        return None
    try:
        dt = dtypes.from_torch_name(value[len("torch.") :])
    except KeyError:
        return None
    return None if dt.is_subbyte else dt


UNTYPED = dtypes.from_safetensors("U8")
"""The dtype of ``torch.UntypedStorage``'s elements: bytes (``_rebuild_tensor_v3`` names
the tensor's own)."""


def storage_dtype(name: str) -> DType | None:
    """The dtype of a storage class (``torch.FloatStorage``: F32; ``torch.UntypedStorage``:
    :data:`UNTYPED`); None for one tensorfile does not read."""
    if name == "torch.storage.UntypedStorage":  # (the one torch.load takes)
        return UNTYPED
    module, _, stem = name.rpartition(".")
    known = module in ("torch", "torch.cuda")
    found = _STORAGES.get(stem.removesuffix("Storage")) if known else None
    return dtypes.from_safetensors(found) if found else None
