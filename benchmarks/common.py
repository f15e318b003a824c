"""What the benchmark modules share: sizes, data files, the timing loop and the result rows."""

from __future__ import annotations

import gc
import json
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

REPO = Path(__file__).resolve().parent.parent
N_BIG = 16
"""Number of tensors in the big file."""

BENCHMARKS = (
    "load_numpy",
    "load_torch",
    "load_torch_pread",
    "save_numpy",
    "save_torch",
    "open_header",
    "view_all",
)
TARGETS: dict[str, tuple[float, bool]] = {
    # name: (minimum ratio, whether the issue states it for this row)
    "load_numpy": (2.0, True),
    "load_torch": (1.0, False),
    "load_torch_pread": (2.0, False),
    "save_numpy": (1.0, True),
    "save_torch": (1.0, False),
    "open_header": (1.0, True),
    "zt_save_raw_vs_st": (0.9, True),
    "zt_load_raw_vs_st": (0.9, True),
    "spark_write": (1.0, True),
    "spark_read": (1.0, True),
    "spark_read_batch64k": (1.0, True),
    "zt_save_zstd": (1.0, True),
    "zt_open_manifest": (1.0, True),
    "zt2_save_raw": (1.0, True),
    "zt2_save_zstd": (1.0, True),
    "zt2_save_raw_replace": (1.0, False),
    "zt2_load_raw": (1.0, True),
    "zt2_process_load_raw": (1.0, True),
    "zt2_load_zstd": (1.0, True),
}


@dataclass(frozen=True)
class Config:
    """Sizes and paths of one run."""

    data: Path
    big_numel: int  # elements per tensor of the big file (float32)
    n_small: int  # tensors in the header file
    repeat_small: int
    repeat_big: int

    @property
    def big_bytes(self) -> int:
        return N_BIG * self.big_numel * 4

    @property
    def big_path(self) -> Path:
        return self.data / f"big-{N_BIG}x{self.big_numel * 4 >> 20}MiB.safetensors"

    @property
    def header_path(self) -> Path:
        return self.data / f"header-{self.n_small}.safetensors"

    def out_path(self, who: str, framework: str) -> Path:
        return self.data / f"out-{who}-{framework}.safetensors"


@dataclass
class Result:
    """The timings of one benchmark."""

    name: str
    description: str
    nbytes: int
    tf_times: list[float]
    ref_times: list[float] = field(default_factory=list)

    @property
    def tf_median(self) -> float:
        return statistics.median(self.tf_times)

    @property
    def ref_median(self) -> float | None:
        return statistics.median(self.ref_times) if self.ref_times else None

    @property
    def ratio(self) -> float | None:
        ref = self.ref_median
        return None if ref is None else ref / self.tf_median

    @property
    def paired_ratio(self) -> float | None:
        """Median of the per-repetition ratios (each ref run over the tf run that follows)."""
        if not self.ref_times:
            return None
        return statistics.median(r / t for r, t in zip(self.ref_times, self.tf_times, strict=True))

    @property
    def gbps(self) -> float:
        return self.nbytes / self.tf_median / 1e9

    @property
    def target(self) -> float | None:
        return TARGETS[self.name][0] if self.name in TARGETS else None

    @property
    def met(self) -> bool | None:
        target, ratio = self.target, self.ratio
        return None if target is None or ratio is None else ratio >= target

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "bytes": self.nbytes,
            "reference_times_s": self.ref_times,
            "tensorfile_times_s": self.tf_times,
            "reference_median_s": self.ref_median,
            "tensorfile_median_s": self.tf_median,
            "ratio": self.ratio,
            "paired_ratio_median": self.paired_ratio,
            "tensorfile_gbps": self.gbps,
            "target": self.target,
            "target_in_issue": TARGETS[self.name][1] if self.name in TARGETS else None,
            "met": self.met,
        }


# --------------------------------------------------------------------------- data files


def big_names() -> list[str]:
    return [f"model.layers.{i:02d}.weight" for i in range(N_BIG)]


def small_names(n: int) -> list[str]:
    return [f"model.layers.{i // 10}.block.{i % 10}.weight" for i in range(n)]


def file_is_valid(path: Path, names: int, data_bytes: int) -> bool:
    """True when ``path`` has a header of ``names`` tensors followed by ``data_bytes``."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if size != 8 + header_len + data_bytes:
                return False
            header = json.loads(f.read(header_len))
    except (OSError, ValueError, struct.error):
        return False
    return len(header) - ("__metadata__" in header) == names


def make_big(cfg: Config) -> None:
    path = cfg.big_path
    if file_is_valid(path, N_BIG, cfg.big_bytes):
        return
    print(f"generating {path} ({cfg.big_bytes >> 20} MiB)...", file=sys.stderr, flush=True)
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal(cfg.big_numel, dtype=np.float32) for n in big_names()}
    safetensors.numpy.save_file(arrays, str(path))
    del arrays


def make_header(cfg: Config) -> None:
    path = cfg.header_path
    if file_is_valid(path, cfg.n_small, cfg.n_small * 8):
        return
    print(f"generating {path} ({cfg.n_small} tensors)...", file=sys.stderr, flush=True)
    arrays = {
        n: np.array([i, -i], dtype=np.float32) for i, n in enumerate(small_names(cfg.n_small))
    }
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "pt"})
    del arrays


def page_in(path: Path) -> None:
    """Read the whole file once so that it is in the page cache."""
    buf = bytearray(64 << 20)
    with path.open("rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def header_bytes(path: Path) -> int:
    with path.open("rb") as f:
        return 8 + int(struct.unpack("<Q", f.read(8))[0])


def files_identical(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            ca, cb = fa.read(16 << 20), fb.read(16 << 20)
            if ca != cb:
                return False
            if not ca:
                return True


# --------------------------------------------------------------------------- timing


@contextmanager
def gc_paused() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def timed(fn: Callable[[], object], setup: Callable[[], None] | None = None) -> float:
    """Seconds taken by one call of ``fn``; its result is freed after the clock stops."""
    if setup is not None:
        setup()
    with gc_paused():
        t0 = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - t0
    del out
    gc.collect()
    return elapsed


def alternate(
    ref: Callable[[], object],
    tf: Callable[[], object],
    repeat: int,
    setup: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Time ``ref`` and ``tf`` alternately, ``repeat`` times each."""
    ref_times: list[float] = []
    tf_times: list[float] = []
    for _ in range(repeat):
        ref_times.append(timed(ref, setup))
        tf_times.append(timed(tf, setup))
    return ref_times, tf_times


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"correctness check failed: {what}")
