"""A virtual environment as a user of this checkout gets it: ``pip install .`` (the package
and its base dependencies, no extras), pinned by constraints.txt as ``make`` pins its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in")


def copy_project(dest: Path) -> Path:
    """What a build of tensorfile reads (pyproject.toml, setup.py, MANIFEST.in, README.md and
    src/), copied into ``dest`` (made), so that a build's ``build/`` and ``*.egg-info`` land
    there, not in the checkout."""
    dest.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    return dest


def plain_install(root: Path) -> Path:
    """A new virtual environment in ``root/venv`` with ``pip install .`` of this checkout
    (build isolation as a user has it, versions pinned by constraints.txt); its ``bin``
    folder."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    project = copy_project(root / "project")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            *("-m", "pip", "install", "--disable-pip-version-check", "-q"),
            *("-c", str(ROOT / "constraints.txt"), str(project)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip install . failed:\n{done.stdout}\n{done.stderr}"[-4000:]
    return venv / "bin"
