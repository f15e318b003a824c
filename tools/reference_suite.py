"""Run the reference's own Python tests against tensorfile through an import swap.

The reference (github.com/huggingface/safetensors) is not vendored: point this script at a
checkout of it. It copies ``bindings/python/tests`` to a scratch folder (the tests write
files next to themselves), writes a package named ``safetensors`` whose modules re-export
``tensorfile.safetensors`` and its framework modules, puts it first on ``PYTHONPATH`` (ahead
of any installed ``safetensors``) and runs pytest there with this interpreter::

    python tools/reference_suite.py /path/to/safetensors-checkout [pytest args...]
    make reference-suite REF=/path/to/safetensors-checkout

It prints pytest's summary and exits with pytest's status. The closing note of issue 11
records what it gave on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

FILES = [
    # paddle 3.3 crashes when it is imported after tensorflow 2.21 in one process: its file
    # is collected first
    "test_paddle_comparison.py",
    "test_simple.py",
    "test_pt_comparison.py",
    "test_pt_model.py",
    "test_handle.py",
    "test_pread_backend.py",
    "test_threadable.py",
    "test_multithreaded.py",
    "test_tf_comparison.py",
    "test_flax_comparison.py",
    "test_mlx_comparison.py",
]
"""The reference's test files the drop-in must pass."""

MODULES = ["", "numpy", "torch", "tensorflow", "flax", "mlx", "paddle"]
"""The reference's modules (``""`` is the package itself)."""

_SHIM = '''"""Import-swap shim: re-exports {target} (made by tools/reference_suite.py)."""
import importlib as _importlib

_module = _importlib.import_module("{target}")
globals().update(
    {{k: v for k, v in vars(_module).items() if not (k.startswith("__") and k.endswith("__"))}}
)
__version__ = getattr(_module, "__version__", None)


def __getattr__(name):
    return getattr(_module, name)
'''


def write_shim(folder: str) -> str:
    """Write the ``safetensors`` stand-in package under ``folder``; return the folder."""
    package = os.path.join(folder, "safetensors")
    os.makedirs(package, exist_ok=True)
    for name in MODULES:
        target = "tensorfile.safetensors" + (f".{name}" if name else "")
        with open(os.path.join(package, f"{name or '__init__'}.py"), "w") as f:
            f.write(_SHIM.format(target=target))
    return folder


def main(argv: list[str]) -> int:
    """Run the suite; the exit status is pytest's."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    tests = os.path.join(argv[0], "bindings", "python", "tests")
    if not os.path.isdir(tests):
        print(
            f"{tests} is not a folder: pass a checkout of huggingface/safetensors", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="tensorfile-reference-") as scratch:
        shim = write_shim(os.path.join(scratch, "shim"))
        work = os.path.join(scratch, "work")
        shutil.copytree(tests, os.path.join(work, "tests"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, os.environ.get("PYTHONPATH", "")]))
        present = [f"tests/{f}" for f in FILES if os.path.exists(os.path.join(work, "tests", f))]
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *present]
        return subprocess.call([*cmd, *argv[1:]], cwd=work, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
