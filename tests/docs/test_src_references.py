"""Every module, name and file the docstrings and comments of ``src/`` (and the Architecture
page) point at exists: a ``tensorfile.x.y`` name imports or is an attribute of what does, a
Sphinx role's target (``:mod:`tensorfile.x```, ``:func:`~tensorfile.x.f```) too, a relative
one (``:mod:`._chunkcache```, ``:class:`..http.remote.HTTPSource```) from the module it is
written in, and a path (``sources/http/remote.py``, ``dataset/layout``) names a file or
folder of ``src/tensorfile``. A module moved into a sub-package leaves no pointer to where
it was.

A bare role target (``:meth:`close```) is the enclosing class's or module's name, read in
context; it is not checked here.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
PACKAGE = SRC / "tensorfile"

QUALIFIED = re.compile(r"(?<![\w./-])tensorfile(?:\.[A-Za-z_]\w*)+")
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|exc|data|obj|const):`[~!]?([^`]+)`")
# a path under src/tensorfile: its first folder is one of the package's, then more parts, to a
# ``.py`` file or (as code: ``dataset/layout``) a folder or a module without its suffix
PARTS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
PATH = re.compile(
    rf"(?<![\w./-])(?:src/)?(?:tensorfile/)?((?:{'|'.join(PARTS)})(?:/[A-Za-z_]\w*)+"
    r"(?:\.py(?![\w/-]|\.\w)|(?=`)))"
)
# keys tensorfile writes into files' metadata (``"tensorfile.digests"``...): names, not
# modules (none of them is one)
METADATA_KEYS = {
    "tensorfile.digests",
    "tensorfile.dtypes",
    "tensorfile.real_samples",
    "tensorfile.dtype",
    "tensorfile.shape",
    "tensorfile.mode",
    "tensorfile.columns",
    "tensorfile.kv_separator",
    "tensorfile.name_col",
    "tensorfile.dcp_objects",  # (distributed/_objects.py: the header key naming the objects file)
    "tensorfile.dcp",  # (of "tensorfile.dcp-objects", that file's format name)
}


# Stale references in folders other branches are rewriting now (sources/s3, sources/stores):
# fixed there, so the merges meet no conflict; the merge empties this table.
WAITING: dict[str, set[str]] = {}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


MODULES = {_module_name(p)[0]: p for p in PACKAGE.rglob("*.py")}


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


def _defines(body: list[ast.stmt], name: str, cls: ast.ClassDef | None = None) -> ast.AST | None:
    """The statement of ``body`` (or, for a class, ``self.<name> = ...`` in its methods)
    that binds ``name``: a ``def``, ``class``, assignment or import."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return node
    for node in ast.walk(cls) if cls is not None else ():
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == name:
                    return node
    return None


def _statically(module: str, names: list[str]) -> bool:
    """Whether ``module`` (read, not imported) binds ``names[0]``, and a class of it
    ``names[1]``."""
    found = _defines(_tree(module).body, names[0])
    if len(names) == 1 or found is None:
        return found is not None
    return (
        len(names) == 2
        and isinstance(found, ast.ClassDef)
        and _defines(found.body, names[1], found) is not None
    )


def _imported(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            fields = getattr(obj, "__dataclass_fields__", {}) if isinstance(obj, type) else {}
            if name in fields:
                return name == parts[-1]
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of ``src/``, or names something in one (read from its
    source where it can be, imported where the name is made at import time)."""
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", dotted):
        return False  # a target broken across lines, or not a dotted name at all
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in MODULES:
            return i == len(parts) or _statically(module, parts[i:]) or _imported(dotted)
    return _imported(dotted)  # another package's (torch.Tensor, weakref.finalize)


def _relative(target: str, module: str, is_pkg: bool) -> list[str]:
    """What ``.x`` (``..x``) written in ``module`` may mean: ``x`` of its package (of the
    package above), or ``x`` inside ``module`` itself."""
    dots = len(target) - len(target.lstrip("."))
    package = module.split(".") if is_pkg else module.split(".")[:-1]
    base = ".".join(package[: len(package) - (dots - 1)])
    rest = target[dots:]
    return [f"{base}.{rest}", f"{module}.{rest}"]


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    """The strings (docstrings among them) and comments of a Python file, by line."""
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            yield token.start[0], token.string


def _broken(lines: Iterator[tuple[int, str]], module: str | None, is_pkg: bool) -> list[str]:
    wrong = []
    for line, text in lines:
        for m in QUALIFIED.finditer(ROLE.sub("", text)):
            if m.group(0) not in METADATA_KEYS and not resolves(m.group(0)):
                wrong.append(f"{line}: {m.group(0)}")
        for m in ROLE.finditer(text):
            target = m.group(1)
            if target.startswith(".") and module is not None:
                if not any(resolves(c) for c in _relative(target, module, is_pkg)):
                    wrong.append(f"{line}: {m.group(0)}")
            elif target.startswith("tensorfile") and not resolves(target):
                wrong.append(f"{line}: {m.group(0)}")
        for m in PATH.finditer(text):
            path = PACKAGE / m.group(1)
            if not (path.exists() or path.with_suffix(".py").exists()):
                wrong.append(f"{line}: {m.group(1)}")
    return wrong


@pytest.mark.parametrize(
    "module", sorted(MODULES), ids=lambda m: m.removeprefix("tensorfile.") or "tensorfile"
)
def test_the_references_of_a_module_resolve(module: str) -> None:
    path = MODULES[module]
    broken = _broken(_texts(path), module, path.name == "__init__.py")
    assert [b for b in broken if b.split(": ", 1)[1] not in WAITING.get(module, ())] == []


def test_the_references_of_the_architecture_page_resolve() -> None:
    page = REPO / "docs" / "architecture.md"
    assert _broken(enumerate(page.read_text().splitlines(), 1), None, False) == []


def test_a_stale_reference_is_found() -> None:
    """The checks above can fail: each kind of broken reference is seen."""
    text = (
        "See tensorfile.sources._chunkcache, :mod:`tensorfile.dataset.shardcache`, "
        ":class:`.nowhere.Thing`, :func:`~tensorfile.core.digests.\n    METADATA_KEY` and "
        "``dataset/convert.py``; tensorfile.digests is a key, sources/http/remote.py a file."
    )
    found = _broken(iter([(1, text)]), "tensorfile.sources.http.remote", False)
    assert [f.split(": ", 1)[1] for f in found] == [
        "tensorfile.sources._chunkcache",
        ":mod:`tensorfile.dataset.shardcache`",
        ":class:`.nowhere.Thing`",
        ":func:`~tensorfile.core.digests.\n    METADATA_KEY`",
        "dataset/convert.py",
    ]
    assert resolves("tensorfile.sources.http.remote.HTTPSource")
    assert resolves("tensorfile.dataset.Dataset.to_torch")
