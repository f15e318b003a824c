"""The framework modules that go through numpy (``flax``, ``tensorflow``, ``mlx``,
``paddle``), written once: a :class:`NumpyFace` says what differs between them and
:func:`face_functions` (:func:`face_functions_onto` for a module whose loads take a device)
makes their ``save``, ``save_file``, ``load`` and ``load_file``, with the reference's
signatures and a docstring of their own.

As in the reference, tensors are written through numpy (so the bytes are
:mod:`tensorfile.safetensors.numpy`'s, to the byte) and read with ``safe_open`` under the
framework's name. Unlike the reference, saving leaves the caller's dict as it was.

Example:
    >>> import numpy as np
    >>> face = NumpyFace("np", "list", lambda name, v: np.asarray(v, np.int8), "lists",
    ...                  ("import numpy as np", "np.{}({})", ".tolist()"))
    >>> save, save_file, load, load_file = face_functions(face, __name__)
    >>> load(save({"a": [1, 2]}))["a"].tolist()
    [1, 2]
    >>> save([1, 2])
    Traceback (most recent call last):
    ...
    tensorfile.core.errors.InvalidTypeError: Expected a dict of [str, list] but received ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from tensorfile.core.errors import InvalidTypeError
from tensorfile.formats.safetensors._encode import check_name
from tensorfile.formats.safetensors._safe_open import safe_open
from tensorfile.formats.safetensors._writer import prepare_array, to_bytes, write_file

__all__ = [
    "Load",
    "LoadFile",
    "LoadFileOnto",
    "LoadOnto",
    "NumpyFace",
    "Save",
    "SaveFile",
    "face_functions",
    "face_functions_onto",
    "numpy_dict",
]

Data = bytes | bytearray | memoryview
Path = str | os.PathLike[str]
Tensors = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


def numpy_dict(
    tensors: Mapping[str, Any],
    kind: str,
    to_numpy: Callable[[str, Any], np.ndarray[Any, Any]],
) -> dict[str, np.ndarray[Any, Any]]:
    """``{name: to_numpy(name, tensor)}``, in the order given; the caller's mapping is left
    as it was (the reference replaces its values with numpy arrays).

    A ``tensors`` that is not a mapping is an :class:`InvalidTypeError` (a ``TypeError``
    and a ``ValueError``), a name that is not a string an
    :class:`~tensorfile.errors.InvalidArgumentError`, before any tensor is converted.

    Example:
        >>> numpy_dict({"a": [1, 2]}, "list", lambda name, v: np.asarray(v, np.int8))["a"]
        array([1, 2], dtype=int8)
        >>> numpy_dict([1, 2], "tf.Tensor", lambda name, v: v)
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidTypeError: Expected a dict of [str, tf.Tensor] but ...
    """
    if not isinstance(tensors, Mapping):
        raise InvalidTypeError(f"Expected a dict of [str, {kind}] but received {type(tensors)}")
    items = list(tensors.items())
    for name, _ in items:
        check_name(name)
    return {name: to_numpy(name, value) for name, value in items}


@dataclass(frozen=True)
class NumpyFace:
    """What one ``tensorfile.safetensors.<framework>`` module that goes through numpy is
    made of; :func:`face_functions` makes its four functions from it."""

    framework: str
    """The framework's ``safe_open`` name (``"tf"``, ``"flax"``, ``"mlx"``, ``"paddle"``)."""
    kind: str
    """Its tensor type as the reference names it in errors (``"tf.Tensor"``, ``"Array"``)."""
    to_numpy: Callable[[str, Any], np.ndarray[Any, Any]]
    """One of its tensors, by name, as a numpy array to write (its ``frameworks`` bridge)."""
    noun: str
    """What its tensors are called in the docstrings (``"tensorflow tensors"``)."""
    example: tuple[str, str, str]
    """For the docstrings' examples: the import, how a 1-d array of zeros or ones is made
    (``"tf.{}({})"``, filled with the function and the length) and how its values show."""
    saves: str = ""
    """What ``save``'s docstring adds about the tensors it takes (``" (or variables)"``)."""
    loads: str = ""
    """Where ``load``'s docstring says the tensors go (``" (on the cpu)"``)."""

    def save(self, tensors: Tensors, metadata: dict[str, str] | None) -> bytes:
        """The bytes of a safetensors file of ``tensors``."""
        arrays = numpy_dict(tensors, self.kind, self.to_numpy)
        return to_bytes([prepare_array(n, a) for n, a in arrays.items()], metadata)

    def save_file(
        self,
        tensors: Tensors,
        filename: Path,
        metadata: dict[str, str] | None,
        align: int,
        fsync: bool,
    ) -> None:
        """Write ``tensors`` to ``filename``, atomically."""
        arrays = numpy_dict(tensors, self.kind, self.to_numpy)
        prepared = [prepare_array(n, a) for n, a in arrays.items()]
        write_file(prepared, filename, metadata, align=align, fsync=fsync)

    def load(self, data: Data, device: Any) -> Tensors:
        """Every tensor of the bytes of a safetensors file, in file order."""
        with safe_open._from_bytes(data, framework=self.framework, device=device) as f:
            return f.read_tensors()

    def load_file(self, filename: Path, device: Any, backend: str) -> Tensors:
        """Every tensor of ``filename``, in file order."""
        with safe_open(filename, framework=self.framework, device=device, backend=backend) as f:
            return f.read_tensors()

    def doc(self, function: str, onto: bool) -> str:
        """The docstring of ``function`` (with an example) in this framework's module."""
        imports, make, values = self.example
        return _DOCS[function].format(
            noun=self.noun,
            saves=self.saves,
            loads=" onto ``device``" if onto else self.loads,
            on=" on ``device``" if onto else "",
            imports=imports,
            zeros=make.format("zeros", 2),
            one=make.format("ones", 1),
            ones=make.format("ones", 2),
            values=values,
        )


_DOCS = {
    "save": """Serialize {noun}{saves} to the bytes of a safetensors file.

Example:
    >>> {imports}
    >>> len(save({{"a": {zeros}}}))
    72
""",
    "save_file": """Save {noun} to ``filename``, atomically (``align`` and ``fsync`` as in
:func:`tensorfile.safetensors.numpy.save_file`).

Example:
    >>> {imports}
    >>> save_file({{"a": {zeros}}}, "model.safetensors")
""",
    "load": """Load {noun}{loads} from the bytes of a safetensors file.

Example:
    >>> {imports}
    >>> load(save({{"a": {one}}}))["a"]{values}
    [1.0]
""",
    "load_file": """Load every tensor of ``filename`` as {noun}{on}, in file order.

Example:
    >>> {imports}
    >>> save_file({{"a": {ones}}}, "model.safetensors")
    >>> load_file("model.safetensors")["a"]{values}
    [1.0, 1.0]
""",
}
"""The four docstrings, filled in by :meth:`NumpyFace.doc`."""


class Save(Protocol):
    """``save`` of a framework module."""

    def __call__(self, tensors: Tensors, metadata: dict[str, str] | None = None) -> bytes: ...


class SaveFile(Protocol):
    """``save_file`` of a framework module."""

    def __call__(
        self,
        tensors: Tensors,
        filename: Path,
        metadata: dict[str, str] | None = None,
        *,
        align: int = 8,
        fsync: bool = False,
    ) -> None: ...


class Load(Protocol):
    """``load`` of a framework module whose tensors live on the cpu."""

    def __call__(self, data: Data) -> Tensors: ...


class LoadFile(Protocol):
    """``load_file`` of a framework module whose tensors live on the cpu."""

    def __call__(self, filename: Path, *, backend: str = "mmap") -> Tensors: ...


class LoadOnto(Protocol):
    """``load`` of a framework module that loads onto a device."""

    def __call__(self, data: Data, device: Any = "cpu") -> Tensors: ...


class LoadFileOnto(Protocol):
    """``load_file`` of a framework module that loads onto a device."""

    def __call__(
        self, filename: Path, device: Any = "cpu", *, backend: str = "mmap"
    ) -> Tensors: ...


def _savers(face: NumpyFace, module: str, onto: bool) -> tuple[Save, SaveFile]:
    def save(tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> bytes:
        return face.save(tensors, metadata)

    def save_file(
        tensors: dict[str, Any],
        filename: str | os.PathLike[str],
        metadata: dict[str, str] | None = None,
        *,
        align: int = 8,
        fsync: bool = False,
    ) -> None:
        face.save_file(tensors, filename, metadata, align, fsync)

    return _placed(save, face, module, onto), _placed(save_file, face, module, onto)


def _placed(function: F, face: NumpyFace, module: str, onto: bool) -> F:
    """``function`` as if written in ``module`` (whose doctests then run its example)."""
    function.__module__ = module
    function.__qualname__ = function.__name__
    function.__doc__ = face.doc(function.__name__, onto)
    return function


def face_functions(face: NumpyFace, module: str) -> tuple[Save, SaveFile, Load, LoadFile]:
    """``save``, ``save_file``, ``load`` and ``load_file`` of the framework module named
    ``module``, for a framework whose tensors are read to the cpu (see the module's example).
    """

    def load(data: bytes | bytearray | memoryview) -> dict[str, Any]:
        return face.load(data, "cpu")

    def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap") -> dict[str, Any]:
        return face.load_file(filename, "cpu", backend)

    loads = _placed(load, face, module, False), _placed(load_file, face, module, False)
    return *_savers(face, module, False), *loads


def face_functions_onto(
    face: NumpyFace, module: str
) -> tuple[Save, SaveFile, LoadOnto, LoadFileOnto]:
    """The same as :func:`face_functions`, for a framework whose ``load`` and ``load_file``
    take a ``device`` (``"cpu"`` by default), as the reference's paddle module does.

    Example:
        >>> face = NumpyFace("np", "list", lambda name, v: np.asarray(v), "lists",
        ...                  ("import numpy as np", "np.{}({})", ".tolist()"))
        >>> load = face_functions_onto(face, __name__)[2]
        >>> load(face.save({"a": [1.5]}, None), device="cpu")["a"].tolist()
        [1.5]
    """

    def load(data: bytes | bytearray | memoryview, device: Any = "cpu") -> dict[str, Any]:
        return face.load(data, device)

    def load_file(
        filename: str | os.PathLike[str], device: Any = "cpu", *, backend: str = "mmap"
    ) -> dict[str, Any]:
        return face.load_file(filename, device, backend)

    loads = _placed(load, face, module, True), _placed(load_file, face, module, True)
    return *_savers(face, module, True), *loads
