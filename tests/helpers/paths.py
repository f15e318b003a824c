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


def deep_folder(path: str | os.PathLike[str], depth: int = 1200) -> None:
    """A folder at ``path`` nested ``depth`` levels deep (``path/d/d/...``, made relative to
    descriptors: no path-length limit), an empty file ``inside`` at the bottom: more levels
    than Python's recursion limit (what a hostile review planted in a cache folder).

    >>> import tempfile
    >>> top = Path(tempfile.mkdtemp()) / "x"
    >>> deep_folder(top, 3); sorted(str(p.relative_to(top)) for p in top.rglob("*"))
    ['d', 'd/d', 'd/d/d', 'd/d/d/inside']
    """
    os.mkdir(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open("inside", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    finally:
        os.close(fd)
