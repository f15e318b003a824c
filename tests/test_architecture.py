"""The shape of the code, checked: small modules, one door, a core that stands alone, and no
import cycle (module-level or inside functions)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for f in SRC.rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every tensorfile module ``name`` imports, anywhere in its body."""
    path, is_pkg = MODULES[name]
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in MODULES else target)
    return {m for m in out if m.split(".")[0] == "tensorfile"}


GRAPH = {name: _imports(name) & MODULES.keys() for name in MODULES}


# The layer table (DESIGN.md; docs/architecture.md): which parts of tensorfile each part may
# import, at module level or inside a function. Every part may import `core` and `_version`.
# The faces (`safetensors`, `ztensor`, `gguf`, `checkpoint`, `errors`) re-export what
# `formats` and `core` implement; `testing` ships the conformance suites.
FACE = {"core", "sources", "frameworks", "formats"}
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "sources": {"core"},
    "frameworks": {"core"},
    "formats": {"core", "sources", "frameworks"},
    "safetensors": FACE | {"loading"},  # load_file's backend="auto" asks loading
    "ztensor": FACE,
    "gguf": FACE,
    "checkpoint": FACE,
    "errors": {"core"},
    "ops": {"core", "formats", "sources", "frameworks"},
    "dataset": {"core", "formats", "sources", "frameworks"},
    "spark": {"core", "dataset"},
    "distributed": {"core", "formats", "sources", "frameworks"},
    "cli": {"core", "ops", "dataset", "sources", "samples"},
    "testing": {"core", "sources", "formats", "frameworks"},
    "loading": {"sources"},  # how load_file reads a file (mount table, page cache)
    "patching": set(),  # (imports tensorfile.safetensors by name, when patched code asks)
    "_hook": set(),  # what the .pth runs switched on: loads patching.py by its path
    # the docs' sample files, written through the faces a user writes them with;
    # `python -m tensorfile.samples` is `tensorfile samples`; runs on a folder take turns
    # under the folder lock of `sources.LocalStore`
    "samples": {"dataset", "safetensors", "ztensor", "cli", "sources"},
}
ANYONE = {"core", "_version"}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "": the package face itself


def test_every_part_is_in_the_layer_table() -> None:
    parts = {_part(n) for n in MODULES} - {"", "_version"}
    assert parts - LAYERS.keys() == set()


def test_imports_follow_the_layer_table() -> None:
    """No arrow the table does not allow, module-level or inside functions; no exceptions."""
    wrong = []
    for name, deps in sorted(GRAPH.items()):
        own = _part(name)
        if own in ("", "_version"):
            continue  # the package face loads whatever it exports (lazily where heavy)
        for dep in sorted(deps):
            other = _part(dep)
            if other == own:
                continue
            if other == "" or (other not in ANYONE and other not in LAYERS[own]):
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


# Inside the two parts built of sub-packages, the same kind of table: which sub-packages each
# sub-package may import (module-level or inside a function). "" is a module at the part's top
# (sources/router.py; the dataset's public face modules such as dataset/torch.py); the part's
# __init__ (its face) may import any of them. No exceptions.
SUB_LAYERS: dict[str, dict[str, set[str]]] = {
    "sources": {
        "local": set(),  # local files, file objects, bytes in memory, the local path rules
        "http": {"local"},  # the transport (a reply may be read into a local file's buffers)
        "cache": {"local", "http"},  # chunks of remote files in a local folder
        "stores": {"local", "http"},  # the Store interface; local, memory, fsspec stores
        # the S3 client on the HTTP transport, and the S3 store (s3fs lists, writes, deletes)
        "s3": {"local", "http", "stores"},
        "": {"stores", "http", "s3"},  # the router: which client or store a URL gets
    },
    "dataset": {
        "layout": set(),  # manifest, index, dtypes, the reference layout, files, storage
        "writing": {"layout"},
        "cache": set(),  # the shard cache
        "feed": {"layout"},  # order, the torch feed, its options, state and batches
        "reading": {"layout", "cache", "feed", "loaders"},  # Dataset.to_torch/to_arrow/...
        "loaders": {"layout", "reading"},  # a shard's samples (reading.samples)
        "": {"feed", "loaders"},  # the public face modules (dataset/torch.py, ...)
    },
}


def _sub(module: str) -> str | None:
    """The sub-package of ``module`` inside its part ("": a module at the part's top; None:
    the part's own ``__init__``)."""
    parts = module.split(".")
    if len(parts) == 2:
        return None
    top = ".".join(parts[:3])
    return parts[2] if top in MODULES and MODULES[top][1] else ""


def test_every_sub_package_is_in_its_table() -> None:
    for part, table in SUB_LAYERS.items():
        subs = {_sub(n) for n in MODULES if _part(n) == part} - {None}
        assert subs == table.keys(), part


def test_sub_packages_follow_their_table() -> None:
    """Within ``sources`` and ``dataset``: no arrow between sub-packages the table does not
    allow."""
    wrong = []
    for name, deps in sorted(GRAPH.items()):
        part = _part(name)
        if part not in SUB_LAYERS or (own := _sub(name)) is None:
            continue
        for dep in sorted(deps):
            other = _sub(dep) if _part(dep) == part else None
            if other is None or other == own:
                continue
            if other not in SUB_LAYERS[part][own]:
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


def test_no_package_folder_has_more_than_16_modules() -> None:
    """A folder of more than 16 modules of its own (``__init__.py`` not counted) holds several
    concepts: each gets a sub-package."""
    counts = {d: len([f for f in d.glob("*.py") if f.name != "__init__.py"]) for d in
              {p.parent for p, _ in MODULES.values()}}  # fmt: skip
    assert {str(d.relative_to(SRC)): n for d, n in counts.items() if n > 16} == {}


def _private_names(name: str) -> set[str]:
    """``from tensorfile.<other part>... import _name`` in ``name``'s body."""
    path, is_pkg = MODULES[name]
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] != "tensorfile" or _part(target) == _part(name):
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.add(f"{target}.{a.name}")
    return out


def test_no_private_imports_across_parts() -> None:
    """A part uses another part's public names only: no module or name starting with ``_``
    of another part (the faces excepted: re-exporting ``formats`` is what they are for)."""
    wrong = []
    for name, deps in sorted(GRAPH.items()):
        own = _part(name)
        if own in ("", "safetensors", "ztensor", "gguf", "checkpoint"):
            continue
        for dep in sorted(deps | _private_names(name)):
            if _part(dep) in (own, "_version"):
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in dep.split(".")[1:]):
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


def _own_part_imports(name: str) -> Iterator[str]:
    """Each import in ``name``'s body of a module or name of its own
    part (anywhere in the body), as ``tensorfile.<part>....<module or name>``."""
    path, is_pkg = MODULES[name]
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found = [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        else:
            continue
        for dotted in found:
            if dotted.startswith("tensorfile.") and _part(dotted) == _part(name):
                yield dotted


# Private imports across sub-packages that wait for the branches rewriting the importing (or
# the providing) folder now, so that the merges meet no conflict; each with the public name
# that takes its place (None: the providing branch gives it one). The merges switch these
# lines and empty the table.
_HTTP, _T = "tensorfile.sources.http", "tensorfile.sources.http.transport"
PRIVATE_WAITING: dict[str, str | None] = {}


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_no_private_imports_across_sub_packages() -> None:
    """A sub-package (``sources/http``, ``dataset/feed``, ``formats/safetensors``...) uses
    another sub-package's public names only: no module or name starting with ``_`` below
    another sub-package, from a module of a sub-package or at the part's top. A private
    module at the part's top (``formats/_index.py``) is the part's, which holds them all; the
    part's ``__init__`` (its face) gathers what it exports from wherever it lives."""
    wrong = set()
    for name in sorted(MODULES):
        if name.count(".") < 2 or (own := _sub(name)) is None:
            continue  # a part's own module or face
        for dep in _own_part_imports(name):
            parts = dep.split(".")
            other = _sub(".".join(parts[:3])) if len(parts) > 2 else None
            if other in (None, "", own):
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in parts[3:]):
                wrong.add(f"{name} -> {dep}")
    assert sorted(wrong - PRIVATE_WAITING.keys()) == []
    for waiting, public in PRIVATE_WAITING.items():  # the public names are there already
        if public is not None:
            private = waiting.split(" -> ")[1]
            if private in MODULES:  # a module: the name of it that is now public
                private += "." + public.rpartition(".")[2]
            assert _resolve(public) is _resolve(private), waiting


def test_the_faces_import_no_private_module() -> None:
    """A face (``tensorfile.safetensors``, ``tensorfile.ztensor``, ...) re-exports what a
    format package names for it (its ``faces`` module), never a private module of it."""
    faces = ("safetensors", "ztensor", "gguf", "checkpoint", "errors")
    wrong = [
        f"{name} -> {dep}"
        for name, deps in sorted(GRAPH.items())
        if _part(name) in faces
        for dep in sorted(deps)
        if any(p.startswith("_") and not p.startswith("__") for p in dep.split(".")[1:])
    ]
    assert wrong == []


def test_ztensor_versions_do_not_import_each_other() -> None:
    """zTensor v1.0 and v2 stand side by side: which version a writer or a reader is, is
    chosen above both (``formats/ztensor/_writer.py``, ``_hooks.py``), never by one of them."""
    v1, v2 = "tensorfile.formats.ztensor.v1", "tensorfile.formats.ztensor.v2"
    wrong = [
        f"{name} -> {dep}"
        for name, deps in sorted(GRAPH.items())
        for dep in sorted(deps)
        for own, other in ((v1, v2), (v2, v1))
        if name.startswith(own) and dep.startswith(other)
    ]
    assert wrong == []


def _calls(name: str, function: str) -> list[int]:
    """The lines of ``name`` that call the builtin ``function``."""
    tree = ast.parse(MODULES[name][0].read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == function
    ]


def test_the_feed_asks_its_dataset_through_a_protocol() -> None:
    """``dataset/feed`` reads a dataset through ``FeedDataset`` (typed members), never by
    probing it with ``getattr``/``hasattr``."""
    feed = [n for n in MODULES if n.startswith("tensorfile.dataset.feed")]
    assert "tensorfile.dataset.feed.protocol" in feed
    probes = {n: _calls(n, "getattr") + _calls(n, "hasattr") for n in feed}
    assert {n: lines for n, lines in probes.items() if lines} == {}


def _store_classes() -> set[str]:
    """The names of the classes under ``src/`` that derive from ``Store`` (not ``Store``)."""
    bases: dict[str, set[str]] = {}
    for path, _ in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                bases.setdefault(node.name, set()).update(names)
    found: set[str] = set()
    grew = True
    while grew:
        more = {c for c, b in bases.items() if b & (found | {"Store"})} - found
        found |= more
        grew = bool(more)
    return found


def _class_tests(name: str, classes: set[str]) -> list[str]:
    """``isinstance``/``issubclass`` calls and ``type(x) is/== C`` tests of ``classes`` in
    ``name``, as ``line: class``."""
    out = []
    for node in ast.walk(ast.parse(MODULES[name][0].read_text())):
        tested: list[ast.expr] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                second = node.args[1]
                tested = list(second.elts) if isinstance(second, ast.Tuple) else [second]
        elif isinstance(node, ast.Compare):
            tested = [node.left, *node.comparators]
        for t in tested:
            cls = (
                t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
            )
            if cls in classes:
                out.append(f"{node.lineno}: {cls}")
    return out


def test_the_dataset_never_tests_a_concrete_store_class() -> None:
    """``dataset/`` asks the Store interface what a store can do (``local_path``,
    ``open_url``, ``make_folder``, ...), never which class it is."""
    classes = _store_classes()
    assert {"LocalStore", "MemoryStore", "FsspecStore"} <= classes
    tests = {n: _class_tests(n, classes) for n in MODULES if n.startswith("tensorfile.dataset")}
    assert {n: t for n, t in tests.items() if t} == {}


def test_every_package_says_what_it_owns() -> None:
    """Each package's ``__init__`` has a docstring of its own that says what the package
    owns, at least a sentence, not a pointer elsewhere."""
    short = {}
    for name, (path, is_pkg) in sorted(MODULES.items()):
        if not is_pkg:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if len(doc.split()) < 15 or "." not in doc or "see the package docstring" in doc:
            short[name] = doc
    assert short == {}


CACHE_SETTINGS = "tensorfile.sources.cache.settings"
_CACHE_NAMES = {"CACHE_DIR_ENV", "CACHE_SIZE_ENV", "CACHE_CHUNK_ENV", "CACHE_VERIFY_ENV",
                "DEFAULT_LIMIT"}  # fmt: skip


def _cache_settings_read(name: str) -> list[str]:
    """Where module ``name`` names a ``$TENSORFILE_CACHE_*`` variable as a string, reads the
    environment with one of the cache's variable names, or defines a cache setting of its
    own."""
    out = []
    for node in ast.walk(ast.parse(MODULES[name][0].read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("TENSORFILE_CACHE_") and node.value.isidentifier():
                out.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in _CACHE_NAMES:
                    out.append(f"{node.lineno}: {t.id} defined")
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.endswith(("environ.get", "getenv")):
                args = [ast.unparse(a) for a in node.args]
                if any(a.split(".")[-1] in _CACHE_NAMES for a in args):
                    out.append(f"{node.lineno}: {func}({', '.join(args)})")
    return out


def test_the_cache_settings_are_read_in_one_module() -> None:
    """``$TENSORFILE_CACHE_DIR``, ``_SIZE``, ``_CHUNK``, ``_VERIFY`` and the default limits
    are read and defined in ``sources/cache/settings.py`` only (issue 34: one cache, one
    limit): every other module imports them from there."""
    assert _cache_settings_read(CACHE_SETTINGS)  # (it does read them)
    found = {n: _cache_settings_read(n) for n in MODULES if n != CACHE_SETTINGS}
    assert {n: f for n, f in found.items() if f} == {}


def test_no_module_is_over_600_lines() -> None:
    long = {n: len(p.read_text().splitlines()) for n, (p, _) in MODULES.items()}
    assert {n: k for n, k in long.items() if k > 600} == {}


def test_no_part_imports_the_package_face() -> None:
    assert (
        sorted(n for n, deps in GRAPH.items() if "tensorfile" in deps and n != "tensorfile") == []
    )


def test_core_imports_nothing_else_of_tensorfile() -> None:
    outside = {
        n: sorted(d for d in deps if not d.startswith("tensorfile.core"))
        for n, deps in GRAPH.items()
        if n.startswith("tensorfile.core")
    }
    assert {n: d for n, d in outside.items() if d} == {}


def test_no_import_cycle() -> None:
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_format_knowledge_is_written_once() -> None:
    """Magic numbers and suffixes live in the registry; other modules refer to them."""
    registry = MODULES["tensorfile.formats"][0]
    for literal in (
        'b"ZTEN',
        'b"GGUF"',
        '".zt"',
        '".gguf"',
        'b"\\x93NUMPY"',
        'b"PK\\x03\\x04"',
        'b"PK\\x05\\x06"',
        '".npz"',
        '".npy"',
        '".pth"',
        '".ckpt"',
    ):
        holders = [n for n, (p, _) in MODULES.items() if literal in p.read_text()]
        assert holders == ["tensorfile.formats"], (literal, holders)
    assert registry.exists()
    # outside docstrings: the safetensors suffix, the index suffix, the first-read size
    # (the sample files' names are not format knowledge)
    but = ("tensorfile.testing", "tensorfile.samples")
    assert _holders(".safetensors", but=but) == ["tensorfile.formats"]
    assert _holders(".index.json") == ["tensorfile.formats._index"]
    assert _holders(100_000) == ["tensorfile.core.source"]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _holders(value: object, but: tuple[str, ...] = ()) -> list[str]:
    """The modules holding the constant ``value`` (a string: one ending with it) in code
    (the conformance suites' fixture names, ``but``, apart)."""
    found = []
    for name, (path, _) in sorted(MODULES.items()):
        if name.startswith(but) and but:
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in skip:
                continue
            c = node.value
            hit = (
                c.endswith(value)
                if isinstance(c, str) and isinstance(value, str)
                else (type(c) is type(value) and c == value)
            )
            if hit:
                found.append(name)
                break
    return found


def _loaded(statement: str) -> list[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_import_tensorfile_loads_only_what_it_needs() -> None:
    loaded = _loaded("import tensorfile")
    for heavy in (
        "http.client",
        "ssl",
        "tensorfile.ops",
        "tensorfile.sources.http.remote",
        "torch",
    ):
        assert heavy not in loaded, heavy
    for later in ("fsspec", "pytest", "tensorfile.testing", "tensorfile.formats.catalogs"):
        assert later not in loaded, later  # loaded when a store, a suite or a checkpoint is used
    stores = {m for m in loaded if m.startswith("tensorfile.sources.stores")}
    assert stores <= {"tensorfile.sources.stores", "tensorfile.sources.stores.store"}, stores
    assert "http.client" not in _loaded("import tensorfile.safetensors.numpy")
    assert "ssl" not in _loaded("import tensorfile.core.source")
