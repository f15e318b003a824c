"""Make ``import safetensors`` give tensorfile's drop-in, for code you do not edit.

``transformers``, ``diffusers``, ``huggingface_hub`` and many scripts ``import safetensors``
(and ``safetensors.torch``, ``safetensors.numpy``, ...) themselves. After
:func:`patch_safetensors`, those imports resolve, in this process, to
:mod:`tensorfile.safetensors` and its framework modules: the same names, the same
behaviour, tensorfile's loader underneath. :func:`unpatch_safetensors` undoes it, and
:func:`patched_safetensors` does both around a block.

Patch before the code that imports ``safetensors`` is imported: a module that already did
``from safetensors.torch import load_file`` keeps the function it got (a warning says so
when ``safetensors`` was imported before the patch). A name only the reference has (its
Rust extension, ``safetensors._safetensors_rust``) is an ``ImportError`` while patched.
Package metadata (``importlib.metadata.version("safetensors")``) is the installed
reference's, so version checks keep passing.

For programs you do not even start yourself (a serving command, a notebook kernel), set
``TENSORFILE_PATCH_SAFETENSORS=1`` in their environment: the import hook the package
installs (``tensorfile-patch.pth`` in site-packages, run by Python's ``site`` at every
interpreter start) then calls :func:`patch_from_environment`, which patches before any of
the program's code runs. Unset or switched off (``0``, ``false``, ``no``, ``off``), the hook
costs one environment lookup and imports nothing. Switched on, it runs
:func:`tensorfile._hook.run` (the hook's logic, in the package), which loads this module
alone (the standard library only: not the ``tensorfile`` package, not numpy); the rest of
tensorfile is imported when the program first imports ``safetensors``. The hook never
stops an interpreter from starting (a failure is one line on stderr).

Example:
    >>> from tensorfile.patching import patched_safetensors
    >>> with patched_safetensors():
    ...     import safetensors.numpy
    ...     safetensors.numpy.__name__
    'tensorfile.safetensors.numpy'
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import ModuleType

__all__ = [
    "ENV",
    "patch_from_environment",
    "patch_safetensors",
    "patched_safetensors",
    "unpatch_safetensors",
]

ENV = "TENSORFILE_PATCH_SAFETENSORS"
"""The environment variable the import hook reads: ``1`` (``true``, ``yes``, ``on``) patches
every interpreter started with it; ``0`` (``false``, ``no``, ``off``) or unset does not."""
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")  # tensorfile-patch.pth spells these out too

# This module imports a few small modules of the standard library only (not importlib.abc,
# which pulls in pathlib and tempfile): the import hook loads it at interpreter start
# without the tensorfile package (whose import pulls in numpy), which the finder imports
# when ``safetensors`` is first imported. The finder and the loader follow the protocols.

_NAME = "safetensors"
_TARGET = "tensorfile." + _NAME
_lock = threading.RLock()


class _Loader:
    """Gives the tensorfile module ``real`` as the module asked for."""

    def __init__(self, real: str) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.real)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the tensorfile module is imported already."""

    def load_module(self, fullname: str) -> ModuleType:
        """The legacy protocol (Python calls the two above instead)."""
        module = sys.modules[fullname] = importlib.import_module(self.real)
        return module


class _Finder:
    """Finds ``safetensors`` and ``safetensors.<x>`` as ``tensorfile.safetensors(.<x>)``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _NAME and not fullname.startswith(_NAME + "."):
            return None
        real = _TARGET + fullname[len(_NAME) :]
        try:
            found = importlib.util.find_spec(real)
        except ImportError:
            found = None
        if found is None:  # a module only the reference has: not found while patched
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (safetensors is patched to tensorfile's "
                "drop-in, which has no such module)",
                name=fullname,
            )
        return importlib.util.spec_from_loader(
            fullname, _Loader(real), is_package=found.submodule_search_locations is not None
        )


_finder: _Finder | None = None
_saved: dict[str, ModuleType] = {}


def _ours() -> list[str]:
    return [n for n in sys.modules if n == _NAME or n.startswith(_NAME + ".")]


def patch_safetensors() -> None:
    """Make ``import safetensors`` (and its submodules) resolve to tensorfile's drop-in in
    this process, until :func:`unpatch_safetensors`. Calling it twice is harmless.

    Example:
        >>> import tensorfile
        >>> tensorfile.patch_safetensors()
        >>> import safetensors.torch
        >>> safetensors.torch.__name__
        'tensorfile.safetensors.torch'
        >>> tensorfile.unpatch_safetensors()
    """
    global _finder
    with _lock:
        if _finder is not None:
            return
        imported = [n for n in _ours() if not sys.modules[n].__name__.startswith(_TARGET)]
        if imported:
            warnings.warn(
                "safetensors was imported before patch_safetensors(): modules that already "
                "took names from it keep the reference's; patch before importing them",
                stacklevel=2,
            )
        for name in imported:
            _saved[name] = sys.modules.pop(name)
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)


def unpatch_safetensors() -> None:
    """Undo :func:`patch_safetensors`: ``import safetensors`` gives the installed package
    again (modules imported while patched keep what they took)."""
    global _finder
    with _lock:
        if _finder is None:
            return
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(_finder)
        _finder = None
        for name in _ours():
            if sys.modules[name].__name__.startswith(_TARGET):
                del sys.modules[name]
        sys.modules.update(_saved)
        _saved.clear()


@contextlib.contextmanager
def patched_safetensors() -> Iterator[None]:
    """:func:`patch_safetensors` around a block (undone after it, also on an error; a
    process patched before the block stays patched).

    Example:
        >>> from tensorfile.patching import patched_safetensors
        >>> with patched_safetensors():
        ...     from safetensors import safe_open
        >>> safe_open.__module__.startswith("tensorfile")
        True
    """
    with _lock:
        outer = _finder is not None  # patched already: stays patched after the block
        patch_safetensors()
    try:
        yield
    finally:
        if not outer:
            unpatch_safetensors()


def patch_from_environment() -> bool:
    """Call :func:`patch_safetensors` when :data:`ENV` says so; return whether it did.

    The package's import hook calls this at interpreter start when the variable is set. It
    never raises: a value it does not know, or a failure to patch, is one line on stderr
    and no patch (a ``KeyboardInterrupt`` still goes through).

    Example:
        >>> import os
        >>> os.environ.pop(ENV, None) and None
        >>> patch_from_environment()
        False
    """
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    try:
        if value not in _ON:
            raise ValueError(f"{value!r} is not one of 1, true, yes, on (or 0, false, no, off)")
        patch_safetensors()
    except Exception as exc:
        _warn(f"{ENV} is set but safetensors was not patched: {type(exc).__name__}: {exc}")
        return False
    return True


def _warn(text: str) -> None:
    """One line on stderr (the ``warnings`` machinery may not be set up at startup)."""
    try:
        sys.stderr.write(f"tensorfile: {' '.join(text.split())}\n")
    except Exception:  # no stderr at all (pythonw)
        pass
