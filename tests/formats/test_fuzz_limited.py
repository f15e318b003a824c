"""Fuzz every format in a child process under resource limits: only TensorFileError may
escape, every file is done within its time budget, and memory stays bounded.

Reproducible mutants of valid files (:mod:`tests.formats.mutants`) are written to a folder
and read every way tensorfile offers (:mod:`tests.formats.fuzz_worker`) by a fresh
interpreter whose address space is capped at 2 GiB (``RLIMIT_AS``), whose CPU time is
capped, and whose every file is interrupted after 10 s. An allocation sized by a claim would
be a MemoryError there, a hang a ``SLOW`` line: both fail the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.formats.limits import GIB, run_limited
from tests.formats.mutants import SEEDS, mutants

PER_FORMAT = 500


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_mutants_under_resource_limits(tmp_path: Path, fmt: str) -> None:
    for i, data in enumerate(mutants(fmt, PER_FORMAT, seed=0)):
        (tmp_path / f"{fmt}-{i:04d}.bin").write_bytes(data)
    for i, data in enumerate(SEEDS[fmt]()):  # the seeds themselves read cleanly too
        (tmp_path / f"{fmt}-seed{i}.bin").write_bytes(data)
    code = f"from tests.formats.fuzz_worker import main\nmain({str(tmp_path)!r})\n"
    printed, peak = run_limited(code, address_space=2 * GIB, cpu_seconds=300, timeout=400)
    lines = printed.splitlines()
    problems = [line for line in lines if line.startswith(("FOREIGN", "SLOW"))]
    assert not problems, "\n".join(problems)
    done = lines[-1].split()
    assert done[0] == "DONE" and int(done[1]) == PER_FORMAT + len(SEEDS[fmt]())
    assert int(done[2]) >= 10, f"only {done[2]} mutants opened: the fuzz stays too shallow"
    assert peak < GIB, f"peak RSS {peak >> 20} MiB"


def test_the_worker_reports_foreign_exceptions(tmp_path: Path) -> None:
    # the check itself can fail: a reader that lets a ValueError out is reported
    (tmp_path / "safetensors-0000.bin").write_bytes(SEEDS["safetensors"]()[0])
    code = (
        "import tensorfile.formats.safetensors._parse as p\n"
        "def boom(*a, **k):\n"
        "    raise ValueError('not ours')\n"
        "p.parse_header = boom\n"
        "import tensorfile.formats.safetensors._reader as r\n"
        "r.parse_header = boom\n"
        f"from tests.formats.fuzz_worker import main\nmain({str(tmp_path)!r})\n"
    )
    printed, _ = run_limited(code)
    assert "FOREIGN safetensors-0000.bin" in printed and "ValueError" in printed
