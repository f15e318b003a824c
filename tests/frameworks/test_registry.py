"""The framework names and adapters: every name the reference accepts, an unknown name or
a framework that is not installed refused before any file is opened, and no framework
imported before it is used."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tensorfile.errors import UnsupportedError
from tensorfile.frameworks import framework_name, get_framework
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import BRIDGES

# the reference's names (bindings/python/src/lib.rs, Framework::extract), and tensorfile's
NAMES = {
    "pt": "torch", "torch": "torch", "pytorch": "torch", "np": "numpy", "numpy": "numpy",
    "tf": "tensorflow", "tensorflow": "tensorflow", "jax": "jax", "flax": "jax",
    "mlx": "mlx", "paddle": "paddle",
}  # fmt: skip


@pytest.mark.parametrize(("alias", "canonical"), sorted(NAMES.items()))
def test_every_reference_name_is_known(alias: str, canonical: str) -> None:
    assert framework_name(alias) == canonical


@pytest.mark.parametrize("name", ["mxnet", "", "np ", "tensorflow2", None, 3])
def test_an_unknown_name_is_refused_listing_the_known_ones(name: Any, tmp_file: str) -> None:
    st_numpy.save_file({"a": np.zeros(1)}, tmp_file)
    with pytest.raises(UnsupportedError, match="tf \\(tensorflow\\), mlx, paddle"):
        safe_open(tmp_file, framework=name)


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [
        ("tf", "tensorflow", "tensorflow"),
        ("flax", "jax.numpy", "jax"),
        ("mlx", "mlx.core", "mlx"),
        ("paddle", "paddle", "paddle"),
    ],
)
def test_a_framework_not_installed_names_its_extra(
    name: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch, tmp_file: str
) -> None:
    for part in {module, module.partition(".")[0]}:
        monkeypatch.setitem(sys.modules, part, None)  # `import module` now fails
    with pytest.raises(UnsupportedError, match=rf"pip install 'tensorfile\[{extra}\]'"):
        get_framework(name)
    face = BRIDGES[name].face
    st = __import__(face, fromlist=["load"])
    st_numpy.save_file({"a": np.zeros(1)}, tmp_file)
    with pytest.raises(UnsupportedError, match=module.partition(".")[0]):
        st.load_file(tmp_file)
    with pytest.raises(UnsupportedError, match=module.partition(".")[0]):
        st.save({"a": object()})


def test_framework_modules_import_no_framework_until_used() -> None:
    code = (
        "import sys\n"
        "import tensorfile.safetensors.tensorflow, tensorfile.safetensors.flax\n"
        "import tensorfile.safetensors.mlx, tensorfile.safetensors.paddle\n"
        "import tensorfile.frameworks\n"
        "heavy = ('tensorflow', 'jax', 'mlx', 'paddle', 'torch', 'flax')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
