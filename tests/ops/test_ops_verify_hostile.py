"""verify against hostile checkpoints: it never blocks on a FIFO or device anywhere in a
checkpoint, a non-finite ``total_size`` is a failure (not a bare OverflowError), and its
work grows linearly with the index, however the index lies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tensorfile.ops import verify
from tensorfile.safetensors.numpy import save_file
from tests.helpers.cli import run_proc

INDEX = "model.safetensors.index.json"


def _checkpoint(folder: Path, total: object = None) -> Path:
    folder.mkdir()
    save_file({"a": np.ones(4, np.float32)}, str(folder / "s1.safetensors"))
    save_file({"b": np.ones(4, np.float32)}, str(folder / "s2.safetensors"))
    doc: dict[str, object] = {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}
    if total is not None:
        doc["metadata"] = {"total_size": total}
    (folder / INDEX).write_text(json.dumps(doc, allow_nan=True))
    return folder


def test_a_fifo_shard_is_reported_not_waited_on(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "ck")
    (folder / "s2.safetensors").unlink()
    os.mkfifo(folder / "s2.safetensors")  # opening it for reading would block forever
    code = (
        "import sys; from tensorfile.ops import verify; r = verify(sys.argv[1]); "
        "print(sorted((f.subject, f.rule) for f in r.failures))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "('s2.safetensors', 'unreadable')" in run.stdout
    cli = run_proc("verify", folder)
    assert cli.code == 1 and "FIFO" in cli.out + cli.err


@pytest.mark.parametrize("total", ["Infinity", "NaN", "-Infinity", "1e400", "12.5"])
def test_a_total_size_that_is_no_byte_count_is_a_failure(tmp_path: Path, total: str) -> None:
    folder = _checkpoint(tmp_path / "ck")
    text = (
        (folder / INDEX).read_text().replace("{", '{"metadata": {"total_size": ' + total + "}, ", 1)
    )
    (folder / INDEX).write_text(text)
    report = verify(folder)
    assert [f.rule for f in report.failures] == ["total-size"]
    assert "not a byte count" in report.failures[0].message


def _lying_index(folder: Path, n: int) -> None:
    """An index placing ``n`` tensors in a shard that holds none of them."""
    wm = {f"t{i}": "s1.safetensors" for i in range(n)}
    wm["a"] = "s1.safetensors"
    (folder / INDEX).write_text(json.dumps({"weight_map": wm}))


def _best(folder: Path, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        report = verify(folder)
        times.append(time.perf_counter() - start)
        assert not report.ok
    return min(times)


def test_verify_grows_linearly_with_a_lying_index(tmp_path: Path) -> None:
    """20,000 misplaced entries took ~15 s when the check was a scan per entry (quadratic);
    growth from 10,000 to 40,000 entries is measured, not a time limit: quadratic work
    grows 16x, linear 4x."""
    small, big = _checkpoint(tmp_path / "small"), _checkpoint(tmp_path / "big")
    _lying_index(small, 10_000)
    _lying_index(big, 40_000)
    report = verify(big)
    assert sum(f.rule == "missing-tensor" for f in report.failures) == 40_000
    growth = _best(big) / _best(small)
    assert growth < 9, f"verify grew {growth:.1f}x for 4x the entries"


def test_the_verdict_says_what_was_compared(tmp_path: Path) -> None:
    """OK means different things: a format without digests is only structurally valid and
    readable; verify says which, per tensor in --json and in words on the terminal."""
    from tensorfile import ztensor

    plain, summed = tmp_path / "m.safetensors", tmp_path / "m.zt"
    save_file({"w": np.ones(3, np.float32)}, str(plain))
    ztensor.save_file({"w": np.ones(3, np.float32)}, summed, checksum="sha256")
    r = verify(plain)
    assert r.ok and r.digests_checked == 0
    assert [(c.name, c.checked) for c in r.checks] == [("w", ("structure",))]
    r = verify(summed, deep=True)
    assert [(c.name, c.checked) for c in r.checks] == [("w", ("structure", "digest", "values"))]
    run = run_proc("verify", plain)
    assert run.code == 0 and "stores no digests" in run.out
    doc = json.loads(run_proc("verify", "--json", summed).out)
    assert doc["digests_checked"] == 1
    assert doc["tensors"] == [{"name": "w", "checked": ["structure", "digest"]}]
