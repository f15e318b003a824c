"""``safetensors.flax``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

Only jax is needed, not flax: jax arrays (and numpy arrays, as in the reference) are saved
through numpy, byte for byte as :mod:`tensorfile.safetensors.numpy` saves them, and come
back from ``safe_open(framework="flax")`` under jax's rules: unless ``jax_enable_x64`` is on,
64-bit tensors load as 32-bit arrays, as in the reference. A nested dict of parameters is
refused with a hint to flatten it (its names then hold the path), F6 tensors by name
(:class:`~tensorfile.errors.UnsupportedError`); the dict you save is left as it was. jax is
imported on first use.

Example:
    >>> import jax.numpy as jnp
    >>> from tensorfile.safetensors.flax import load, save
    >>> params = {"dense/kernel": jnp.ones((2, 3)), "dense/bias": jnp.zeros(3)}
    >>> {name: array.shape for name, array in load(save(params)).items()}
    {'dense/bias': (3,), 'dense/kernel': (2, 3)}
"""

from tensorfile.formats.safetensors.faces import NumpyFace, face_functions

from ..frameworks.jax import to_numpy

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("jax",)

_FACE = NumpyFace(
    framework="flax",
    kind="Array",
    to_numpy=to_numpy,
    noun="jax arrays",
    example=("import jax.numpy as jnp", "jnp.{}({})", ".tolist()"),
    loads=" (on the cpu)",
)

save, save_file, load, load_file = face_functions(_FACE, __name__)
