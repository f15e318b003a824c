"""``safetensors.tensorflow``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

Tensors and variables are saved through numpy (the bytes are those of
:mod:`tensorfile.safetensors.numpy`, to the byte) and loaded on the cpu with
``safe_open(framework="tf")``. The dtypes tensorflow lacks (F8_E8M0, F6) are refused by name
(:class:`~tensorfile.errors.UnsupportedError`), sparse and ragged tensors with a hint to make
them dense. Unlike the reference, saving leaves your dict as it was (the reference swaps its
values for numpy arrays). tensorflow is imported on first use.

Example:
    >>> import tensorflow as tf
    >>> from tensorfile.safetensors.tensorflow import load, save
    >>> load(save({"x": tf.range(3, dtype=tf.int32)}))["x"].numpy().tolist()
    [0, 1, 2]
"""

from tensorfile.formats.safetensors.faces import NumpyFace, face_functions

from ..frameworks.tensorflow import to_numpy

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("tensorflow",)

_FACE = NumpyFace(
    framework="tf",
    kind="tf.Tensor",
    to_numpy=to_numpy,
    noun="tensorflow tensors",
    example=("import tensorflow as tf", "tf.{}({})", ".numpy().tolist()"),
    saves=" (or variables)",
    loads=" (on the cpu)",
)

save, save_file, load, load_file = face_functions(_FACE, __name__)
