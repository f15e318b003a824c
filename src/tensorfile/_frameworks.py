"""Framework adapters: how a reader's tensors become numpy, torch or jax arrays.

Each adapter reads whole tensors with an allocator of its own (torch tensors are filled in
place) and converts numpy slices. Framework modules are imported only when asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import DType
from .errors import InvalidArgumentError, UnsupportedError
from .reader import Reader, numpy_allocator

__all__ = ["Framework", "get_framework"]

_ALIASES = {
    "np": "numpy",
    "numpy": "numpy",
    "pt": "torch",
    "torch": "torch",
    "pytorch": "torch",
    "jax": "jax",
    "flax": "jax",
}


class Framework:
    """Read tensors as numpy arrays (the base adapter)."""

    name = "numpy"

    def __init__(self, device: Any = "cpu") -> None:
        if str(device) != "cpu":
            raise InvalidArgumentError(f"numpy arrays live on the cpu; device={device!r}")
        self.device = device

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        """Owned arrays of ``names``."""
        return reader.read_into(names, numpy_allocator)

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
        self.device = device

    def read(self, reader: Reader, names: list[str]) -> list[Any]:
        from ._torch import torch_allocator

        return reader.read_into(names, torch_allocator(self.device))

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        from ._torch import _to, from_numpy

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

    def convert(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(arr)


_ADAPTERS: dict[str, type[Framework]] = {
    "numpy": Framework,
    "torch": TorchFramework,
    "jax": JaxFramework,
}


def get_framework(name: str, device: Any = "cpu") -> Framework:
    """The adapter for ``name`` (``np``, ``pt``, ``jax``, ...)."""
    key = _ALIASES.get(str(name).lower())
    if key is None:
        raise UnsupportedError(
            f"framework {name!r} is not supported; use one of: np (numpy), pt (torch), jax"
        )
    return _ADAPTERS[key](device)
