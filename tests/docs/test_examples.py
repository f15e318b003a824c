"""Every example of the documentation runs (docs/**/*.md and README.md).

Each page is one test: its ``python`` blocks run in page order in one namespace and its
``console`` commands in bash, all in a fresh folder holding the sample files
(tests/docs/samples.py), with ``https://example.com/`` served by a real HTTP server and
``s3://examples/`` by a real S3 API server. A block marked ``not-run`` (it needs a GPU or a
cloud account: the page says which) is compiled, not run. Conventions: tests/docs/blocks.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs import samples
from tests.docs.blocks import (
    PRINT_CALL,
    Block,
    blocks,
    checked_prints,
    output_matches,
    print_matches,
)
from tests.docs.conftest import fresh_folder, upload_samples

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
PAGES.append("README.md")
EXAMPLE_URL = "https://example.com/"
BUCKET = "examples"


def page_id(page: str) -> str:
    return page.removeprefix("docs/")


@contextlib.contextmanager
def _in_folder(folder: Path, env: dict[str, str]) -> Iterator[None]:
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.chdir(folder)
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        _forget_filesystems()
        patching = sys.modules.get("tensorfile.patching")
        if patching is not None:  # a page that failed while patched leaves no patch behind
            patching.unpatch_safetensors()


def _forget_filesystems() -> None:
    """Drop the fsspec filesystems a page made: fsspec caches each instance by its arguments,
    and one made under the page's AWS_ENDPOINT_URL would serve a later test its endpoint."""
    fsspec = sys.modules.get("fsspec")
    if fsspec is None:
        return
    for cls in list(fsspec.registry.values()):
        cls.clear_instance_cache()


def _print_checker(page: str, wrong: list[str]) -> Any:
    """The ``print`` of the examples' ``print(...)  # shown`` lines: prints, and notes each
    comment that does not show what was printed."""

    def checked(*args: Any, expected: str, line: int) -> None:
        text = " ".join(str(a) for a in args)
        print(text)
        if "\n" not in text and not print_matches(text, expected):
            wrong.append(f"{page}:{line}: printed {text!r}, the comment says {expected!r}")

    return checked


def _run_python(page: str, block: Block, code: str, namespace: dict[str, Any]) -> None:
    code = checked_prints(code, block.line)
    compiled = compile(code, f"{page}:{block.line}", "exec")
    try:
        exec(compiled, namespace)
    except Exception as exc:
        raise AssertionError(f"{page}:{block.line}: the example raised {exc!r}") from exc


def _run_console(page: str, block: Block, url: str, folder: Path, env: dict[str, str]) -> None:
    for command in block.commands:
        done = subprocess.run(
            ["bash", "-c", command.command.replace(EXAMPLE_URL, url)],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        where = f"{page}:{command.line}: $ {command.command}"
        assert done.returncode == block.exit_status, (
            f"{where}\nexited {done.returncode}, not {block.exit_status}:\n{done.stdout}"
        )
        if command.expected is not None:
            actual = done.stdout.split("\n")
            assert output_matches(command.expected, actual), (
                f"{where}\nprinted:\n{done.stdout}\nexpected:\n" + "\n".join(command.expected)
            )


def _environment(tmp: Path, s3: Any | None) -> dict[str, str]:
    env = {
        "TENSORFILE_CACHE_DIR": str(tmp / "cache"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO / "src"),
    }
    if s3 is not None:
        env.update(
            AWS_ENDPOINT_URL=s3.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
    return env


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_the_examples_of_each_page_run(
    page: str,
    request: pytest.FixtureRequest,
    sample_files: Path,
    pages_root: Path,
    http_base: str,
    tmp_path: Path,
) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    found = blocks(text)
    for block in found:
        if block.kind == "python" and block.not_run is not None:
            compile(block.code, f"{page}:{block.line}", "exec")  # a not-run block still parses
    runnable = [b for b in found if b.runs]
    if not runnable:
        return
    slug = re.sub(r"[^A-Za-z0-9]+", "-", page_id(page)).strip("-")
    folder = fresh_folder(pages_root, slug)
    samples.copy_into(sample_files, folder)
    url = f"{http_base}/{slug}/"
    s3 = None
    if f"s3://{BUCKET}/" in text:
        s3 = request.getfixturevalue("s3")
        upload_samples(s3, sample_files, BUCKET)
    if "pyspark" in text:
        request.getfixturevalue("spark")
    env = _environment(tmp_path, s3)
    child_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child_env.update(env)
    wrong: list[str] = []
    namespace: dict[str, Any] = {"__name__": "__docs__", PRINT_CALL: _print_checker(page, wrong)}
    with _in_folder(folder, env):
        for block in runnable:
            if block.kind == "python":
                _run_python(page, block, block.code.replace(EXAMPLE_URL, url), namespace)
            else:
                _run_console(page, block, url, folder, child_env)
    assert not wrong, "comments that do not show what the example prints:\n" + "\n".join(wrong)


def test_no_page_names_an_issue() -> None:
    """The pages speak to users: no "issue 12", "issue #3" or "(#26)" anywhere."""
    pattern = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)|\bissue-\d+", re.IGNORECASE)
    hits = []
    for page in PAGES:
        for n, line in enumerate((REPO / page).read_text(encoding="utf-8").split("\n"), 1):
            if pattern.search(line):
                hits.append(f"{page}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
