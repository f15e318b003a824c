"""Compile the modules the test suite imports, once, before its workers start.

``make test`` installs the dev venv with ``pip install --no-compile``: pip would otherwise
byte-compile every module of every package it installs (about 27,000 files, a minute of one
core), while the suite imports about 4,000 of them. This script imports those, so Python
writes their compiled files (``__pycache__``) once, here, instead of each of the suite's
worker processes compiling the same modules at the same moment. A module missing from the
list costs nothing but its compile time at its first import.

Run by the Makefile (``.venv/.warm``) with ``PYTHONDONTWRITEBYTECODE`` unset:
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python tools/warm_bytecode.py
"""

from __future__ import annotations

import importlib
import sys

# what most test modules, the CLI, Spark's Python workers and the S3 server import
MODULES = (
    "numpy",
    "torch",
    "safetensors",
    "ztensor",
    "scipy.sparse",
    "pyarrow.parquet",
    "pandas",
    "pyspark.sql",
    "pyspark.worker",
    "transformers",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.llama.modeling_llama",
    "transformers.models.bert.modeling_bert",
    "huggingface_hub",
    "boto3",
    "s3fs",
    "moto.server",
    "hypothesis",
    "pytest",
    "xdist",
    "tensorfile",
    "tensorfile.cli.app",
    "tensorfile.dataset",
    "tensorfile.spark",
)


def main() -> int:
    if sys.flags.dont_write_bytecode:
        print("warm_bytecode: PYTHONDONTWRITEBYTECODE is set, nothing would be written")
        return 2
    for name in MODULES:
        importlib.import_module(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
