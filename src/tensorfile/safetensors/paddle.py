"""``safetensors.paddle``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

paddle tensors from any device are saved through numpy (the reference's bytes, to the byte)
and loaded with ``safe_open(framework="paddle")`` onto ``device`` (``"cpu"``,
``"cuda"``/``"gpu:0"``...; one this paddle cannot use is refused before anything is read).
Unlike the reference, strided tensors are saved by value (the reference refuses them),
zero-size tensors save and load, and the dtypes paddle lacks (U16, U32, U64, F8_E8M0, the
FNUZ F8s, F6, F4) are refused by name (:class:`~tensorfile.errors.UnsupportedError`) where
the reference reads U16 as bf16. paddle is imported on first use (before tensorflow, when
both are used: see :mod:`tensorfile.frameworks.paddle`).

Example:
    >>> import paddle
    >>> from tensorfile.safetensors.paddle import load, save
    >>> blob = save({"x": paddle.arange(3, dtype=paddle.int32)})
    >>> load(blob, device="cpu")["x"].tolist()
    [0, 1, 2]
"""

from tensorfile.formats.safetensors.faces import NumpyFace, face_functions_onto

from ..frameworks.paddle import to_numpy

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("paddle",)

_FACE = NumpyFace(
    framework="paddle",
    kind="paddle.Tensor",
    to_numpy=to_numpy,
    noun="paddle tensors",
    example=("import paddle", "paddle.{}([{}])", ".tolist()"),
    saves=" (from any device)",
)

save, save_file, load, load_file = face_functions_onto(_FACE, __name__)
