"""``safetensors.mlx``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

mlx (or numpy) arrays go through numpy, so the file is the one
:mod:`tensorfile.safetensors.numpy` writes, and ``safe_open(framework="mlx")`` reads them
back; F64 tensors load as float32 arrays there, mlx's rule for numpy input, as in the
reference. bf16 arrays, which the reference cannot save (an mlx limitation), save and load
through their bit patterns. The dtypes mlx lacks (F8, F6, F4) are refused by name
(:class:`~tensorfile.errors.UnsupportedError`). mlx is imported on first use.

Example:
    >>> import mlx.core as mx
    >>> from tensorfile.safetensors import mlx as st_mlx
    >>> blob = st_mlx.save({"x": mx.array([0.5, 2.0], dtype=mx.bfloat16)})
    >>> x = st_mlx.load(blob)["x"]
    >>> x.dtype, x.tolist()
    (mlx.core.bfloat16, [0.5, 2.0])
"""

from tensorfile.formats.safetensors.faces import NumpyFace, face_functions

from ..frameworks.mlx import to_numpy

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("mlx.core",)

_FACE = NumpyFace(
    framework="mlx",
    kind="mx.array",
    to_numpy=to_numpy,
    noun="mlx arrays",
    example=("import mlx.core as mx", "mx.{}({})", ".tolist()"),
)

save, save_file, load, load_file = face_functions(_FACE, __name__)
