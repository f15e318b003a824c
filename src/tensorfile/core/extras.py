"""Optional dependencies: the one place that turns a missing package into a message that
says what to install.

tensorfile's plain install needs numpy only; torch, pyarrow, fsspec, jax and the others come
with extras (``pip install 'tensorfile[torch]'``, see ``pyproject.toml``). Every call site
that needs one imports it through :func:`require`, so a plain install gets an
:class:`~tensorfile.errors.UnsupportedError` naming the package and the extra, never a bare
``ModuleNotFoundError`` (which the CLI would report as an internal error).

:func:`needing` does the same around an import statement (``from .torch import
TorchMap``), so the names it imports keep their types. :func:`lazy_names` is the other kind
of deferred import: a package face's ``__getattr__`` that loads a heavy name (an operation,
the writing side of a format) when it is first asked for, so importing the face stays light.

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
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from .errors import UnsupportedError

__all__ = ["broken", "install_hint", "lazy_names", "missing", "needing", "require"]


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


def broken(what: str, name: str, exc: BaseException) -> UnsupportedError:
    """The error for ``what``, which needs the package ``name`` that is installed but fails
    to import (a missing part or dependency of it, a library it cannot load): its own error
    quoted (raise it ``from`` that error).

    Example:
        >>> print(broken("reading a pickle", "torch", ImportError("No module named 'torch._C'")))
        reading a pickle needs torch, which is installed but failed to import: ImportError: \
No module named 'torch._C'
    """
    return UnsupportedError(
        f"{what} needs {name}, which is installed but failed to import: {type(exc).__name__}: {exc}"
    )


@contextmanager
def needing(what: str, *, extra: str | None = None, package: str | None = None) -> Iterator[None]:
    """Turn an ImportError of a package missing in the block into the
    :class:`~tensorfile.errors.UnsupportedError` that names it and what installs it
    (``extra``, else ``package``), and the failure of an installed package's import (an
    ImportError or OSError inside it) into one that says so; a missing module of
    tensorfile's own is a bug, raised as it is.

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
    except (ImportError, OSError) as exc:
        raise _translated(exc, what, extra, package, _importing(exc)) from exc


def _importing(exc: BaseException) -> str | None:
    """The package whose import ``exc`` broke in a :func:`needing` block: the first module
    in its traceback, past the block's own frame, that is not tensorfile's (None: the error
    was raised by no other package's code)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals is globals():  # (needing's own frame)
        tb = tb.tb_next
    tb = tb.tb_next if tb is not None else None  # (the block's frame: the caller's module)
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        if module and module != "tensorfile":
            return module
        tb = tb.tb_next
    return None


def _installed(name: str) -> bool:
    """Whether the top-level package ``name`` can be found (imported or not)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # (a module in sys.modules without a spec)
        return name in sys.modules


def _translated(
    exc: ImportError | OSError,
    what: str,
    extra: str | None,
    package: str | None,
    importing: str | None,
) -> BaseException:
    """The error to raise for ``exc`` met importing ``importing`` (the package, where
    known): :func:`missing`'s where the package is not installed, :func:`broken`'s where it
    is; ``exc`` itself where it is no import's failure (a missing module of tensorfile's own
    is a bug)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if importing is None and (not isinstance(exc, ImportError) or not name):
        return exc  # not raised by an import of another package
    top = importing or name
    if top == "tensorfile":
        return exc
    if not _installed(top):
        return missing(what, top, extra=extra, package=package)
    return broken(what, top, exc)


def require(
    module: str, what: str, *, extra: str | None = None, package: str | None = None
) -> ModuleType:
    """Import ``module`` (``"torch"``) for ``what``, or raise what :func:`needing` raises:
    "not installed" only where the package cannot be found at all.

    Example:
        >>> require("json", "reading JSON", extra="core").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except (ImportError, OSError) as exc:
        raise _translated(exc, what, extra, package, module.split(".")[0]) from exc


def lazy_names(owner: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the module named ``owner``: ``table[name]`` is the module
    that holds ``name``, imported on the first ``owner.name`` (or ``from owner import
    name``); the value is then kept in ``owner``, so later lookups cost nothing. Any other
    name is an ``AttributeError``, as for a plain module. Usage:
    ``__getattr__ = lazy_names(__name__, {"convert": "tensorfile.ops.convert"})``.

    Example:
        >>> lookup = lazy_names("json", {"dumps": "json"})
        >>> lookup("dumps")([1])
        '[1]'
        >>> lookup("loads")
        Traceback (most recent call last):
        ...
        AttributeError: module 'json' has no attribute 'loads'
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            # a submodule loaded before its package ran (the import hook loads
            # tensorfile.patching at interpreter start without importing tensorfile)
            loaded = sys.modules.get(f"{owner}.{name}")
            if loaded is not None:
                return loaded
            raise AttributeError(f"module {owner!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[owner], name, value)
        return value

    return __getattr__
