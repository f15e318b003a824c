"""Packaging beyond pyproject.toml: the opt-in import hook.

``src/tensorfile-patch.pth`` must land in the root of site-packages (Python's ``site`` runs
the ``import`` lines of the ``.pth`` files it finds there at every interpreter start), not
inside the ``tensorfile`` package. ``build_py`` copies it to the root of the build folder,
which becomes the root of the wheel (``pip install .``). For an editable install (``pip
install -e .``, PEP 660) setuptools throws the build folder away and installs the editable
wheel's own folder, so the hook goes there. The hook does nothing unless
``TENSORFILE_PATCH_SAFETENSORS`` is set (see ``tensorfile.patching``).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK = Path(__file__).resolve().parent / "src" / "tensorfile-patch.pth"


class build_py_with_hook(build_py):
    """``build_py``, then the import hook into the root of what is installed."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.copy_file(str(HOOK), str(Path(root) / HOOK.name), preserve_mode=False)


setup(cmdclass={"build_py": build_py_with_hook})
