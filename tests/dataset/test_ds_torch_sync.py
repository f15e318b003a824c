"""The block a torch feed shares with its DataLoader workers (``dataset.torch_sync``): made
without a file descriptor, so a program may keep thousands of feeds; a descriptor only when
the feed is pickled for another process, and a tensorfile error when none is left.

Run in a subprocess with a low open-files limit (``RLIMIT_NOFILE``), real DataLoader
workers forked from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tensorfile import dataset

_SCRIPT = r"""
import os, resource, sys
from multiprocessing.reduction import ForkingPickler
from torch.utils.data import DataLoader
from tensorfile import dataset
from tensorfile.errors import InvalidArgumentError, SourceError

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
ds = dataset.open(sys.argv[1])
feeds = [ds.to_torch(batch_size=5) for _ in range(2000)]  # all alive at once
print("feeds", len(feeds), "fds", len(os.listdir("/proc/self/fd")))
loader = DataLoader(feeds[-1], batch_size=None, num_workers=2, multiprocessing_context="fork")
print("batches", sum(1 for _ in loader))
try:
    feeds[-1].state_dict()
except InvalidArgumentError:
    print("refused after forked workers")
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
try:
    ForkingPickler.dumps(feeds[0])  # what a spawned worker's start does with the feed
except SourceError as exc:
    print("no descriptor left:", type(exc).__name__, str(exc)[:35])
for fd in held:
    os.close(fd)
copy = ForkingPickler.loads(ForkingPickler.dumps(feeds[0]))
print("pickled for a process", copy.state_dict()["samples"])
"""


def test_thousands_of_feeds_hold_no_file_descriptors(tmp_path: Path) -> None:
    """Regression (hostile review of issue 36, M2): every feed held a file descriptor from
    its construction (torch's ``share_memory_``), so with ``ulimit -n 1024`` the 1,019th
    live feed failed with torch's raw ``RuntimeError``. Now 2,000 live feeds under a limit of
    256 cost no descriptor, forked workers still signal the main process, and a block that
    cannot be made for another process is a ``SourceError``."""
    out = tmp_path / "ds"
    dataset.write({"x": np.arange(20, dtype=np.int64)}, out, batch_size=10)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    feeds = lines[0].split()
    assert feeds[:2] == ["feeds", "2000"] and int(feeds[3]) < 64, lines
    assert lines[1:] == [
        "batches 4",
        "refused after forked workers",
        "no descriptor left: SourceError cannot make the shared memory block",
        "pickled for a process 0",
    ]
