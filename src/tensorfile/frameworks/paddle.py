"""The paddle bridge (``framework="paddle"``): paddle tensors from numpy, and back.

paddle is imported when an adapter is made or a tensor is saved, not before. A file's
tensors become ``paddle.to_tensor`` of their numpy arrays on the chosen device (bf16 and F8
through a same-width integer tensor viewed as the paddle type). Devices are named as in
torch or in paddle: ``"cpu"``, ``"cuda"``/``"gpu"``, ``"cuda:1"``/``"gpu:1"``, an index,
``"xpu:0"``, a custom device type, or a paddle place; one this paddle cannot use is refused
before anything is read. The dtypes paddle has no tensors of (U16, U32, U64, F8_E8M0, the
FNUZ F8s, F6, F4) are refused by name; the reference reads U16 tensors as bf16 instead.

paddle 3.3 crashes when it is imported after tensorflow 2.21 in one process: import paddle
first when both are used (this holds for :mod:`tensorfile.safetensors.paddle` and
:mod:`tensorfile.frameworks.tensorflow` too).

Example:
    >>> import numpy as np, paddle
    >>> from tensorfile.core import dtypes
    >>> fw = PaddleFramework(paddle.CPUPlace())
    >>> fw.device, fw.convert(np.arange(3, dtype=np.int8), dtypes.from_numpy(np.int8)).tolist()
    ('cpu', [0, 1, 2])
    >>> fw.lacks(dtypes.from_safetensors("U32"))
    'paddle has no uint32 kernels'
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, UnsupportedError
from ..core.reader import brief
from ._base import ArrayFramework, import_framework, refuse_type, saved_dtype, saved_values

__all__ = ["PaddleFramework", "to_numpy"]

__doctest_requires__ = ("paddle",)

_NO_KERNELS = frozenset({"U16", "U32", "U64"})
"""Types paddle names but cannot make tensors of (paddle's ``uint16`` is its old bf16)."""

_VIEWED = {1: np.uint8, 2: np.int16}
"""Same-width integer types that carry bf16 and F8 bit patterns into paddle."""

_DEVICE = re.compile(r"([a-z_]+)(?::(\d+))?")


class PaddleFramework(ArrayFramework):
    """Read tensors as paddle tensors (through numpy), on any device paddle has."""

    name = "paddle"
    module = "paddle"
    extra = "paddle"

    def place(self, device: Any) -> str:
        """paddle's name of ``device`` (``"cpu"``, ``"gpu:0"``...), checked for this paddle."""
        paddle = self.fw
        shown = brief(device)
        if device is None or isinstance(device, paddle.CPUPlace):
            return "cpu"
        if isinstance(device, paddle.CUDAPlace):
            device = f"gpu:{device.get_device_id()}"
        if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
            kind, index = "gpu", device
        else:
            m = _DEVICE.fullmatch(device) if isinstance(device, str) else None
            if m is None:
                raise InvalidArgumentError(f"device {shown} is not a paddle device")
            kind, index = m[1], int(m[2] or 0)
        if kind == "cpu" and index == 0:
            return "cpu"
        kind = "gpu" if kind == "cuda" else kind
        if kind == "gpu":
            usable = paddle.device.is_compiled_with_cuda() and index < int(
                paddle.device.cuda.device_count()
            )
        elif kind == "xpu":
            usable = paddle.device.is_compiled_with_xpu()
        elif kind in paddle.device.get_all_custom_device_type():
            usable = True
        else:
            raise InvalidArgumentError(f"device {shown} is not a paddle device")
        if not usable:
            raise UnsupportedError(
                f"device {shown} is not available to this paddle {paddle.__version__}"
            )
        return f"{kind}:{index}"

    def lacks(self, dt: DType) -> str | None:
        if dt.name in _NO_KERNELS:
            return f"paddle has no {dt.numpy_name} kernels"
        if not isinstance(getattr(self.fw, dt.numpy_name, None), self.fw.dtype):
            return f"paddle has no {dt.numpy_name} dtype"
        return None

    def from_numpy(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        paddle = self.fw
        if dt.name == "BF16" or dt.name.startswith("F8"):
            ints = paddle.to_tensor(arr.view(_VIEWED[dt.itemsize]), place=self.device)
            return ints.view(getattr(paddle, dt.numpy_name))
        return paddle.to_tensor(arr, place=self.device)


def to_numpy(name: str, value: Any) -> np.ndarray[Any, Any]:
    """The values of a paddle tensor (from any device, any strides) as a numpy array, for
    writing; tensorfile errors for anything else.

    Example:
        >>> import paddle
        >>> to_numpy("w", paddle.ones((2, 3), dtype=paddle.bfloat16)).dtype
        dtype(bfloat16)
    """
    paddle = import_framework("paddle", "paddle", "paddle")
    if not isinstance(value, paddle.Tensor):
        refuse_type(name, "paddle.Tensor", value)
    if value.is_sparse():
        raise InvalidArgumentError(
            f"You are trying to save a sparse tensor: `{name}` which safetensors does not "
            "support. Make it dense with `.to_dense()` first."
        )
    dt = saved_dtype(name, "paddle", str(value.dtype).rpartition(".")[2])
    return saved_values(name, "paddle", dt, lambda: value.numpy())
