"""A drop-in replacement for the ``safetensors`` package.

Replace ``safetensors`` by ``tensorfile.safetensors`` in an import and the code runs
unchanged: ``safe_open``, ``serialize``, ``serialize_file``, ``deserialize``,
``SafetensorError`` and ``TensorSpec`` here; ``save``/``save_file``/``load``/``load_file``
in :mod:`tensorfile.safetensors.numpy` and :mod:`tensorfile.safetensors.torch`.

Code that reaches past the four functions works too: ``_safe_open_handle`` (``safe_open``
over a file object you opened, including fsspec and object-store files, which the
reference cannot read), the torch module's ``_find_shared_tensors``, ``_is_complete``,
``_remove_duplicate_names`` and ``_end_ptr``, and the reference's exception types and words
where code matches on them (a missing file is a ``FileNotFoundError`` saying "No such file
or directory: ...", a bad type a ``TypeError``, a refused slice the reference's message).
The reference's own test suite passes through an import swap (``tools/reference_suite.py``).

What differs: headers are validated more strictly (duplicate names, a header that does not
start with ``{``), every error is a :class:`SafetensorError` subclass that names the rule,
the tensor and the byte offset; loading copies straight into new arrays (faster); writes are
atomic; strided numpy arrays are saved by value; metadata keys are written sorted;
``get_slice`` also takes steps, ``None`` and ``...`` (the reference ignores steps).

``safe_open(...).prefetch(plan)`` is safetensors 0.9's plan of the tensors and rows to read
ahead (its pull request #848, not yet released), on every framework and device; a plan value
may also be any basic index or :class:`tensorfile.distributed.Intervals` (several intervals of
one dimension, for fused weights split across ranks).

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors import safe_open
    >>> from tensorfile.safetensors.numpy import save_file
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, path, {"k": "v"})
    >>> with safe_open(path, framework="np") as f:
    ...     f.keys(), f.metadata(), f.get_slice("w")[:, 1].tolist()
    (['w'], {'k': 'v'}, [1.0, 4.0])
"""

from typing import TYPE_CHECKING

from tensorfile.formats.safetensors.faces import (
    MAX_HEADER_SIZE,
    PrefetchLoader,
    SafeSlice,  # noqa: F401 (what get_slice returns, named here as in the reference)
    TensorMeta,
    safe_open,
)
from tensorfile.formats.safetensors.faces import (  # noqa: F401 (the reference's private name)
    safe_open_handle as _safe_open_handle,
)

from ..core.errors import SafetensorError
from ..core.extras import lazy_names

if TYPE_CHECKING:
    from tensorfile.formats.safetensors.faces import (
        StreamWriter,
        TensorSpec,
        deserialize,
        serialize,
        serialize_file,
    )

# the writing side loads when first asked for: load_file never needs it
__getattr__ = lazy_names(
    __name__,
    dict.fromkeys(
        ("StreamWriter", "TensorSpec", "deserialize", "serialize", "serialize_file"),
        "tensorfile.formats.safetensors.faces",
    ),
)


__all__ = [
    "MAX_HEADER_SIZE",
    "PrefetchLoader",
    "SafetensorError",
    "StreamWriter",
    "TensorMeta",
    "TensorSpec",
    "__version__",
    "deserialize",
    "safe_open",
    "serialize",
    "serialize_file",
]

__version__ = "0.8.0"
"""The version of the reference API this module is a drop-in for."""
