"""The opt-in import hook (issue 25): ``TENSORFILE_PATCH_SAFETENSORS=1`` in the environment
makes ``import safetensors`` give tensorfile's drop-in in every interpreter started with it,
through ``tensorfile-patch.pth``, which the package installs in the root of site-packages.

Each case starts a real interpreter of a virtual environment where ``pip install .`` put
the hook in site-packages, so Python's ``site`` runs it at startup (tensorfile and the
libraries come from ``PYTHONPATH``: this checkout's, and the test environment's). The
packaging itself is checked by building both wheels (``pip install .`` and ``pip install
-e .`` install these)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

import tensorfile
from tests.helpers.make import as_a_user
from tests.helpers.venvs import copy_project

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "src" / "tensorfile-patch.pth"
SRC = Path(tensorfile.__file__).resolve().parents[1]
ENV = "TENSORFILE_PATCH_SAFETENSORS"


@pytest.fixture(scope="module")
def python(plain_venv: Path) -> Path:
    """The interpreter of a virtual environment where ``pip install .`` put the hook in
    site-packages (the session's plain install, tests/helpers/venvs.py)."""
    return plain_venv / "python"


def start(
    python: Path, code: str, value: str | None, *, path: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "PYTHONPATH")}
    if value is not None:
        env[ENV] = value
    deps = sysconfig.get_paths()["purelib"]  # numpy, torch, safetensors... of the test's env
    env["PYTHONPATH"] = os.pathsep.join([*(path or []), str(SRC), deps])
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


_WHICH = """
    import sys
    print("tensorfile imported at startup:", "tensorfile" in sys.modules)
    import safetensors.torch
    print("load_file:", safetensors.torch.load_file.__module__)
"""
_WHICH_LIGHT = _WHICH.replace("torch", "numpy")  # the same question, without torch's import


def test_the_hook_is_one_import_line() -> None:
    lines = HOOK.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("import ")  # site runs only those


def test_unset_the_reference_loads_and_nothing_of_tensorfile_is_imported(python: Path) -> None:
    done = start(python, _WHICH, None)
    assert done.returncode == 0, done.stderr
    assert "tensorfile imported at startup: False" in done.stdout
    assert "load_file: safetensors.torch" in done.stdout
    assert done.stderr == ""


def test_set_safetensors_is_tensorfile(python: Path) -> None:
    done = start(python, _WHICH, "1")
    assert done.returncode == 0, done.stderr
    assert "load_file: tensorfile.safetensors.torch" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("value", "patched"),
    [("true", True), (" ON ", True), ("0", False), ("off", False), ("", False)],
)
def test_on_and_off_values(python: Path, value: str, patched: bool) -> None:
    done = start(python, _WHICH_LIGHT, value)
    face = "tensorfile.safetensors.numpy" if patched else "safetensors.numpy"
    assert f"load_file: {face}\n" in done.stdout and done.stderr == ""


_LOADED = """
    import sys
    def loaded():
        return sorted(m for m in sys.modules if m.split(".")[0] in ("tensorfile", "numpy"))
    print("at startup:", loaded())
"""


@pytest.mark.parametrize("value", [None, "0", "false", "off", " No "])
def test_switched_off_the_hook_imports_nothing(python: Path, value: str | None) -> None:
    """Issue 35: switched off, neither tensorfile nor numpy is imported at startup (numpy
    before a program can set ``OPENBLAS_NUM_THREADS``, and most of a second per start)."""
    done = start(python, _LOADED, value)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "at startup: []\n"


def test_switched_on_the_hook_imports_the_finder_alone(python: Path) -> None:
    """Issue 35: switched on, startup loads ``tensorfile.patching`` alone (no numpy, not the
    tensorfile package); ``import safetensors`` brings the rest, and the module the hook
    loaded is the one ``tensorfile`` has, so unpatching works."""
    done = start(
        python,
        _LOADED
        + """
    import numpy as np
    import safetensors.numpy
    print("load_file:", safetensors.numpy.load_file.__module__)
    data = safetensors.numpy.save({"a": np.arange(6, dtype=np.float32).reshape(2, 3)})
    print("loaded:", safetensors.numpy.load(data)["a"].tolist())
    import tensorfile, tensorfile.patching
    print("one module:", tensorfile.patching is sys.modules["tensorfile.patching"])
    unpatch = tensorfile.patching.unpatch_safetensors
    print("same function:", tensorfile.unpatch_safetensors is unpatch)
    tensorfile.unpatch_safetensors()
    import safetensors.numpy
    print("unpatched:", safetensors.numpy.load_file.__module__)
    """,
        "1",
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "at startup: ['tensorfile.patching']",
        "load_file: tensorfile.safetensors.numpy",
        "loaded: [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]",
        "one module: True",
        "same function: True",
        "unpatched: safetensors.numpy",
    ]


def test_the_hook_and_patch_from_environment_agree_on_off_values() -> None:
    """The hook decides "off" before importing anything, so it spells the values out."""
    from tensorfile import patching

    line = HOOK.read_text()
    spelled = line.split(".strip().lower() in ", 1)[1].split(" or hasattr(", 1)[0]
    assert ast.literal_eval(spelled) == patching._OFF


def test_an_unknown_value_is_one_line_and_no_patch(python: Path) -> None:
    done = start(python, _WHICH_LIGHT, "banana")
    assert done.returncode == 0
    assert "load_file: safetensors.numpy" in done.stdout
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"tensorfile: {ENV} is set but safetensors was not patched: ")
    assert "'banana'" in done.stderr


def _package(root: Path, **modules: str | None) -> Path:
    """A ``tensorfile`` package in ``root`` holding ``modules`` (name: source), to put
    before the real one on the path."""
    fake = root / "tensorfile"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    for name, text in modules.items():  # None: this checkout's module
        real = SRC / "tensorfile" / f"{name}.py"
        (fake / f"{name}.py").write_text(real.read_text() if text is None else text)
    return root


@pytest.mark.parametrize(
    ("modules", "why"),
    [
        ({"_hook": None, "patching": "raise RuntimeError('boom\\nsecond line')\n"},
         "RuntimeError: boom second line"),
        ({"patching": ""}, "FileNotFoundError: "),  # a package without the hook's module
    ],
)  # fmt: skip
def test_a_broken_install_never_stops_the_interpreter(
    python: Path, tmp_path: Path, modules: dict[str, str | None], why: str
) -> None:
    """A ``tensorfile`` whose hook fails to load or to patch: the interpreter starts all the
    same, with one line on stderr instead of site's traceback."""
    done = start(python, "print('started')", "1", path=[str(_package(tmp_path, **modules))])
    assert done.returncode == 0 and done.stdout == "started\n"
    prefix = f"tensorfile: {ENV} is set but safetensors was not patched: {why}"
    assert done.stderr.startswith(prefix) and done.stderr.count("\n") == 1, done.stderr


def test_the_hook_runs_the_logic_of_the_package_it_finds(python: Path, tmp_path: Path) -> None:
    """Review 35 (c07): the ``.pth`` line, copied into site-packages at install time (an
    editable install too), holds only the switch: what it does switched on is the package's
    ``_hook.run``, so a change to it reaches an installed hook without a reinstall."""
    changed = "import sys\ndef run():\n    print('the package hook ran', 'numpy' in sys.modules)\n"
    done = start(python, "print('started')", "1", path=[str(_package(tmp_path, _hook=changed))])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "the package hook ran False\nstarted\n"


def test_the_editable_install_follows_a_changed_hook(tmp_path: Path) -> None:
    """Review 35 (c07): ``make`` reinstalls the editable venvs when the hook's ``.pth`` (or
    setup.py, which installs it) changes, so no venv keeps an old hook."""
    make = shutil.which("make")
    assert make is not None
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    old = ("pyproject.toml", "constraints.txt", "setup.py", "src/tensorfile-patch.pth",
           ".venv/bin/python", ".venv-zt2/.ready")  # fmt: skip
    for name in (*old, ".venv/.core", ".venv/.dev", ".venv-zt2/.bench"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (1_000_000, 1_000_000 if name in old else 2_000_000))
    targets = (".venv/.core", ".venv/.dev", ".venv-zt2/.bench")

    def plan(target: str) -> str:
        done = subprocess.run(
            [make, "-n", "--no-print-directory", "-C", str(tmp_path), target],
            capture_output=True, text=True, timeout=60, check=True, env=as_a_user(),
        )  # fmt: skip
        return done.stdout

    for target in targets:
        assert plan(target) == f"make: '{target}' is up to date.\n"
    for changed in ("src/tensorfile-patch.pth", "setup.py"):
        os.utime(tmp_path / changed, (3_000_000, 3_000_000))
        for target in targets:
            assert "install -c constraints.txt -e " in plan(target), (changed, target)
        os.utime(tmp_path / changed, (1_000_000, 1_000_000))


def test_transformers_from_pretrained_under_the_variable(python: Path, tmp_path: Path) -> None:
    """A small BERT built from a config, saved and loaded by transformers in a process that
    only has the variable set: transformers' own ``safe_open`` is tensorfile's, and the
    weights come back equal."""
    pytest.importorskip("transformers")
    done = start(
        python,
        """
        import torch
        from transformers import BertConfig, BertModel
        import transformers.modeling_utils as mu
        print("safe_open:", mu.safe_open.__module__)
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=37)
        model = BertModel(cfg).eval()
        model.save_pretrained("OUT")
        loaded = BertModel.from_pretrained("OUT").eval()
        want, got = model.state_dict(), loaded.state_dict()
        same = want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
        print("equal:", same)
        """.replace('"OUT"', repr(str(tmp_path / "bert"))),
        "1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "safe_open: tensorfile.formats.safetensors._safe_open" in done.stdout
    assert "equal: True" in done.stdout


def test_both_wheels_put_the_hook_in_the_root_of_site_packages(tmp_path: Path) -> None:
    """``pip install .`` installs the wheel, ``pip install -e .`` the editable wheel (PEP
    660): both carry the hook at their root, which is site-packages once installed."""
    project = copy_project(tmp_path / "project")
    out = tmp_path / "dist"
    out.mkdir()
    for hook in ("build_wheel", "build_editable"):  # one process each: setuptools keeps state
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from setuptools import build_meta as b; b.{hook}({str(out)!r})",
            ],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 2, wheels
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            assert z.read(HOOK.name) == HOOK.read_bytes(), wheel.name
            record = z.read("tensorfile-0.1.0.dist-info/RECORD").decode()
            assert f"\n{HOOK.name}," in f"\n{record}"  # uninstalled with the package
