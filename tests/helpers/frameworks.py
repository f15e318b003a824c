"""The optional frameworks (jax, tensorflow, mlx, paddle) in tests.

:func:`require` imports one, or skips with the wheel it needs named. It imports paddle
before tensorflow: paddle 3.3's library crashes the process (SIGSEGV, in protobuf) when it
is loaded after tensorflow 2.21's, and the other order works.

:data:`BRIDGES` describes each framework as the tests see it, written from the frameworks'
own APIs and not from tensorfile's code: how a numpy array becomes one of its arrays and
back (bf16 and F8 go through float32 where the framework cannot take ``ml_dtypes`` arrays:
exact, since every such value is a float32), which safetensors dtypes it has no type for,
and its module names (tensorfile's and the reference's).

:func:`lazy` names a framework at the top of a test module without importing it: ``make
test``'s workers each collect every module, and the frameworks cost seconds and hundreds of
MB each to import, so they are imported by the one worker that runs their tests (the xdist
group ``frameworks`` of tests/conftest.py). :func:`paddle_before_tensorflow` keeps the
import order whoever imports tensorflow (a test, tensorfile's adapter, a doctest).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tensorfile.core import dtypes

NDArray = np.ndarray[Any, Any]

WHEELS = {
    "jax": "jax (pip install 'tensorfile[jax]')",
    "flax": "flax (pip install 'tensorfile[flax]')",
    "tensorflow": "tensorflow-cpu (pip install 'tensorfile[tensorflow]')",
    "mlx": "mlx[cpu] (pip install 'tensorfile[mlx]')",
    "paddle": "paddlepaddle (pip install 'tensorfile[paddle]')",
    "safetensors": "safetensors (the reference, in tensorfile[dev])",
    "h5py": "h5py",
}


def require(module: str) -> ModuleType:
    """``module``, imported; the test is skipped, naming the wheel, when it cannot be."""
    top = module.partition(".")[0]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "No ccache found")  # paddle's, on every import
        if top == "tensorflow" and importlib.util.find_spec("paddle") is not None:
            with contextlib.suppress(ImportError):
                importlib.import_module("paddle")  # first: see the module docstring
        reason = f"needs the {WHEELS.get(top, top)} wheel"
        return pytest.importorskip(module, reason=reason, exc_type=ImportError)


class _Lazy:
    """A module imported by :func:`require` at the first use of one of its public
    attributes."""

    def __init__(self, module: str) -> None:
        self._name = module
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # what pytest's collection asks every object (__test__...)
            raise AttributeError(attr)
        if self._module is None:
            self._module = require(self._name)
        return getattr(self._module, attr)


def lazy(module: str) -> Any:
    """``module`` as :func:`require` gives it, imported at the first use of one of its
    attributes (a test that uses it is skipped, naming the wheel, when it cannot be)."""
    return _Lazy(module)


class _PaddleFirst:
    """A meta path finder that imports paddle (where it is installed) before tensorflow's
    first import, whatever imports it."""

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "tensorflow" and not self.done:
            self.done = True
            if "paddle" not in sys.modules and importlib.util.find_spec("paddle") is not None:
                with warnings.catch_warnings(), contextlib.suppress(ImportError):
                    warnings.filterwarnings("ignore", "No ccache found")
                    importlib.import_module("paddle")
        return None


def paddle_before_tensorflow() -> None:
    """Make any import of tensorflow in this process import paddle first (see the module
    docstring); once per process."""
    if not any(isinstance(f, _PaddleFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _PaddleFirst())  # type: ignore[arg-type]


@dataclass(frozen=True)
class Bridge:
    """One framework, as the tests drive it."""

    framework: str
    """The ``safe_open`` name."""
    module: str
    """What to import to use it."""
    face: str
    """tensorfile's module (``tensorfile.safetensors.X``); the reference's is ``safetensors.X``."""
    lacks: frozenset[str]
    """The safetensors dtypes it has no type for."""
    native: Callable[[NDArray], Any]
    """A numpy array as one of its arrays."""
    numpy: Callable[[Any], NDArray]
    """One of its arrays as a numpy array (dtype and bytes kept)."""
    is_native: Callable[[Any], bool]
    loaded: Callable[[NDArray], Any] | None = None
    """What reading a tensor with these values gives, when not :attr:`native`: the
    reference's conversion (``mx.array`` makes float32 of float64)."""

    def as_loaded(self, arr: NDArray) -> Any:
        return (self.loaded or self.native)(arr)

    @property
    def reference(self) -> str:
        return self.face.replace("tensorfile.", "", 1)

    def load(self) -> Any:
        """The framework's module (skipping when it is absent)."""
        return require(self.module)


def _dt(arr: NDArray) -> dtypes.DType:
    return dtypes.from_numpy(arr.dtype)


# -- tensorflow -----------------------------------------------------------------------------


def _tf_native(arr: NDArray) -> Any:
    return require("tensorflow").convert_to_tensor(arr)


def _tf_numpy(t: Any) -> NDArray:
    return np.asarray(t.numpy())


def _tf_is(t: Any) -> bool:
    return isinstance(t, require("tensorflow").Tensor)


# -- jax ------------------------------------------------------------------------------------


def _jax_native(arr: NDArray) -> Any:
    return require("jax.numpy").asarray(arr)


def _jax_is(a: Any) -> bool:
    return isinstance(a, require("jax").Array)


# -- mlx ------------------------------------------------------------------------------------


def _mx_native(arr: NDArray) -> Any:
    mx = require("mlx.core")
    if arr.dtype == np.float64:
        return mx.array(arr, dtype=mx.float64)  # (mx.array alone makes float32)
    return mx.array(arr)


def _mx_loaded(arr: NDArray) -> Any:
    return require("mlx.core").array(arr) if arr.dtype == np.float64 else _mx_native(arr)


def _mx_numpy(a: Any) -> NDArray:
    mx = require("mlx.core")
    if a.dtype == mx.bfloat16:
        return np.asarray(a.astype(mx.float32)).astype(dtypes.from_safetensors("BF16").numpy)
    return np.asarray(a)


def _mx_is(a: Any) -> bool:
    return isinstance(a, require("mlx.core").array)


# -- paddle ---------------------------------------------------------------------------------


def _pd_native(arr: NDArray) -> Any:
    paddle = require("paddle")
    dt = _dt(arr)
    if dt.name == "BF16" or dt.name.startswith("F8"):
        wide = paddle.to_tensor(arr.astype(np.float32))
        return wide.astype(getattr(paddle, dt.numpy_name))
    return paddle.to_tensor(arr)


def _pd_numpy(t: Any) -> NDArray:
    paddle = require("paddle")
    name = str(t.dtype).rpartition(".")[2]
    if name == "bfloat16" or name.startswith("float8"):
        return t.astype(paddle.float32).numpy().astype(dtypes.from_name(name).numpy)
    return np.asarray(t.numpy())


def _pd_is(t: Any) -> bool:
    return isinstance(t, require("paddle").Tensor)


_F6 = frozenset({"F6_E2M3", "F6_E3M2"})
_F8 = frozenset({"F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})

BRIDGES = {
    "tf": Bridge(
        "tf",
        "tensorflow",
        "tensorfile.safetensors.tensorflow",
        _F6 | {"F8_E8M0"},
        _tf_native,
        _tf_numpy,
        _tf_is,
    ),
    "flax": Bridge(
        "flax", "jax", "tensorfile.safetensors.flax", _F6, _jax_native, np.asarray, _jax_is
    ),
    "mlx": Bridge(
        "mlx",
        "mlx.core",
        "tensorfile.safetensors.mlx",
        _F6 | _F8 | {"F4"},
        _mx_native,
        _mx_numpy,
        _mx_is,
        _mx_loaded,
    ),
    "paddle": Bridge(
        "paddle",
        "paddle",
        "tensorfile.safetensors.paddle",
        _F6 | {"F4", "U16", "U32", "U64", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"},
        _pd_native,
        _pd_numpy,
        _pd_is,
    ),
}
"""Every framework of ``safe_open`` beyond numpy and torch, by its ``safe_open`` name."""


def face(bridge: Bridge) -> ModuleType:
    """tensorfile's module for ``bridge`` (after importing the framework, or skipping)."""
    bridge.load()
    return importlib.import_module(bridge.face)
