"""What ``make test`` needs beyond Python and ``make``, checked before it installs anything, so
that a missing piece is one line that says what to install, not a failure deep in a test
(issue 36). Run by the Makefile with the Python that makes the venvs (standard library only):

    python3.11 tools/check_prereqs.py     # silent, exit 0: all there
    make test: the Spark tests need Java 17 or newer (pyspark 4): ...   # one line each, exit 1

It checks:

* Java 17 or newer, which pyspark 4 starts for the Spark tests: ``$JAVA_HOME/bin/java`` when
  ``JAVA_HOME`` is set (as pyspark does), else ``java`` on ``PATH``.
* Debian's ``chromium``, which the docs site's smoke test drives: when it is missing, the
  Makefile's ``browser`` target installs it with ``apt-get``, which needs root; anyone else is
  told to install it.
* Free disk space, when ``.venv`` is still to be made: it takes about 6 GB (5.7 GiB measured),
  with every framework the drop-in supports.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

JAVA = 17
JAVA_PACKAGE = "openjdk-17-jre-headless"
VENV_BYTES = 7 * 10**9  # .venv (about 6 GB) and some room for pip's downloads


def java_problem(env: dict[str, str]) -> str | None:
    """Why pyspark 4 could not start its JVM, or None: Java 17+ at ``$JAVA_HOME/bin/java``
    or on ``PATH``."""
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        where = f"JAVA_HOME={home}"
        if not os.access(java, os.X_OK):
            return f"there is no {java} (from {where}); {_install()}"
    else:
        found_java = shutil.which("java", path=env.get("PATH", ""))
        where = "PATH"
        if found_java is None:
            return f"there is no `java` on PATH; {_install()}"
        java = found_java
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} (from {where}) does not run ({exc}); {_install()}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if done.returncode != 0 or found is None:
        return f"`{java} -version` (from {where}) says no version; {_install()}"
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0_292": Java 8
        major = int(found.group(2))
    if major < JAVA:
        return f"{java} (from {where}) is Java {major}; {_install()}"
    return None


def _install() -> str:
    return (
        f"the Spark tests need Java {JAVA} or newer (pyspark 4): "
        f"apt-get install {JAVA_PACKAGE} (or set JAVA_HOME to a Java {JAVA}+)"
    )


def chromium_problem(env: dict[str, str]) -> str | None:
    """Why the docs site's smoke test would have no chromium, or None (there is one, or
    ``make`` can install it: root with ``apt-get``)."""
    path = env.get("PATH", "")
    if shutil.which("chromium", path=path):
        return None
    missing = "there is no `chromium` on PATH, which the docs site's smoke test drives"
    if os.geteuid() != 0:
        return f"{missing}: sudo apt-get install chromium (make test installs it only as root)"
    if shutil.which("apt-get", path=path):
        return None  # the Makefile's browser target installs it
    return f"{missing}, and no apt-get to install it with: install Chromium as `chromium`"


def disk_problem(root: Path) -> str | None:
    """Why ``.venv`` would not fit, or None (it is made already, or there is room)."""
    if (root / ".venv" / ".dev").exists():
        return None
    free = shutil.disk_usage(root).free
    if free >= VENV_BYTES:
        return None
    return (
        f".venv takes about 6 GB (every framework the drop-in supports) and pip keeps its "
        f"downloads: make room for {VENV_BYTES / 10**9:.0f} GB; {root} has "
        f"{free // 10**7 / 100:.2f} GB free"  # rounded down: 6.996 GB is not 7.0
    )


def problems(root: Path, env: dict[str, str]) -> list[str]:
    """Every missing piece, one line each (empty: all there)."""
    found = [java_problem(env), chromium_problem(env), disk_problem(root)]
    return [f"make test: {p}" for p in found if p is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    lines = problems(args.root, dict(os.environ))
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
