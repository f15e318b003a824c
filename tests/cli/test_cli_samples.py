"""``tensorfile samples DIR`` and ``python -m tensorfile.samples DIR``: the documentation's
sample files from the package alone, written atomically, never over a different file unless
told, and each one printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tensorfile
import tensorfile.dataset
from tensorfile.errors import InvalidArgumentError
from tensorfile.samples import NAMES, make, state_dict
from tests.helpers.cli import ERROR_PREFIX, run, run_proc


def _listing(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_command_writes_each_sample_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "examples"
    done = run_proc("samples", out)
    assert done.code == 0 and done.err == "", done.err
    lines = done.out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["wrote", str(out / n) + (os.sep if n in ("ckpt", "data") else "")] for n in NAMES
    ]
    assert lines[0] == f"wrote     {out / 'model.safetensors'}  (17,096 bytes)"
    assert sorted(p.name for p in out.iterdir()) == sorted(NAMES)  # no temporary folder left
    again = run_proc("samples", out)
    assert [line.split()[0] for line in again.out.splitlines()] == ["unchanged"] * len(NAMES)


def test_python_m_is_the_same_command(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "240"}
    done = subprocess.run(
        [sys.executable, "-m", "tensorfile.samples", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["wrote"] * len(NAMES)


def test_the_samples_read_as_the_documentation_says(tmp_path: Path) -> None:
    """Every format holds the same seven tensors; ``model.pt`` (written without torch) is
    what ``torch.load(weights_only=True)`` reads back exactly, strides and dtypes too."""
    torch = pytest.importorskip("torch")
    make(tmp_path)
    want = state_dict()
    for name in ("model.safetensors", "model.zt", "ckpt", "model.pt"):
        with tensorfile.open(tmp_path / name) as f:
            assert sorted(f.keys()) == sorted(want), name
            for key, arr in want.items():
                got = f.get_tensor(key)
                assert got.dtype == arr.dtype and got.tobytes() == arr.tobytes(), (name, key)
    loaded = torch.load(tmp_path / "model.pt", weights_only=True, mmap=True)
    assert list(loaded) == list(want)
    for key, arr in want.items():
        t = loaded[key]
        if arr.dtype == ml_dtypes.bfloat16:
            assert t.dtype == torch.bfloat16
            t = t.view(torch.int16)
            arr = arr.view(np.int16)
        assert t.is_contiguous() and t.shape == arr.shape
        assert np.array_equal(t.numpy(), arr), key
    with tensorfile.open(tmp_path / "model-v2.safetensors") as f:
        assert f.keys()[-1] == "layers.1.mlp.weight" and len(f) == 8
    ds = tensorfile.dataset.open(tmp_path / "data")
    assert len(ds) == 1000 and ds[42]["label"] == 2


def test_the_generator_needs_neither_torch_nor_pyarrow(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "for name in ('torch', 'pyarrow', 'pandas'):\n"
        "    sys.modules[name] = None  # any import of them fails\n"
        "from tensorfile.samples import make\n"
        f"print([w.action for w in make({str(tmp_path)!r})])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(["wrote"] * len(NAMES))


def test_a_different_file_is_never_overwritten_without_force(tmp_path: Path, capsys: Any) -> None:
    make(tmp_path)
    (tmp_path / "model.zt").write_bytes(b"my own model")
    shard = next((tmp_path / "data").glob("part-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x01")  # one byte of one row changed
    before = _listing(tmp_path)
    done = run(capsys, "samples", tmp_path)
    assert done.code == 2 and done.out == ""
    assert done.err.startswith(ERROR_PREFIX) and done.err.count("\n") == 1
    assert f"{tmp_path / 'model.zt'}, {tmp_path / 'data'} exist and are not the samples" in (
        done.err
    )
    assert "nothing was written" in done.err and "--force" in done.err
    assert _listing(tmp_path) == before  # nothing written, no temporary folder left
    done = run(capsys, "samples", tmp_path, "--force")
    assert done.code == 0, done.err
    actions = {line.split()[1]: line.split()[0] for line in done.out.splitlines()}
    assert actions[str(tmp_path / "model.zt")] == "replaced"
    assert actions[str(tmp_path / "data") + os.sep] == "replaced"
    assert actions[str(tmp_path / "model.safetensors")] == "unchanged"
    with tensorfile.open(tmp_path / "model.zt") as f:
        assert len(f) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES)


def test_a_rerun_keeps_the_dataset_whose_shard_names_differ(tmp_path: Path) -> None:
    """A dataset's shard names hold a new id on each write: the same rows are the same
    sample (a rerun does not refuse, nor rewrite it)."""
    make(tmp_path)
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert {w.name: w.action for w in make(tmp_path)}["data"] == "unchanged"
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == names


def test_a_file_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidArgumentError, match="is a file, not a folder"):
        make(tmp_path / "f")


# Runs ``make(DIR, force=True)`` once per kill point in a forked child that SIGKILLs itself
# just before its ``at``-th rename in DIR itself (the commit; the writers' own renames are
# inside the staging folder): a real kill at every step of the commit, deterministically.
_KILLED = r"""
import os, signal, sys
from pathlib import Path
import tensorfile.samples as samples
real = os.replace
for at, folder in enumerate(Path(p) for p in sys.argv[1:]):
    pid = os.fork()
    if pid == 0:
        calls = [0]
        def replace(src, dst, *args, **kwargs):
            if folder in (Path(src).parent, Path(dst).parent):
                if calls[0] == at:
                    os.kill(os.getpid(), signal.SIGKILL)
                calls[0] += 1
            return real(src, dst, *args, **kwargs)
        os.replace = replace
        samples.make(folder, force=True)
        os._exit(0)
    print(at, os.waitpid(pid, 0)[1])
"""


def _mine(folder: Path) -> None:
    """A user's own ``model.safetensors`` (a file) and ``ckpt/`` (a folder)."""
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"mine")
    (folder / "ckpt").mkdir()
    (folder / "ckpt" / "mine.txt").write_text("mine")


def _is_mine(path: Path) -> bool:
    return (path / "mine.txt").is_file() if path.is_dir() else path.read_bytes() == b"mine"


def test_a_kill_at_any_step_hides_no_file_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    """Regression (hostile review of issue 36, L4): a SIGKILL left the staging folder
    ``.tensorfile-samples-*`` for good (later runs never removed it), and with ``--force`` a
    kill between moving the user's file aside and moving the sample in left the user's file
    hidden in it. Now a file is replaced in one rename (never hidden), a folder moved aside
    is put back by the next run, and the next run leaves no staging folder."""
    folders = [tmp_path / f"run{at}" for at in range(8)]  # the commit has 7 renames
    for folder in folders:
        _mine(folder)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, *map(str, folders)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = [line.split()[1] for line in proc.stdout.splitlines()]
    assert status[0] == "9" and set(status) <= {"9", "0"}, status  # killed; run to its end
    for folder in folders:
        assert (folder / "model.safetensors").is_file(), folder  # a file is never hidden
        try:  # the next run (without --force): a folder moved aside is back first
            make(folder)
            refused = ""
        except InvalidArgumentError as exc:
            refused = str(exc)
        kept = [n for n in ("model.safetensors", "ckpt") if str(folder / n) in refused]
        assert bool(kept) == bool(refused), refused
        assert [n for n in ("model.safetensors", "ckpt") if _is_mine(folder / n)] == kept
        assert {p.name for p in folder.iterdir()} <= set(NAMES), folder  # no staging left
        done = {w.name: w.action for w in make(folder, force=True)}
        assert [n for n in kept if done[n] == "replaced"] == kept
        assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES)


_RACER = r"""
import os, sys, time
from pathlib import Path
import tensorfile.samples as samples
folder, me, other = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
real, first = os.replace, [True]
def replace(src, dst, *args, **kwargs):
    if first[0] and Path(dst).parent == folder:  # this run's first rename into DIR
        first[0] = False
        me.touch()  # wait (a while) for the other run to reach the same point
        end = time.monotonic() + 2
        while not other.exists() and time.monotonic() < end:
            time.sleep(0.01)
    return real(src, dst, *args, **kwargs)
os.replace = replace
print(sorted({w.action for w in samples.make(folder)}))
"""


def test_two_runs_on_one_folder_take_turns(tmp_path: Path) -> None:
    """Regression (hostile review of issue 36, L5): two runs on one empty folder that
    reached their renames together: the loser failed with a raw ``OSError`` [Errno 39]
    (its ``ckpt`` folder renamed onto the other's). Runs take turns now: one writes, the
    other finds every sample in place."""
    folder = tmp_path / "examples"
    a, b = tmp_path / "a.ready", tmp_path / "b.ready"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(folder), str(me), str(other)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other in ((a, b), (b, a))
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert sorted(out.strip() for out, _ in outs) == ["['unchanged']", "['wrote']"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES)
