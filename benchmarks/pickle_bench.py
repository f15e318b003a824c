"""PyTorch pickles: every tensor of a ``torch.save`` checkpoint as numpy arrays, in a fresh
interpreter, by tensorfile's own pickle reader (``tensorfile.open`` and ``view``: arrays
over the mapped file) against ``torch.load(weights_only=True)`` (``mmap=True`` for the
zipped file: tensors over the mapped file; the old format cannot be mapped by torch, which
reads it into memory), each followed by a read of one byte of every
4 KiB page (``--touch``: a lazy array's pages are read from the file then, the same for
both).

Rows (``--only pickle`` selects both), on a 256 MiB state dict of 64 float32 tensors of
4 MiB written by ``torch.save``:

* ``pickle_load_zip``: the zipped format (``torch.save``'s default).
* ``pickle_load_legacy``: the old format (``_use_new_zipfile_serialization=False``), which
  tensorfile reads without importing torch at all.

Each repetition spawns ``benchmarks/_load_child.py`` (see :mod:`benchmarks.process`), torch
and tensorfile alternated, ``--settle`` seconds before each child, medians; an untimed
warm-up child per library checks that both read the same bytes (CRC-32 of every tensor).
Time ratios: torch.load ÷ tensorfile (> 1: tensorfile faster); RSS ratio: tensorfile ÷
torch.load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Config, check, page_in
from benchmarks.process import LIBS, ProcessResult, child, run_of

PICKLE_BENCHMARKS = ("pickle_load_zip", "pickle_load_legacy")
PICKLE_GROUP = "pickle"
"""``--only`` name that selects every row above."""

_TENSORS, _NUMEL = 64, 1 << 20  # (64 x 4 MiB of float32: 256 MiB)


def make_pickle(cfg: Config, zipped: bool) -> Path:
    """The checkpoint of the row (written once, kept in the data folder)."""
    path = cfg.data / f"state-{_TENSORS}x4MiB-{'zip' if zipped else 'legacy'}.pt"
    if not path.exists():
        import torch

        gen = torch.Generator().manual_seed(0)
        state = {f"layer{i}.weight": torch.randn(_NUMEL, generator=gen) for i in range(_TENSORS)}
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp, _use_new_zipfile_serialization=zipped)
        tmp.replace(path)
    return path


def bench_pickle(cfg: Config, name: str, zipped: bool, repeat: int, settle: float) -> ProcessResult:
    path = make_pickle(cfg, zipped)
    page_in(path)
    want, got = (child(lib, "pickle", "-", str(path), "--check")[0] for lib in LIBS)
    check(want["tensors"] == got["tensors"] == _TENSORS, f"{name}: wrong number of tensors")
    check(want["crc32"] == got["crc32"], f"{name}: the libraries read different bytes")
    what = "zipped" if zipped else "old-format"
    result = ProcessResult(
        name,
        f"fresh process: import + every tensor as numpy, zero-copy (pages touched), {what} .pt, "
        f"{_TENSORS} x 4 MiB F32",
        _TENSORS * _NUMEL * 4,
    )
    for _ in range(repeat):
        for lib in LIBS:
            time.sleep(settle)
            result.runs[lib].append(run_of(*child(lib, "pickle", "-", str(path), "--touch")))
    return result


def runners(cfg: Config, repeat: int, settle: float) -> dict[str, Callable[[], ProcessResult]]:
    """The pickle rows by name."""
    return {
        "pickle_load_zip": lambda: bench_pickle(cfg, "pickle_load_zip", True, repeat, settle),
        "pickle_load_legacy": lambda: bench_pickle(
            cfg, "pickle_load_legacy", False, repeat, settle
        ),
    }
