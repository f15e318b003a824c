"""``make test`` runs the suite in pytest-xdist worker processes (see the Makefile): every
worker must collect the same test names, and what the workers share is made once
(:mod:`tests.helpers.workers`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

WORKER = """
import sys, time
from pathlib import Path
from tests.helpers.workers import once_per_run

root, fail = Path(sys.argv[1]), sys.argv[2] == "fail"

def make(folder):
    with open(root / "calls", "a") as f:
        f.write("made\\n")
    (folder / "part").write_text("half")
    time.sleep(0.5)  # the other workers ask meanwhile
    if fail:
        raise RuntimeError("make failed")
    (folder / "thing").write_text("done")

try:
    print(once_per_run(root, "thing", make))
except RuntimeError:
    print("failed")
"""


def workers(root: Path, n: int, fail: bool = False) -> list[str]:
    """What ``once_per_run`` returned in each of ``n`` processes started together."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), "fail" if fail else "ok"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    return [p.communicate(timeout=120)[0].strip() for p in procs]


def test_a_thing_the_workers_share_is_made_once(tmp_path: Path) -> None:
    assert workers(tmp_path, 3) == [str(tmp_path / "thing")] * 3
    assert (tmp_path / "calls").read_text() == "made\n"
    assert (tmp_path / "thing" / "thing").read_text() == "done"
    assert workers(tmp_path, 2) == [str(tmp_path / "thing")] * 2  # later in the run: kept
    assert (tmp_path / "calls").read_text() == "made\n"


def test_a_failed_make_leaves_nothing_and_the_next_worker_tries_again(tmp_path: Path) -> None:
    assert workers(tmp_path, 2, fail=True) == ["failed"] * 2
    assert (tmp_path / "calls").read_text() == "made\n" * 2
    assert not (tmp_path / "thing").exists()
    assert workers(tmp_path, 1) == [str(tmp_path / "thing")]
    assert sorted(p.name for p in (tmp_path / "thing").iterdir()) == ["part", "thing"]


def test_no_test_name_holds_a_memory_address(request: pytest.FixtureRequest) -> None:
    """The workers compare their collections and stop when the names differ: a test id made
    with ``repr`` of an object that has no value repr (``<memory at 0x7f...>``) differs
    from process to process."""
    named = [item.nodeid for item in request.session.items]
    assert [n for n in named if re.search(r" at 0x[0-9a-fA-F]+", n)] == []


GROUPED = """
import os, pytest
from tests.helpers.workers import join_group

def pytest_collection_modifyitems(items):
    for item in items:
        if "grouped" in item.name:
            join_group(item, "together")
"""

TESTS = """
import os, time

def _record(tmp_path_factory, name):
    base = tmp_path_factory.getbasetemp().parent
    (base / name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))
    time.sleep(0.3)  # the other workers are free meanwhile: only the group keeps them apart

""" + "".join(
    f"def test_{kind}_{i}(tmp_path_factory):\n    _record(tmp_path_factory, '{kind}_{i}')\n\n"
    for kind in ("grouped", "free")
    for i in range(6)
)


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    """The Spark tests' groups (tests/conftest.py) hold under the pytest and pytest-xdist
    installed: a run of four workers puts every test of a group on one worker (pytest 9
    ignored xdist 3.8's node-id rewrite, and every worker started a Spark cluster)."""
    (tmp_path / "conftest.py").write_text(GROUPED)
    (tmp_path / "test_grouping.py").write_text(TESTS)
    base = tmp_path / "base"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "4", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "-p", "no:randomly", f"--basetemp={base}",
         "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = {p.name: p.read_text() for p in base.iterdir() if p.is_file()}
    assert len(ran) == 12, sorted(ran)
    assert len({ran[f"grouped_{i}"] for i in range(6)}) == 1, ran
    assert len({ran[f"free_{i}"] for i in range(6)}) > 1, ran  # the others did spread
