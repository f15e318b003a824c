"""Every example of the documentation runs (docs/**/*.md and README.md).

Each page is one test: its ``python`` blocks run in page order in one namespace and its
``console`` commands in bash, all in a fresh folder holding the sample files
(``tensorfile samples``: :mod:`tensorfile.samples`), with ``https://example.com/`` served
by a real HTTP server and ``s3://examples/`` by a real S3 API server. A block marked
``not-run`` (it needs a GPU or a cloud account: the page says which) is compiled, not run.
Conventions: tests/docs/blocks.py.

Each page runs a second time as a reader with only ``pip install .`` runs it: in one process
of a plain virtual environment (no extras), on samples made there by ``tensorfile samples``;
there a block runs as printed or its first line names what it needs, which that environment
lacks (``# needs: pip install 'tensorfile[torch]'``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorfile.samples import NAMES
from tests.docs.blocks import blocks
from tests.docs.conftest import fresh_folder, upload_samples
from tests.docs.runner import REPO, run_blocks

PAGES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
PAGES.append("README.md")
BUCKET = "examples"


def page_id(page: str) -> str:
    return page.removeprefix("docs/")


@contextlib.contextmanager
def _in_folder(folder: Path, env: dict[str, str]) -> Iterator[None]:
    old_cwd, old_env, old_tmp = os.getcwd(), dict(os.environ), tempfile.tempdir
    os.chdir(folder)
    os.environ.update(env)
    # the examples run in this process: tempfile's folder, found once, is set to env's
    tempfile.tempdir = env.get("TMPDIR", old_tmp)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        tempfile.tempdir = old_tmp
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


def _environment(tmp: Path, s3: Any | None, bin_dir: Path, path: Path) -> dict[str, str]:
    """The variables an example runs with: ``bin_dir`` first on ``PATH`` (where
    ``tensorfile`` and ``python`` are), ``path`` as ``PYTHONPATH``, ``TMPDIR`` in ``tmp``
    (an example's ``tempfile.mkdtemp()`` is not left in /tmp)."""
    (tmp / "tmp").mkdir(exist_ok=True)
    env = {
        "TMPDIR": str(tmp / "tmp"),
        "TENSORFILE_CACHE_DIR": str(tmp / "cache"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(path),
    }
    if s3 is not None:
        env.update(
            AWS_ENDPOINT_URL=s3.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
    return env


def example_scripts(text: str) -> list[str]:
    """The scripts of the repository's ``examples/`` folder that a page's commands run
    (``$ python examples/NAME.py ...``): the page's folder gets a copy of each, where a
    reader who cloned the repository has them. (A script that starts processes of its own,
    such as ranks of ``torch.distributed``, cannot run inside a ``python`` block.)"""
    named = {
        m.group(1)
        for b in blocks(text)
        if b.kind == "console"
        for c in b.commands
        for m in re.finditer(r"(?<![\w/.-])(examples/[A-Za-z0-9_]+\.py)\b", c.command)
    }
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert not missing, f"the page runs scripts the repository lacks: {missing}"
    return sorted(named)


def _page_folder(
    request: pytest.FixtureRequest,
    page: str,
    text: str,
    made: Path,
    prefix: str = "",
) -> tuple[Path, str, Any]:
    """A fresh folder for ``page`` holding a copy of the samples in ``made``, its URL on
    the HTTP server, and the S3 server holding the samples where the page names
    ``s3://examples/`` (else None)."""
    slug = prefix + re.sub(r"[^A-Za-z0-9]+", "-", page_id(page)).strip("-")
    folder = fresh_folder(request.getfixturevalue("pages_root"), slug)
    shutil.copytree(made, folder, dirs_exist_ok=True)
    for script in example_scripts(text):
        (folder / "examples").mkdir(exist_ok=True)
        shutil.copy(REPO / script, folder / script)
    url = f"{request.getfixturevalue('http_base')}/{slug}/"
    s3 = None
    if f"s3://{BUCKET}/" in text:
        s3 = request.getfixturevalue("s3")
        upload_samples(s3, made, BUCKET)
    return folder, url, s3


def _runs_spark(page: str) -> bool:
    """Whether an example of ``page`` that runs uses Spark (imports pyspark). A page that
    names pyspark only in its prose or in a not-run block (getting-started.md's install
    table) runs without the session's Spark and on any worker."""
    text = (REPO / page).read_text(encoding="utf-8")
    return any("pyspark" in b.code for b in blocks(text) if b.runs)


@pytest.mark.parametrize(
    "page",
    [
        # a page with Spark examples takes the session's Spark (see tests/conftest.py)
        pytest.param(p, marks=pytest.mark.spark) if _runs_spark(p) else p
        for p in PAGES
    ],
    ids=[page_id(p) for p in PAGES],
)
def test_the_examples_of_each_page_run(
    page: str, request: pytest.FixtureRequest, sample_files: Path, tmp_path: Path
) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    found = blocks(text)
    for block in found:
        if block.kind == "python" and block.not_run is not None:
            compile(block.code, f"{page}:{block.line}", "exec")  # a not-run block still parses
    runnable = [b for b in found if b.runs]
    if not runnable:
        return
    folder, url, s3 = _page_folder(request, page, text, sample_files)
    if _runs_spark(page):
        request.getfixturevalue("spark")
    env = _environment(tmp_path, s3, Path(sys.executable).parent, REPO / "src")
    child_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child_env.update(env)
    with _in_folder(folder, env):
        wrong = run_blocks(page, runnable, url, folder, child_env)
    assert not wrong, "comments that do not show what the example prints:\n" + "\n".join(wrong)


@pytest.fixture(scope="module")
def plain_samples(plain_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample files as a reader of the site makes them: ``tensorfile samples DIR`` in a
    plain install (no extras)."""
    made = tmp_path_factory.mktemp("plain-samples") / "examples"
    done = subprocess.run(
        [str(plain_venv / "tensorfile"), "samples", str(made)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = [line.split()[:2] for line in done.stdout.splitlines()]
    names = [str(made / n) + (os.sep if (made / n).is_dir() else "") for n in NAMES]
    assert printed == [["wrote", name] for name in names], done.stdout
    assert sorted(p.name for p in made.iterdir()) == sorted(NAMES)  # nothing else left there
    return made


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_each_example_runs_on_a_plain_install_or_names_what_it_needs(
    page: str,
    request: pytest.FixtureRequest,
    plain_venv: Path,
    plain_samples: Path,
    tmp_path: Path,
) -> None:
    """A reader with ``pip install .`` alone makes the samples with ``tensorfile samples``
    and runs the page's examples in order, in one process of that install: each runs as
    printed, or its first line names what it needs (``# needs: pip install ...``) and that
    is not installed there."""
    text = (REPO / page).read_text(encoding="utf-8")
    if not any(b.runs for b in blocks(text)):
        return
    folder, url, s3 = _page_folder(request, page, text, plain_samples, prefix="plain-")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(_environment(tmp_path, s3, plain_venv, REPO))  # REPO: tests.docs.runner
    report = tmp_path / "report.json"
    runner = [str(plain_venv / "python"), "-m", "tests.docs.runner"]
    done = subprocess.run(
        [*runner, page, str(folder), url, str(report)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result = json.loads(report.read_text(encoding="utf-8"))
    assert result["ok"]
    assert not result["wrong"], "\n".join(result["wrong"])
    if result["tensorfile"] is not None:  # the page's examples used the plain install's
        assert Path(result["tensorfile"]).is_relative_to(plain_venv.parent), result


def test_no_page_names_an_issue() -> None:
    """The pages speak to users: no "issue 12", "issue #3" or "(#26)" anywhere."""
    pattern = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)|\bissue-\d+", re.IGNORECASE)
    hits = []
    for page in PAGES:
        for n, line in enumerate((REPO / page).read_text(encoding="utf-8").split("\n"), 1):
            if pattern.search(line):
                hits.append(f"{page}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
