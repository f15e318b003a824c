"""tests/spark runs on the one SparkSession of the test session: the ``spark`` fixture of
tests/conftest.py (the documentation's Spark examples share it), on :data:`MASTER`."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from tests.conftest import MASTER

__all__ = ["MASTER"]
