"""Framework adapters: how a reader's tensors become numpy, torch, jax, tensorflow, mlx or
paddle arrays.

This package is the one place that knows the frameworks. :data:`_ALIASES` is the only table
of framework names (``"np"``, ``"pt"``, ``"flax"``, ``"tf"``...); :func:`get_framework` turns
a name into an adapter; :func:`f4_shape` is the one statement of how torch shapes F4
tensors. Each adapter reads whole tensors (torch tensors are filled in place; the others are
made from numpy arrays, see :class:`~tensorfile.frameworks._base.ArrayFramework`), hands out
zero-copy views where the framework can, converts numpy slices, and refuses by name the
dtypes its framework lacks. One module per framework bridges it both ways (``torch``,
``jax``, ``tensorflow``, ``mlx``, ``paddle``), and ``torch_stream`` carries torch tensors to
an accelerator through a small ring of pinned host buffers; each, and its framework, is
imported only when asked for.

Example:
    >>> from tensorfile.safetensors.numpy import save
    >>> import numpy as np, tensorfile
    >>> fw = get_framework("numpy")
    >>> fw.name, framework_name("pytorch"), framework_name("flax"), framework_name("tf")
    ('numpy', 'torch', 'jax', 'tensorflow')
    >>> with tensorfile.open(save({"a": np.arange(3, dtype=np.int8)})) as r:
    ...     fw.read(r, ["a"])[0].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, UnsupportedError
from ..core.extras import require
from ..core.reader import Reader, brief
from ._base import Framework
from ._f4 import f4_shape

__all__ = ["Framework", "check_torch_device", "f4_shape", "framework_name", "get_framework"]

_ALIASES = {
    "np": "numpy",
    "numpy": "numpy",
    "pt": "torch",
    "torch": "torch",
    "pytorch": "torch",
    "jax": "jax",
    "flax": "jax",
    "tf": "tensorflow",
    "tensorflow": "tensorflow",
    "mlx": "mlx",
    "paddle": "paddle",
}
"""Every accepted framework name, mapped to its canonical name (the only such table)."""


def framework_name(name: str) -> str:
    """The canonical name (``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"``, ``"mlx"``
    or ``"paddle"``) of a framework alias.

    Raises :class:`~tensorfile.errors.UnsupportedError` for an unknown name.
    """
    key = _ALIASES.get(str(name).lower())
    if key is None:
        raise UnsupportedError(
            f"framework {brief(name)} is not supported; use one of: np (numpy), pt (torch), "
            "jax/flax, tf (tensorflow), mlx, paddle"
        )
    return key


class TorchFramework(Framework):
    """Read tensors into torch tensors: on the cpu filled in place; on any other device
    (``"cuda:0"``...) streamed through a small ring of pinned host buffers
    (:func:`~tensorfile.frameworks.torch_stream.stream_read`), so host memory holds the
    ring, not the model. ``stream=True`` takes the ring on the cpu too (``False``: never)."""

    name = "torch"

    def __init__(self, device: Any = "cpu", *, stream: bool | None = None) -> None:
        require("torch", "framework 'pt'", extra="torch")
        check_torch_device(device)
        self.device = device
        self.stream = stream

    def streams(self) -> bool:
        """Whether :meth:`read` goes through the ring of host buffers."""
        if self.stream is not None:
            return self.stream
        import torch

        return torch.device(self.device).type not in ("cpu", "meta")

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        if self.streams():
            from .torch_stream import stream_read

            return stream_read(reader, names, self.device)
        from .torch import torch_allocator

        return reader.read_into(names, torch_allocator(self.device))

    def view(self, reader: Reader, names: list[str]) -> list[Any]:
        """Torch tensors over the mapped file (a private mapping: writes never reach it)."""
        from .torch import torch_view

        if str(self.device) != "cpu":
            raise InvalidArgumentError("copy=False maps the file: it needs device='cpu'")
        return [torch_view(reader, name) for name in names]

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        from .torch import _to, from_numpy

        return _to(from_numpy(arr, dt), self.device)


def check_torch_device(device: Any) -> None:
    """Refuse a device torch does not know (:class:`InvalidArgumentError`) or that this
    machine does not have (:class:`UnsupportedError`), before any tensor is made.

    Example:
        >>> check_torch_device("cpu")
        >>> check_torch_device("nonsense")
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidArgumentError: device 'nonsense' is not a torch device...
    """
    import torch

    shown = brief(device)
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
            # an accelerator's index, on a machine without one
            raise UnsupportedError(f"device {shown} is not available: {exc}") from None
        raise InvalidArgumentError(f"device {shown} is not a torch device: {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(f"device {shown} is not a torch device: {exc}") from None
    if dev.type in ("cpu", "meta"):
        return
    backend: Any = getattr(torch, dev.type, None)
    try:
        available = backend is not None and bool(backend.is_available())
        if available and dev.index is not None:
            available = dev.index < int(backend.device_count())
    except Exception:  # a backend module without these functions, or one that fails
        available = False
    if not available:
        raise UnsupportedError(f"device {shown} is not available to this torch {torch.__version__}")


def _adapter(name: str) -> type[Framework]:
    """The adapter class of a canonical framework name; its module is imported now."""
    if name == "torch":
        return TorchFramework
    if name == "jax":
        from .jax import JaxFramework

        return JaxFramework
    if name == "tensorflow":
        from .tensorflow import TensorflowFramework

        return TensorflowFramework
    if name == "mlx":
        from .mlx import MlxFramework

        return MlxFramework
    if name == "paddle":
        from .paddle import PaddleFramework

        return PaddleFramework
    return Framework


def get_framework(name: str, device: Any = "cpu") -> Framework:
    """The adapter for ``name`` (``np``, ``pt``, ``jax``, ``tf``, ``mlx``, ``paddle``...).

    :class:`~tensorfile.errors.UnsupportedError` when the name is unknown or its framework
    is not installed; the device is checked here, before any file is opened.

    Example:
        >>> get_framework("np").name
        'numpy'
    """
    return _adapter(framework_name(name))(device)
