"""What the public faces of the safetensors format are made of, named in one place.

The private modules of :mod:`tensorfile.formats.safetensors` hold the implementation
(``_parse``, ``_reader``, ``_writer``, ``_encode``, ``_sharded``...). This module names what
the public faces re-export: :mod:`tensorfile.safetensors` (``safe_open``, ``serialize``,
``serialize_file``, ``deserialize``, ``TensorSpec``, ``StreamWriter``) and its framework
modules (:class:`NumpyFace` and :func:`face_functions` make ``flax``, ``tensorflow``,
``mlx`` and ``paddle``; ``numpy`` and ``torch`` use :func:`prepare_array`, :func:`to_bytes`,
:func:`write_file` and :func:`write_sharded`). The writing side loads when first asked for:
a load imports only the reading side.

Example:
    >>> import numpy as np
    >>> from tensorfile.formats.safetensors.faces import deserialize, prepare_array, to_bytes
    >>> blob = to_bytes([prepare_array("w", np.arange(2, dtype=np.int8))], {"k": "v"})
    >>> [(name, t["dtype"], t["shape"]) for name, t in deserialize(blob)]
    [('w', 'I8', [2])]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorfile.core.extras import lazy_names
from tensorfile.formats.safetensors._load import load_sharded
from tensorfile.formats.safetensors._parse import MAX_HEADER_SIZE
from tensorfile.formats.safetensors._safe_open import (
    PrefetchLoader,
    SafeSlice,
    TensorMeta,
    safe_open,
)
from tensorfile.formats.safetensors._safe_open import _safe_open_handle as safe_open_handle

if TYPE_CHECKING:
    from tensorfile.formats.safetensors._serialize import (
        TensorSpec,
        deserialize,
        serialize,
        serialize_file,
    )
    from tensorfile.formats.safetensors._sharded import write_sharded
    from tensorfile.formats.safetensors._via_numpy import (
        NumpyFace,
        face_functions,
        face_functions_onto,
        numpy_dict,
    )
    from tensorfile.formats.safetensors._writer import (
        Prepared,
        StreamWriter,
        prepare_array,
        to_bytes,
        write_file,
    )

_WRITING = {
    name: f"tensorfile.formats.safetensors.{module}"
    for module, names in {
        "_serialize": ("TensorSpec", "deserialize", "serialize", "serialize_file"),
        "_sharded": ("write_sharded",),
        "_via_numpy": ("NumpyFace", "face_functions", "face_functions_onto", "numpy_dict"),
        "_writer": ("Prepared", "StreamWriter", "prepare_array", "to_bytes", "write_file"),
    }.items()
    for name in names
}
"""The writing side, loaded when first asked for: a load never needs it."""

__getattr__ = lazy_names(__name__, _WRITING)

__all__ = [
    "MAX_HEADER_SIZE",
    "NumpyFace",
    "PrefetchLoader",
    "Prepared",
    "SafeSlice",
    "StreamWriter",
    "TensorMeta",
    "TensorSpec",
    "deserialize",
    "face_functions",
    "face_functions_onto",
    "load_sharded",
    "numpy_dict",
    "prepare_array",
    "safe_open",
    "safe_open_handle",
    "serialize",
    "serialize_file",
    "to_bytes",
    "write_file",
    "write_sharded",
]
