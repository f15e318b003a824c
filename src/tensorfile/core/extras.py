"""Optional dependencies: the one place that turns a missing package into a message that
says what to install.

tensorfile's plain install needs numpy only; torch, pyarrow, fsspec, jax and the others come
with extras (``pip install 'tensorfile[torch]'``, see ``pyproject.toml``). Every call site
that needs one imports it through :func:`require`, so a plain install gets an
:class:`~tensorfile.errors.UnsupportedError` naming the package and the extra, never a bare
``ModuleNotFoundError`` (which the CLI would report as an internal error).

:func:`needing` does the same around an import statement (``from .torch import
TorchMap``), so the names it imports keep their types.

Example:
    >>> require("numpy", "reading arrays", extra="core").__name__
    'numpy'
    >>> require("no_such_package", "reading a pickle", extra="torch")
    Traceback (most recent call last):
    ...
    tensorfile.core.errors.UnsupportedError: reading a pickle needs no_such_package, which \
is not installed: pip install 'tensorfile[torch]'
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from .errors import UnsupportedError

__all__ = ["install_hint", "missing", "needing", "require"]


def install_hint(*, extra: str | None = None, package: str | None = None) -> str:
    """What to run to get an optional dependency: the tensorfile ``extra`` that installs it,
    else the ``package`` itself (one not in any extra, such as ``gguf``).

    Example:
        >>> install_hint(extra="dataset"), install_hint(package="gguf")
        ("pip install 'tensorfile[dataset]'", 'pip install gguf')
    """
    if extra is not None:
        return f"pip install 'tensorfile[{extra}]'"
    return f"pip install {package}"


def missing(
    what: str, name: str, *, extra: str | None = None, package: str | None = None
) -> UnsupportedError:
    """The error for ``what`` (``"ds.to_torch()"``), which needs the package ``name`` that is
    not installed (raise it ``from`` the ImportError)."""
    hint = install_hint(extra=extra, package=package or name)
    return UnsupportedError(f"{what} needs {name}, which is not installed: {hint}")


@contextmanager
def needing(what: str, *, extra: str | None = None, package: str | None = None) -> Iterator[None]:
    """Turn an ImportError of a package missing in the block into the
    :class:`~tensorfile.errors.UnsupportedError` that names it and what installs it
    (``extra``, else ``package``); a missing module of tensorfile's own is a bug, raised as
    it is.

    Example:
        >>> try:
        ...     with needing("ds.to_arrow()", extra="dataset"):
        ...         import no_such_arrow
        ... except UnsupportedError as exc:
        ...     print(exc)
        ds.to_arrow() needs no_such_arrow, which is not installed: pip install 'tensorfile[dataset]'
    """
    try:
        yield
    except ImportError as exc:
        raise _translated(exc, what, extra, package) from exc


def _translated(
    exc: ImportError, what: str, extra: str | None, package: str | None
) -> BaseException:
    """The error to raise for ``exc``: :func:`missing`'s, or ``exc`` itself when the module
    missing is tensorfile's own (a bug) or unnamed."""
    name = (exc.name or "").split(".")[0]
    if not name or name == "tensorfile":
        return exc
    return missing(what, name, extra=extra, package=package)


def require(
    module: str, what: str, *, extra: str | None = None, package: str | None = None
) -> ModuleType:
    """Import ``module`` (``"torch"``) for ``what``, or raise what :func:`needing` raises.

    Example:
        >>> require("json", "reading JSON", extra="core").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _translated(exc, what, extra, package) from exc
