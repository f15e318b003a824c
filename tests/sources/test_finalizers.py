"""Objects nobody closed: their files close when they are collected, and nothing they hold
prints at interpreter exit.

The drop-in promise ("runs unchanged") covers stderr: a script that leaves a ``safe_open``,
a ``tensorfile.open`` reader or a dataset open and exits must print what the reference
prints, which is nothing. A ``__del__`` that looked up ``os`` at shutdown, after module
globals were torn down, printed ``Exception ignored in ... 'NoneType' object has no
attribute 'close'`` once per open file (33 times for the child script below before the fix).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorfile.sources import LocalSource, open_path
from tests.helpers.checkpoints import write_safetensors
from tests.helpers.servers import Server

ROOT = Path(__file__).resolve().parents[2]

# Leaves every kind of source, reader and dataset object open (in a list, in module globals,
# in a reference cycle, half-iterated), with torch imported, then exits.
_CHILD = r"""
import gc, io, os, sys
import numpy as np
import torch
import torch.utils.data as tud
import fsspec

import tensorfile
from tensorfile import dataset, ztensor
from tensorfile.safetensors import safe_open
from tensorfile.safetensors.numpy import save_file
from tensorfile.sources import HTTPSource, LocalSource, MemorySource
from tensorfile.sources.local.fileobj import open_file_object
from tensorfile.sources.stores.fsspec_source import FsspecSource
from tests.helpers.checkpoints import MODEL, write_gguf, write_sharded

root, url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
st = os.path.join(root, "m.safetensors")
save_file(MODEL, st)
z1 = os.path.join(root, "m1.zt")
ztensor.save_file(MODEL, z1)
z2 = os.path.join(root, "m2.zt")
ztensor.save_file(MODEL, z2, version=2)
gg = os.path.join(root, "m.gguf")
write_gguf(gg, {"a": np.arange(8, dtype=np.float32)})
npz = os.path.join(root, "m.npz")
np.savez(npz, a=np.arange(4))
npy = os.path.join(root, "m.npy")
np.save(npy, np.arange(4))
ck = os.path.join(root, "ck")
write_sharded(ck, [{"a": np.ones(3, np.float32)}, {"b": np.zeros(2, np.float32)}])
ds_path = os.path.join(root, "ds")
dataset.write({"x": np.arange(64, dtype=np.float32).reshape(16, 4)}, ds_path, batch_size=1)
with open(st, "rb") as fh:
    fsspec.filesystem("memory").pipe("/m.safetensors", fh.read())

kept = []
# every kind of source
kept += [LocalSource(st), MemorySource(b"0123"), HTTPSource(url),
         FsspecSource("memory://m.safetensors"), open_file_object(io.BytesIO(b"abc"))]
handle = open(st, "rb")
kept.append(open_file_object(handle))
kept.append(LocalSource(st).buffer())  # a mapping handed out, its source dropped
# every kind of reader, with a tensor read or a view of the mapping kept
for fw in ("np", "pt"):
    f = safe_open(st, fw)
    kept += [f, f.get_tensor("lm_head.weight"), safe_open(st, fw).read_tensors(copy=False)]
for p in (st, z1, z2, gg, npz, npy, ck, url, "memory://m.safetensors"):
    r = tensorfile.open(p)
    k = r.keys()[0]
    kept += [r, r.get_tensor(k) if "//" in p else r.view(k)]
# datasets: the README's pattern, and iterators left half-consumed
ds = dataset.open(ds_path)
for batch in ds.batches(2):
    pass
it = iter(ds.batches(3))
next(it)
ds2 = dataset.open(ds_path)
t = iter(ds2.to_torch(shuffle=True))
next(t)
dl = iter(tud.DataLoader(ds2.to_torch(map_style=True), batch_size=2))
next(dl)
ds3 = dataset.open(ds_path)
kept += [ds, it, ds2, t, dl, ds3[0], ds3]
# module globals, never used again
f_global = safe_open(st, "pt")
reader_global = tensorfile.open(z2)
sharded_global = tensorfile.open(ck)
# a reference cycle
cycle = [tensorfile.open(st), safe_open(st, "np"), LocalSource(st), dataset.open(ds_path)]
next(cycle[-1].batches(2))
cycle.append(cycle)
del cycle
if mode == "collect":
    gc.collect()
print("done")
"""


@pytest.mark.parametrize("mode", ["exit", "collect"])
def test_nothing_printed_at_exit(tmp_path: Path, range_server: Server, mode: str) -> None:
    write_safetensors(range_server.root / "exit.safetensors")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("PYTHONWARNINGS", None)
    url = f"{range_server.url}/exit.safetensors"
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), url, mode],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == "done\n"
    assert run.stderr == ""


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_dropped_source_closes_its_file(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors")
    src = LocalSource(path)
    fd = src._fd
    assert _is_open(fd)
    view = src.buffer()
    del src
    gc.collect()
    assert not _is_open(fd)  # closed while the program runs, not left to the exit
    assert bytes(view[:1]) == path.read_bytes()[:1]  # the mapping outlives the descriptor


def test_a_dropped_reader_in_a_cycle_closes_its_file(tmp_path: Path) -> None:
    import tensorfile

    path = write_safetensors(tmp_path / "m.safetensors")
    reader = tensorfile.open(path)
    fd = reader.source._fd  # type: ignore[attr-defined]
    cycle: list[object] = [reader]
    cycle.append(cycle)
    del reader, cycle
    gc.collect()
    assert not _is_open(fd)


def test_close_then_collect_closes_the_descriptor_once(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors")
    src = open_path(str(path))
    fd = src._fd  # type: ignore[attr-defined]
    src.close()
    src.close()
    assert not _is_open(fd)
    # the number is free again: a file opened now may take it (dup2 makes sure it does),
    # and it must stay open when the closed source is collected
    other = os.open(path, os.O_RDONLY)
    if other != fd:
        os.dup2(other, fd)
        os.close(other)
    try:
        del src
        gc.collect()
        assert _is_open(fd)
        assert os.pread(fd, 1, 0) == path.read_bytes()[:1]
    finally:
        os.close(fd)
