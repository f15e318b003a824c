"""``make test`` runs the suite in pytest-xdist worker processes (see the Makefile): every
worker must collect the same test names, and what the workers share is made once
(:mod:`tests.helpers.workers`)."""

from __future__ import annotations

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
