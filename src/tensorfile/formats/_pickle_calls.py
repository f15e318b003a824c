"""The calls and globals of a PyTorch pickle that tensorfile's pickle reader
(:mod:`._unpickle`) makes values of: tensor and parameter rebuilds, ``OrderedDict()``,
``Counter``, ``set``, ``complex``, bytes from their text, ``torch.Size``, ``torch.device``,
dtypes and storage classes by name; each with the arguments it takes (any other: None,
refused by the reader, naming the call).

Example:
    >>> storage_dtype("torch.FloatStorage").name, dtype_named(TorchName("torch.bfloat16")).name
    ('F32', 'BF16')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..core import dtypes
from ..core.dtypes import DType
from ..core.errors import UnsupportedError, quoted_name
from ._pickle_values import Pairs, PickledSet, Size, Storage, Stored, TorchName

__all__ = ["CALLS", "DIMS", "TYPES", "WHY", "Bad", "Context", "Global", "holds_tensor"]
__all__ += ["UNTYPED", "dtype_named", "index", "rename", "show", "storage_dtype"]


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

WHY = {
    "torch._utils._rebuild_sparse_tensor": "a sparse tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_nested_tensor": "a nested tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_qtensor": "a quantized tensor; tensorfile reads dense tensors",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": "it converts a tensor while loading",
    "torch._utils._rebuild_device_tensor_from_numpy": "it converts an array while loading",
    "torch._utils._rebuild_wrapper_subclass": "a tensor subclass without storage",
    "torch._utils._rebuild_meta_tensor_no_storage": "a tensor on the meta device has no data",
}


_KINDS = {Stored: "a tensor", Storage: "a storage", Pairs: "a dict", PickledSet: "a set"}
"""How a refusal shows the reader's own values."""


class Global(NamedTuple):
    """A ``GLOBAL`` the pickle named, as ``module.name``."""

    name: str


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
            return None
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
    return _rebuild(m, args) if len(args) in (4, 6, 7) else None


def _v3(m: Context, args: tuple[Any, ...]) -> Stored | None:
    return _rebuild(m, args, args[6]) if len(args) in (7, 8) else None


def _parameter(m: Context, args: tuple[Any, ...]) -> Stored | None:
    return args[0] if len(args) in (3, 4) and isinstance(args[0], Stored) else None


def _ordered(m: Context, args: tuple[Any, ...]) -> Pairs | None:
    return Pairs() if not args else None


def _counter(m: Context, args: tuple[Any, ...]) -> Pairs | None:
    if not args:
        return Pairs()
    if len(args) == 1 and isinstance(args[0], Pairs) and not holds_tensor(args[0]):
        m.charge(len(args[0].pairs), "collections.Counter")
        return Pairs(list(args[0].pairs))
    return None


def _set(m: Context, args: tuple[Any, ...]) -> PickledSet | None:
    if not args:
        return PickledSet()
    items = args[0] if len(args) == 1 else None
    plain = (str, bytes, int, float, bool, type(None))
    if isinstance(items, list | tuple) and all(isinstance(v, plain) for v in items):
        m.charge(len(items), "builtins.set")
        return PickledSet(items)
    return None


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
    return Size(args[0]) if len(args) == 1 and _ints(args[0]) else None


def _device(m: Context, args: tuple[Any, ...]) -> str | None:
    if len(args) == 1 and isinstance(args[0], str) and len(args[0]) <= 64:
        return args[0]
    if len(args) == 2 and isinstance(args[0], str) and len(args[0]) <= 64 and index(args[1]):
        return f"{args[0]}:{args[1]}"
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
    if name in ("torch.UntypedStorage", "torch.storage.UntypedStorage"):
        return UNTYPED
    module, _, stem = name.rpartition(".")
    known = module in ("torch", "torch.cuda")
    found = _STORAGES.get(stem.removesuffix("Storage")) if known else None
    return dtypes.from_safetensors(found) if found else None
