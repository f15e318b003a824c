"""A plain install (no torch, no pyarrow) gets a message naming the extra to install, never a
bare ModuleNotFoundError or the command line's "internal error": run in a real interpreter
where ``import torch`` / ``import pyarrow`` fail (``sys.modules[name] = None``, set before
tensorfile is imported), through the real API and command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import tensorfile.dataset
from tensorfile.core.extras import install_hint, needing, require
from tensorfile.errors import UnsupportedError


def _without(modules: list[str], body: str, first: Path | None = None) -> dict[str, str]:
    """Run ``body`` in a fresh interpreter where ``modules`` cannot be imported (``first``:
    a folder put first on its PYTHONPATH); what each step reported, by step name (the body
    calls ``step(name, callable)``)."""
    code = textwrap.dedent(
        """
        import json, sys
        for name in {modules!r}:
            sys.modules[name] = None
        import tensorfile
        from tensorfile.errors import TensorFileError
        found = {{}}
        def step(name, call):
            try:
                call()
                found[name] = "ok"
            except TensorFileError as exc:
                found[name] = type(exc).__name__ + ": " + str(exc)
            except Exception as exc:
                found[name] = "FOREIGN " + type(exc).__name__ + ": " + str(exc)
        """
    ).format(modules=modules)
    code += textwrap.dedent(body) + "\nprint(json.dumps(found))\n"
    env = dict(os.environ)
    if first is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(first), env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def test_pickles_open_and_convert_without_torch(tmp_path: Path) -> None:
    """tensorfile reads PyTorch pickles with its own reader (zip included): no torch."""
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2), "epoch": 1}, path)
    found = _without(
        ["torch"],
        f"""
        import contextlib, io
        from tensorfile.cli.app import main
        step("open", lambda: tensorfile.open({str(path)!r}))
        step("convert", lambda: tensorfile.convert({str(path)!r}, {str(tmp_path / "o.npz")!r}))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["inspect", {str(path)!r}])
        found["cli"] = f"{{code}}"
        """,
    )
    assert found == {"open": "ok", "convert": "ok", "cli": "0"}, found
    with tensorfile.open(str(tmp_path / "o.npz")) as f:
        assert f.get_tensor("w").tolist() == [1.0, 1.0]


def test_dataset_loaders_without_their_packages_name_the_extra(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    tensorfile.dataset.write({"x": np.arange(8, dtype=np.float32)}, str(out), batch_size=4)
    found = _without(
        ["torch", "pyarrow"],
        f"""
        import tensorfile.dataset
        ds = tensorfile.dataset.open({str(out)!r})
        step("read", lambda: ds[0])
        step("to_torch", lambda: ds.to_torch())
        step("to_arrow", lambda: ds.to_arrow())
        step("iter_arrow", lambda: next(ds.iter_arrow(2)))
        step("to_hf", lambda: ds.to_hf())
        """,
    )
    assert found["read"] == "ok"  # reading samples needs neither
    want = {
        "to_torch": ("Dataset.to_torch() needs torch", "torch"),
        "to_arrow": ("Dataset.to_arrow() needs pyarrow", "dataset"),
        "iter_arrow": ("Dataset.iter_arrow() needs pyarrow", "dataset"),
        "to_hf": ("Dataset.to_hf() needs pyarrow", "hf"),
    }
    for step, (text, extra) in want.items():
        assert found[step].startswith(f"UnsupportedError: {text}, which is not installed"), found
        assert found[step].endswith(install_hint(extra=extra)), found[step]


def test_the_helper_names_the_package_and_leaves_tensorfile_bugs_alone() -> None:
    with pytest.raises(
        UnsupportedError, match=r"x needs no_pkg_here, .*pip install 'tensorfile\[e\]'"
    ):
        require("no_pkg_here.sub", "x", extra="e")
    with pytest.raises(UnsupportedError, match=r"pip install gguf$"):
        with needing("dequantizing", package="gguf"):
            import no_gguf_here  # type: ignore[import-not-found]  # noqa: F401
    with pytest.raises(ModuleNotFoundError):  # a module of tensorfile's own missing: a bug
        require("tensorfile.no_such_module", "x", extra="e")


def test_s3_datasets_without_s3fs_name_the_s3_extra() -> None:
    """An S3 store reads with tensorfile's own client, which needs no package (so does a
    single s3:// file); listing, writing and deleting are s3fs's: without it, each says
    which extra to install, before anything connects."""
    found = _without(
        ["s3fs"],
        """
        from tensorfile.sources import store_for
        store = store_for("s3://bucket/ds")
        step("list", lambda: store.list_files())
        step("write", lambda: store.write_atomic("a.json", b"{}"))
        step("remove", lambda: store.remove("a.json"))
        """,
    )
    for step in ("list", "write", "remove"):
        assert found[step].startswith("UnsupportedError: s3://bucket/"), found
        assert found[step].endswith(
            "needs s3fs, which is not installed: " + install_hint(extra="s3")
        ), found[step]


BROKEN_TORCH = {
    "part": "from torch._C import _initExtension  # a build without its C extension\n",
    "library": "raise OSError('libtorch_cpu.so: cannot open shared object file')\n",
    "dependency": "import typing_extensions_nope  # a dependency that is missing\n",
}


@pytest.mark.parametrize("how", sorted(BROKEN_TORCH))
def test_an_installed_torch_that_fails_to_import_is_not_called_missing(
    tmp_path: Path, how: str
) -> None:
    """A real package named torch, first on the path, whose import fails: "installed but
    failed to import" with its own error, never "not installed" (which would send the user
    to reinstall what is there) nor an I/O error (which reads as the file's)."""
    (tmp_path / "broken" / "torch").mkdir(parents=True)
    (tmp_path / "broken" / "torch" / "__init__.py").write_text(BROKEN_TORCH[how])
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)
    out = tmp_path / "ds"
    tensorfile.dataset.write({"x": np.arange(4, dtype=np.float32)}, str(out), batch_size=2)
    found = _without(
        [],
        f"""
        import contextlib, io
        import tensorfile.dataset
        from tensorfile.cli.app import main
        step("open", lambda: tensorfile.open({str(path)!r}))
        step("to_torch", lambda: tensorfile.dataset.open({str(out)!r}).to_torch())
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["inspect", {str(path)!r}])
        found["cli"] = f"{{code}} {{err.getvalue()}}"
        """,
        first=tmp_path / "broken",
    )
    error = {
        "part": "ModuleNotFoundError: No module named 'torch._C'",
        "library": "OSError: libtorch_cpu.so: cannot open shared object file",
        "dependency": "ModuleNotFoundError: No module named 'typing_extensions_nope'",
    }[how]
    step = "to_torch"
    assert "needs torch, which is installed but failed to import: " + error in found[step]
    assert "not installed" not in found[step] and "I/O error" not in found[step], found
    # (a pickle is read without torch: a broken torch is no matter to it)
    assert found["open"] == "ok" and found["cli"] == "0 ", found
