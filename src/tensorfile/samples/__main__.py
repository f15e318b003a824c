"""``python -m tensorfile.samples DIR [--force] [--json]``: the same as ``tensorfile samples``."""

from __future__ import annotations

import sys

from ..cli.app import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(["samples", *sys.argv[1:]]))
