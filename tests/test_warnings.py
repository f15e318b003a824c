"""The suite's runs are not noisy with third-party notices (issue 36): pyspark 4.3's notice
about pandas 3 and torch's about the ``torch.set_vital`` that torchdata's
``StatefulDataLoader`` calls are hidden by the ``filterwarnings`` of pyproject.toml, by
message, category and issuing module, and any other warning still shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import warnings


def test_probe():
    import pyspark.testing.utils  # what SparkSession.builder.getOrCreate() imports
    from torchdata.stateful_dataloader import StatefulDataLoader

    assert list(StatefulDataLoader(list(range(3)), batch_size=None)) == [0, 1, 2]
    warnings.warn("a warning of the probe's own")
"""


def run_probe(tmp_path: Path, *options: str) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), *options,
         str(tmp_path / "test_probe.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_known_third_party_notices_are_hidden_and_nothing_else(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("torchdata")
    out = run_probe(tmp_path)
    assert "a warning of the probe's own" in out and "1 warning" in out, out
    assert "pandas >= 3" not in out and "set_vital" not in out, out
    # the probe does raise both: without the filters they show
    bare = run_probe(tmp_path, "-o", "filterwarnings=")
    assert "PySpark does not yet fully support pandas >= 3" in bare, bare
    assert "'set_vital' is deprecated" in bare and "3 warnings" in bare, bare
