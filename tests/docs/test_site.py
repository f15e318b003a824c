"""The documentation site builds strictly, documents every public name, and works in a real
browser (Debian's chromium, driven by Playwright).

The build runs once per test session (``mkdocs build --strict``, as ``make docs`` does): a
broken link, an unknown reference target or a docstring the reference cannot render fails it.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tensorfile
from tests.helpers.make import as_a_user
from tests.helpers.workers import once_per_run, run_folder

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# the modules the reference documents, every name of their __all__ (docs/reference/*.md)
PUBLIC = (
    "tensorfile",
    "tensorfile.errors",
    "tensorfile.safetensors",
    "tensorfile.safetensors.numpy",
    "tensorfile.safetensors.torch",
    "tensorfile.safetensors.flax",
    "tensorfile.safetensors.tensorflow",
    "tensorfile.safetensors.paddle",
    "tensorfile.safetensors.mlx",
    "tensorfile.ztensor",
    "tensorfile.gguf",
    "tensorfile.checkpoint",
    "tensorfile.loading",
    "tensorfile.patching",
    "tensorfile.samples",
    "tensorfile.ops",
    "tensorfile.sources",
    "tensorfile.formats",
    "tensorfile.frameworks",
    "tensorfile.dataset",
    "tensorfile.dataset.torch",
    "tensorfile.dataset.order",
    "tensorfile.dataset.arrow",
    "tensorfile.dataset.hf",
    "tensorfile.dataset.ray",
    "tensorfile.dataset.dask",
    "tensorfile.spark",
    "tensorfile.distributed",
    "tensorfile.testing",
)
# packages of tensorfile that are not an API of their own: the program, and the parts
# the packages above are built from
INTERNAL = ("tensorfile.cli", "tensorfile.core")


def mkdocs_build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="session")
def site_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site, built strictly from docs/ and mkdocs.yml by ``make docs`` as a user runs it
    (the environment without the tests' NO_MKDOCS_2_WARNING), with this interpreter and
    into a temporary folder (the Makefile's .venv is not made: ``-o``), once per run for
    every xdist worker; and what the build printed."""

    def build(folder: Path) -> None:
        done = subprocess.run(
            [
                "make",
                "-s",
                "-o",
                ".venv/.dev",
                "docs",
                f"PY={sys.executable}",
                f"SITE={folder / 'site'}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            # (as a user runs it: not as a sub-make of the make test that runs the suite)
            env=as_a_user(drop=["NO_MKDOCS_2_WARNING"]),
        )
        if done.returncode != 0:
            pytest.fail(f"make docs failed:\n{done.stdout}\n{done.stderr}"[-6000:])
        (folder / "build.log").write_text(done.stdout + done.stderr, encoding="utf-8")

    made = once_per_run(run_folder(tmp_path_factory), "site", build)
    return made / "site", (made / "build.log").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def site(site_build: tuple[Path, str]) -> Path:
    """The site that ``make docs`` built."""
    return site_build[0]


def inventory(site: Path) -> set[str]:
    """The names in the site's objects.inv (Sphinx's format: 4 header lines, then zlib)."""
    raw = (site / "objects.inv").read_bytes().split(b"\n", 4)
    return {line.split(" ", 1)[0] for line in zlib.decompress(raw[4]).decode().splitlines()}


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "search" / "search_index.json").is_file()


def test_make_docs_prints_only_the_build_log(
    site_build: tuple[Path, str],
) -> None:
    """No banner (Material for MkDocs prints one on every build unless the Makefile sets
    NO_MKDOCS_2_WARNING, which the banner names; issue 36): only mkdocs' INFO lines."""
    lines = site_build[1].splitlines()
    assert [line for line in lines if line.strip() and not line.startswith("INFO ")] == []


def test_every_public_name_is_in_the_reference(site: Path) -> None:
    names = inventory(site)
    missing = []
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            home = getattr(obj, "__module__", None)
            # documented where it is exported, or where it lives (the ops functions, whose
            # names are also their submodules')
            if f"{module_name}.{name}" not in names and f"{home}.{name}" not in names:
                missing.append(f"{module_name}.{name}")
    assert not missing, missing


def test_every_public_package_is_listed() -> None:
    """A new public package of tensorfile must be added to the reference (and PUBLIC)."""
    found = {
        f"tensorfile.{m.name}"
        for m in pkgutil.iter_modules(tensorfile.__path__)
        if not m.name.startswith("_")
    }
    assert found - set(PUBLIC) - set(INTERNAL) == set()


def test_the_cli_reference_is_generated_from_the_parser(site: Path) -> None:
    from tensorfile.cli._parser import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert commands
    todo = list(commands.items())
    while todo:
        name, sub = todo.pop()
        assert f"tensorfile {name}" in html
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in html, (name, flag)
            if isinstance(action, argparse._SubParsersAction):  # tensorfile dataset gc
                todo += [(f"{name} {n}", p) for n, p in action.choices.items()]


def test_the_error_tree_is_drawn(site: Path) -> None:
    import tensorfile.errors

    html = (site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    for name in tensorfile.errors.__all__:
        assert f"<code>{name}</code>" in html, name


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The site's own configuration (mkdocs.yml: strict, its validation settings, theme,
    plugins and hooks) on a project of two pages builds, and fails once a page links to a
    missing one, naming the link. (The whole site is built once, by :func:`site_build`: a
    second whole build costs ten seconds of a core.)"""
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config["nav"] = [{"Home": "index.md"}, {"Getting started": "getting-started.md"}]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    docs = tmp_path / "docs"
    for folder in ("hooks", "stylesheets"):
        shutil.copytree(REPO / "docs" / folder, docs / folder)
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (docs / "index.md").write_text("# tensorfile\n\nStart [here](getting-started.md).\n")
    page = docs / "getting-started.md"
    page.write_text("# Getting started\n\nBack [home](index.md#tensorfile).\n")
    done = mkdocs_build(tmp_path, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr  # the project builds as it is
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    done = mkdocs_build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


@pytest.fixture(scope="session")
def served(site: Path) -> Iterator[str]:
    """The built site on a real HTTP server on 127.0.0.1."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(site), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            yield browser
        finally:
            browser.close()


def test_the_home_page_and_search_work_in_chromium(served: str, tmp_path: Path) -> None:
    """Debian's chromium, headless: the home page renders with its navigation, the search
    index loads, and a search finds the reference page of ``safe_open``."""
    index = json.loads(_get(f"{served}/search/search_index.json"))
    assert len(index["docs"]) > 100
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{served}/", wait_until="load")
        assert "tensorfile" in page.title()
        nav = page.locator("nav.md-nav--primary").inner_text()
        for section in ("Getting started", "Guides", "Reference", "Benchmarks"):
            assert section in nav
        page.screenshot(path=str(tmp_path / "home.png"))
        page.keyboard.press("s")  # Material's shortcut opens the search box
        # the index is built in a web worker (minutes on a loaded 2-core machine: the timeout
        # is a hang guard); the box says "Initializing search" until the worker is ready
        meta = page.locator(".md-search-result__meta")
        meta.filter(has_text="Type to start searching").wait_for(timeout=240_000)
        # typed key by key: Material searches on key events, and a fill() made after the
        # worker is ready (an input event alone) searches for nothing
        page.locator("input.md-search__input").press_sequentially("safe_open")
        results = page.locator(".md-search-result__item")
        results.first.wait_for(timeout=60_000)
        assert "safe_open" in page.locator(".md-search-result").inner_text()
        assert not errors, errors


# common widths: a laptop, a small laptop or tablet across, a tablet, a phone (widest first:
# the layout test narrows one window through them)
WIDTHS = (1280, 1024, 768, 390)
# the pages with the widest content: long code lines, wide tables, signatures
WIDE_PAGES = (
    "",
    "guides/feeding/",
    "guides/migrating/",
    "guides/cli/",
    "differences/",
    "benchmarks/",
    "reference/tensorfile/",
    "reference/cli/",
)
# what overflows a page: the document wider than the window, a code block reaching past the
# window's right edge, a block of code (not a console session or printed text, which keep
# their columns and scroll inside the block) whose lines are cut at the block's edge
LAYOUT = """() => {
  const width = window.innerWidth;
  const blocks = [...document.querySelectorAll('.md-content pre > code')];
  const out = blocks.filter(c => c.getBoundingClientRect().right > width + 0.5);
  const cut = blocks.filter(c => !c.closest('.language-console, .language-text')
                                 && c.scrollWidth > c.clientWidth + 1);
  return {
    width: width,
    scrollWidth: document.documentElement.scrollWidth,
    blocks: blocks.length,
    outside: out.map(c => c.textContent.slice(0, 60)),
    cut: cut.map(c => c.textContent.slice(0, 60)),
  };
}"""


def test_the_layout_fits_common_widths(served: str, tmp_path: Path) -> None:
    """At 1280, 1024, 768 and 390 px no page is wider than the window and every code block
    stays inside it (code wraps; console sessions scroll inside their block). A screenshot
    of each page and width is left in the test's folder to check by eye.

    Each page is loaded once, at the widest width, and the window narrowed step by step (as
    a reader narrows a window): the same measures and pixel-identical screenshots as a load
    at each width, in a third of the time (a load of the reference page costs about a
    second). Widening a narrowed page is not the same: the width is always set before a
    load."""
    problems = []
    with chromium() as browser:
        page = browser.new_page()
        for path in WIDE_PAGES:
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            page.goto(f"{served}/{path}", wait_until="load")
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                got = page.evaluate(LAYOUT)
                assert got["width"] == width
                shot = f"{path.strip('/').replace('/', '_') or 'home'}-{width}.png"
                page.screenshot(path=str(tmp_path / shot))
                if got["scrollWidth"] > got["width"] or got["outside"] or got["cut"]:
                    problems.append((path, got))
                if path == "guides/feeding/":
                    assert got["blocks"] > 10  # the check saw the page's code
        page.close()
    assert not problems, problems


def test_the_api_page_begins_with_open(served: str) -> None:
    """``tensorfile.open``, the entry point, is the first name on the package's reference
    page and in its table of contents; the reference's own internals come last in the
    navigation."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{served}/reference/tensorfile/", wait_until="load")
        headings = page.locator(".md-content .doc-heading[id^='tensorfile.']")
        assert headings.first.get_attribute("id") == "tensorfile.open"
        toc = page.locator("nav.md-nav--secondary a.md-nav__link").all_inner_texts()
        assert [t.strip() for t in toc][1] == "open", toc[:3]
        nav = [
            t.strip() for t in page.locator("nav.md-nav--primary a.md-nav__link").all_inner_texts()
        ]
    reference = nav[nav.index("tensorfile") :]
    for internal in ("tensorfile.sources", "tensorfile.loading", "tensorfile.formats"):
        assert reference.index(internal) > reference.index("Command line")


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as reply:
        text: str = reply.read().decode()
        return text
