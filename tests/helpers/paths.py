"""Whether a file belongs to a folder, decided by the folders themselves, never by a word
in the path: a checkout is often named ``tensorfile`` (the default name of a clone), so the
reference's ``safetensors`` may live in ``tensorfile/.venv/lib/...`` (issue 36)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType


def package_folder(module: ModuleType) -> Path:
    """The folder of ``module``'s package (``tensorfile`` -> ``.../src/tensorfile``), resolved.

    >>> import tensorfile
    >>> package_folder(tensorfile).name
    'tensorfile'
    """
    assert module.__file__ is not None, module
    return Path(module.__file__).resolve().parent


def is_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or lies under it, both resolved (links followed).

    >>> is_inside("/x/tensorfile/.venv/lib/safetensors/numpy.py", "/x/tensorfile/src/tensorfile")
    False
    """
    inner, outer = Path(path).resolve(), Path(folder).resolve()
    return inner == outer or outer in inner.parents
