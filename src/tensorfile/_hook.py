"""What ``tensorfile-patch.pth`` runs at interpreter start when ``TENSORFILE_PATCH_SAFETENSORS``
is switched on: everything of the import hook but the switch itself.

The ``.pth`` line is copied into site-packages once, at install time (an editable install
included), so it holds only what cannot live in the package: it reads the variable and,
switched off (unset, ``0``, ``false``, ``no``, ``off``), stops there, importing nothing.
Switched on, it finds this file in the ``tensorfile`` package the interpreter would import
(without importing the package, whose import brings numpy) and calls :func:`run`. The rest
is here, in the package, so an editable install follows a change to it from the source.

:func:`run` loads :mod:`tensorfile.patching` alone, as ``tensorfile.patching`` (the module
the package later has), and calls :func:`~tensorfile.patching.patch_from_environment`. It
never stops an interpreter from starting: a failure is one line on stderr and no patch.

Example:
    >>> import contextlib, sys
    >>> with contextlib.redirect_stderr(sys.stdout):
    ...     failed(ValueError("no such  value"))  # doctest: +ELLIPSIS
    tensorfile: TENSORFILE_PATCH_SAFETENSORS is set but ... not patched: ValueError: no such value
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["run"]

_NAME = "tensorfile.patching"


def run() -> None:
    """Patch ``safetensors`` as the environment asks (the ``.pth`` line's call, once per
    interpreter: site runs the line of a folder it finds twice, ``lib`` and ``lib64``, twice);
    a failure is one line on stderr."""
    try:
        _patch()
    except Exception as exc:
        sys.modules.pop(_NAME, None)
        failed(exc)


def failed(exc: BaseException) -> None:
    """The one line on stderr of a hook that did not patch (the ``.pth`` line writes the
    same when it cannot load this module)."""
    text = " ".join(str(exc).split())
    sys.stderr.write(
        "tensorfile: TENSORFILE_PATCH_SAFETENSORS is set but safetensors was not patched: "
        f"{type(exc).__name__}: {text}\n"
    )


def _patch() -> None:
    """Load ``patching.py`` beside this file as ``tensorfile.patching`` and patch."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patching.py")
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = sys.modules[_NAME] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.patch_from_environment()
