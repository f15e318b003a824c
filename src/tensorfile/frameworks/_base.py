"""The adapter base classes: numpy itself, and frameworks whose arrays are made from numpy.

:class:`Framework` reads tensors as numpy arrays. :class:`ArrayFramework` is the base of the
frameworks that take their arrays from numpy (jax, tensorflow, mlx, paddle): a subclass
says which dtypes its framework lacks (:meth:`~ArrayFramework.lacks`) and how a numpy
array becomes one of its arrays (:meth:`~ArrayFramework.from_numpy`); the base refuses a
lacking dtype by name before any byte is read, and converts tensor by tensor, dropping
each numpy array as soon as its copy exists, so a whole file never sits in memory twice.
The framework itself is imported only when an adapter is made (:func:`import_framework`).

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> with tensorfile.open(save({"a": np.arange(3, dtype=np.int8)})) as r:
    ...     Framework().read(r, ["a"])[0].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import numpy as np

from ..core import dtypes
from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from ..core.extras import require
from ..core.reader import Reader, brief, numpy_allocator

__all__ = [
    "ArrayFramework",
    "Framework",
    "import_framework",
    "refuse_type",
    "saved_dtype",
    "saved_values",
]


class Framework:
    """Read tensors as numpy arrays (the base adapter)."""

    name = "numpy"

    def __init__(self, device: Any = "cpu") -> None:
        if str(device) != "cpu":
            raise InvalidArgumentError(f"numpy arrays live on the cpu; device={brief(device)}")
        self.device = device

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        """Owned arrays of ``names``, read in as few calls as the file layout allows."""
        return reader.read_into(names, numpy_allocator)

    def view(self, reader: Reader, names: list[str]) -> list[Any]:
        """Read-only zero-copy arrays of ``names`` over the mapped file (bit-packed F4/F6
        tensors are unpacked copies)."""
        return [
            reader.get_tensor(name) if reader.info(name).dtype.is_subbyte else reader.view(name)
            for name in names
        ]

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        """A numpy array (from a slice) in this framework."""
        return arr


def import_framework(module: str, framework: str, extra: str) -> ModuleType:
    """Import ``module`` for ``framework``, or say which extra installs it.

    Example:
        >>> import_framework("numpy", "np", "core").__name__
        'numpy'
        >>> import_framework("no_such_framework", "nsf", "nsf")
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.UnsupportedError: framework 'nsf' needs no_such_framework, ...
    """
    return require(module, f"framework {framework!r}", extra=extra)


class ArrayFramework(Framework, ABC):
    """A framework whose arrays are made from numpy arrays: tensors are read into numpy
    arrays, then copied into the framework's memory one by one (with ``copy=False``, from
    views of the mapped file: a single copy).

    Subclasses set :attr:`name`, :attr:`module` and :attr:`extra` and implement
    :meth:`lacks` and :meth:`from_numpy`; :meth:`place` accepts the cpu only, as the
    reference does for these frameworks.
    """

    name = "array"
    module = "numpy"
    """The module to import (``"tensorflow"``, ``"jax.numpy"``...)."""
    extra = "core"
    """The tensorfile extra that installs it."""

    def __init__(self, device: Any = "cpu") -> None:
        self.fw = import_framework(self.module, self.name, self.extra)
        self.device = self.place(device)

    def place(self, device: Any) -> Any:
        """The framework's form of ``device``: the cpu only (``"cpu"``, or ``None`` as in the
        reference), unless a subclass knows more."""
        if device is None:
            return "cpu"
        if not isinstance(device, str) or device != "cpu":
            raise InvalidArgumentError(
                f"device {brief(device)} is not supported for framework {self.name}: "
                "its tensors are read to the cpu"
            )
        return device

    @abstractmethod
    def lacks(self, dt: DType) -> str | None:
        """Why this framework cannot hold ``dt`` (``None`` when it can)."""

    @abstractmethod
    def from_numpy(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        """An array of this framework with ``arr``'s values (``arr`` has ``dt.numpy``)."""

    def check(self, dt: DType, name: str | None = None) -> None:
        """Refuse ``dt`` by name (:class:`UnsupportedError`) when the framework lacks it."""
        reason = self.lacks(dt)
        if reason is not None:
            what = f"tensor {name!r} is {dt.name}" if name is not None else f"dtype {dt.name}"
            raise UnsupportedError(f"{what}, which {self.name} cannot hold: {reason}")

    def _checked(self, reader: Reader, names: list[str]) -> list[DType]:
        kinds = [reader.info(name).dtype for name in names]
        for name, dt in zip(names, kinds, strict=True):
            self.check(dt, name)
        return kinds

    def _convert_all(self, arrays: list[Any], kinds: list[DType]) -> list[Any]:
        for i, dt in enumerate(kinds):  # in place: each numpy array goes once converted
            arrays[i] = self._from_numpy_checked(arrays[i], dt)
        return arrays

    def _from_numpy_checked(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        try:
            return self.from_numpy(arr, dt)
        except (
            AttributeError,
            TypeError,
            ValueError,
            RuntimeError,
            MemoryError,
            OverflowError,
        ) as exc:
            # the framework refused after all (a release other than the ones checked)
            raise UnsupportedError(
                f"{self.name} could not make an array of {dt.name} and shape "
                f"{list(arr.shape)}: {exc}"
            ) from exc

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        """Arrays of ``names``: read as numpy arrays, then handed to the framework."""
        kinds = self._checked(reader, names)
        return self._convert_all(super().read(reader, names), kinds)

    def view(self, reader: Reader, names: list[str]) -> list[Any]:
        """Arrays of ``names`` made from views of the mapped file: one copy, not two."""
        kinds = self._checked(reader, names)
        return self._convert_all(super().view(reader, names), kinds)

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        self.check(dt)
        return self._from_numpy_checked(arr, dt)


def saved_dtype(name: str, framework: str, dtype_name: str) -> DType:
    """The dtype a tensor of ``framework`` whose dtype is called ``dtype_name`` (numpy's
    spelling: ``"bfloat16"``, ``"bool"``) is saved as; :class:`UnsupportedError` when the
    format has none.

    Example:
        >>> saved_dtype("w", "tensorflow", "bfloat16")
        DType(BF16)
        >>> saved_dtype("s", "tensorflow", "string")
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.UnsupportedError: tensor 's': tensorflow dtype string has no ...
    """
    try:
        dt = dtypes.from_name(dtype_name)
    except KeyError:
        dt = None
    if dt is None or dt.numpy_name != dtype_name:  # a safetensors or torch-only spelling
        raise UnsupportedError(
            f"tensor {name!r}: {framework} dtype {dtype_name} has no safetensors equivalent"
        )
    return dt


def refuse_type(name: str, expected: str, value: Any, hint: str = "") -> NoReturn:
    """Refuse ``value``, which should be a tensor of a framework, with the reference's words
    (:class:`InvalidTypeError`); ``hint`` says how to make it one.

    Example:
        >>> refuse_type("w", "tf.Tensor", [1.0])
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidTypeError: Key `w` is invalid, expected tf.Tensor but ...
    """
    raise InvalidTypeError(
        f"Key `{name}` is invalid, expected {expected} but received {type(value)}{hint}"
    )


def saved_values(
    name: str,
    framework: str,
    dt: DType,
    values: Callable[[], Any],
    errors: tuple[type[BaseException], ...] = (TypeError, ValueError, RuntimeError),
) -> np.ndarray[Any, Any]:
    """The values of a tensor about to be saved as ``dt``, as a numpy array of ``dt.numpy``:
    ``values()`` gives them (an array of the same width); one of ``errors`` from it (a
    symbolic tensor, one spread over processes...) is an :class:`InvalidArgumentError`.

    Example:
        >>> bf16 = dtypes.from_safetensors("BF16")
        >>> saved_values("w", "mlx", bf16, lambda: np.zeros(2, np.uint16)).dtype
        dtype(bfloat16)
        >>> saved_values("w", "jax", bf16, lambda: 1 / 0, (ZeroDivisionError,))
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidArgumentError: tensor 'w': jax cannot give its values: ...
    """
    try:
        arr = np.asarray(values())
    except errors as exc:
        raise InvalidArgumentError(
            f"tensor {name!r}: {framework} cannot give its values: {exc}"
        ) from exc
    return arr.view(dt.numpy) if arr.dtype != dt.numpy else arr
