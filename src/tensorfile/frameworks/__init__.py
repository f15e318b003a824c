"""Framework adapters: how a reader's tensors become numpy, torch or jax arrays.

This package is the one place that knows the frameworks. :data:`_ALIASES` is the only table
of framework names (``"np"``, ``"pt"``, ``"flax"``...); :func:`get_framework` turns a name
into an adapter; :func:`f4_shape` is the one statement of how torch shapes F4 tensors. Each
adapter reads whole tensors with an allocator of its own (torch tensors are filled in
place), hands out zero-copy views where the framework can, and converts numpy slices.
Framework modules are imported only when asked for; the torch bridge itself is
:mod:`tensorfile.frameworks.torch`.

Example:
    >>> from tensorfile.safetensors.numpy import save
    >>> import numpy as np, tensorfile
    >>> fw = get_framework("numpy")
    >>> fw.name, framework_name("pytorch"), framework_name("flax")
    ('numpy', 'torch', 'jax')
    >>> with tensorfile.open(save({"a": np.arange(3, dtype=np.int8)})) as r:
    ...     fw.read(r, ["a"])[0].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, UnsupportedError
from ..core.reader import Reader, brief, numpy_allocator
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
}
"""Every accepted framework name, mapped to its canonical name (the only such table)."""


def framework_name(name: str) -> str:
    """The canonical name (``"numpy"``, ``"torch"`` or ``"jax"``) of a framework alias.

    Raises :class:`~tensorfile.errors.UnsupportedError` for an unknown name.
    """
    key = _ALIASES.get(str(name).lower())
    if key is None:
        raise UnsupportedError(
            f"framework {name!r} is not supported; use one of: np (numpy), pt (torch), jax"
        )
    return key


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


class TorchFramework(Framework):
    """Read tensors into torch tensors, filled in place."""

    name = "torch"

    def __init__(self, device: Any = "cpu") -> None:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise UnsupportedError(
                "framework 'pt' needs torch: pip install tensorfile[torch]"
            ) from exc
        check_torch_device(device)
        self.device = device

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
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


class JaxFramework(Framework):
    """Read tensors as jax arrays (through numpy)."""

    name = "jax"

    def __init__(self, device: Any = "cpu") -> None:
        try:
            import jax  # noqa: F401
        except ImportError as exc:
            raise UnsupportedError("framework 'jax' needs jax installed") from exc
        self.device = device

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        import jax.numpy as jnp

        return [jnp.asarray(a) for a in super().read(reader, names)]

    def view(self, reader: Reader, names: list[str]) -> list[Any]:
        """jax arrays made from views of the mapped file (jax copies them into its own
        buffers, so this is one copy, not two)."""
        import jax.numpy as jnp

        return [jnp.asarray(a) for a in super().view(reader, names)]

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(arr)


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


_ADAPTERS: dict[str, type[Framework]] = {
    "numpy": Framework,
    "torch": TorchFramework,
    "jax": JaxFramework,
}


def get_framework(name: str, device: Any = "cpu") -> Framework:
    """The adapter for ``name`` (``np``, ``pt``, ``jax``, ...)."""
    return _ADAPTERS[framework_name(name)](device)
