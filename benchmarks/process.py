"""Whole-process load benchmarks: ``load_file`` of the 1 GiB file in a fresh interpreter.

The in-process ``load_*`` rows run in one long-lived process, where the memory the previous
repetition freed is handed straight back. A user's script starts fresh: every page of the
result is new to the process, and on a virtual machine whose host backs guest memory lazily
(this project's machine: free 2 MiB blocks are reported back to the host, and touching them
again costs ~1-3 s per GiB) that first touch can outweigh the copy itself. These rows
measure what the user sees.

Rows (``--only load_process`` selects all three):

* ``process_load_numpy``: ``safetensors.numpy.load_file`` against
  ``tensorfile.safetensors.numpy.load_file`` (owned arrays).
* ``process_load_torch``: ``safetensors.torch.load_file`` against tensorfile's, default
  ``backend="mmap"``: lazy tensors over a private mapping in both, so this is import + open.
* ``process_load_torch_pread``: the same with ``backend="pread"`` (owned tensors).

Each repetition spawns ``python benchmarks/_load_child.py`` (imports one library, loads the
file, prints its own timings as JSON and exits); the two libraries alternate (ref, tf, ref,
...). Measured per child: the wall time from spawn to exit, taken by the parent (interpreter
start, import, load, teardown); the import and load times, taken inside the child; CPU
times and minor page faults, from ``os.wait4``; and the peak RSS (``VmHWM``, read by the
child as it finishes: a child's ``ru_maxrss`` includes the parent's RSS at fork time).

Before each child the runner sleeps ``--settle`` seconds (default 3) so the memory the
previous child freed goes back to the host, as it would between two runs of a user's
script; without it the second child of a pair reuses its predecessor's already-backed pages
and the alternation favours whoever runs second. (The lazy ``process_load_torch`` row
allocates no fresh gigabyte and does not wait.) An untimed warm-up child per library checks
that both load the same bytes (CRC-32 of every tensor).

Ratios: time ratios are reference ÷ tensorfile (> 1: tensorfile faster); the RSS ratio is
tensorfile ÷ reference (< 1: tensorfile uses less memory). The reference's RSS includes the
mapped file's pages (it maps the file and copies out of the mapping).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import N_BIG, REPO, Config, check, page_in

PROCESS_BENCHMARKS = (
    "process_load_numpy",
    "process_load_torch",
    "process_load_torch_pread",
)
PROCESS_GROUP = "load_process"
"""``--only`` name that selects every row above."""

CHILD = REPO / "benchmarks" / "_load_child.py"
LIBS = ("ref", "tf")


@dataclass
class Run:
    """One child: measured by the parent (wall, rusage) and by itself (import, load)."""

    wall_s: float
    import_s: float
    load_s: float
    peak_rss_kib: int
    minflt: int
    load_minflt: int
    cpu_user_s: float
    cpu_sys_s: float


@dataclass
class ProcessResult:
    name: str
    description: str
    nbytes: int
    runs: dict[str, list[Run]] = field(default_factory=lambda: {lib: [] for lib in LIBS})

    def median(self, lib: str, what: str) -> float:
        return float(statistics.median(getattr(run, what) for run in self.runs[lib]))

    def ratio(self, what: str) -> float:
        """Reference ÷ tensorfile of the medians of ``what``."""
        return self.median("ref", what) / self.median("tf", what)

    def to_json(self) -> dict[str, Any]:
        fields = tuple(Run.__dataclass_fields__)
        return {
            "name": self.name,
            "description": self.description,
            "bytes": self.nbytes,
            **{
                f"{'reference' if lib == 'ref' else 'tensorfile'}": {
                    "runs": [run.__dict__ for run in self.runs[lib]],
                    "medians": {what: self.median(lib, what) for what in fields},
                }
                for lib in LIBS
            },
            "wall_ratio": self.ratio("wall_s"),
            "load_ratio": self.ratio("load_s"),
            "rss_ratio_tf_over_ref": 1 / self.ratio("peak_rss_kib"),
        }


def child(
    lib: str,
    framework: str,
    backend: str,
    path: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], float, Any]:
    """Run one child (``env``: its environment, else this one's): its JSON line, its wall
    time (spawn to exit) and its rusage."""
    argv = [sys.executable, str(CHILD), lib, framework, backend, path, *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=REPO, env=env)
    assert proc.stdout is not None
    out = proc.stdout.read()  # one short line, read until the child closes its end
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    check(proc.returncode == 0, f"{lib} child ({framework}, {backend}) exited {proc.returncode}")
    return json.loads(out), wall, usage


def timed_child(lib: str, framework: str, backend: str, path: str) -> Run:
    return run_of(*child(lib, framework, backend, path))


def run_of(data: dict[str, Any], wall: float, usage: Any) -> Run:
    """The :class:`Run` of one child from what :func:`child` returns."""
    return Run(
        wall_s=wall,
        import_s=data["import_s"],
        load_s=data["load_s"],
        peak_rss_kib=data["peak_rss_kib"],
        minflt=usage.ru_minflt,
        load_minflt=data["load_minflt"],
        cpu_user_s=usage.ru_utime,
        cpu_sys_s=usage.ru_stime,
    )


def bench_process(
    cfg: Config, name: str, framework: str, backend: str, repeat: int, settle: float
) -> ProcessResult:
    path = str(cfg.big_path)
    page_in(cfg.big_path)
    want, got = (child(lib, framework, backend, path, "--check")[0] for lib in LIBS)
    check(want["tensors"] == got["tensors"] == N_BIG, f"{name}: wrong number of tensors")
    check(want["crc32"] == got["crc32"], f"{name}: the libraries loaded different bytes")
    how = "" if framework == "numpy" else f", backend={backend!r}"
    result = ProcessResult(
        name,
        f"fresh process: import + {framework} load_file{how}, {N_BIG} x "
        f"{cfg.big_numel * 4 >> 20} MiB F32",
        cfg.big_bytes,
    )
    for _ in range(repeat):
        for lib in LIBS:
            time.sleep(settle)
            result.runs[lib].append(timed_child(lib, framework, backend, path))
    return result


def runners(cfg: Config, repeat: int, settle: float) -> dict[str, Callable[[], ProcessResult]]:
    """The whole-process benchmarks by name."""
    return {
        "process_load_numpy": lambda: bench_process(
            cfg, "process_load_numpy", "numpy", "mmap", repeat, settle
        ),
        # lazy tensors: no fresh gigabyte to wait for
        "process_load_torch": lambda: bench_process(
            cfg, "process_load_torch", "torch", "mmap", repeat, 0.0
        ),
        "process_load_torch_pread": lambda: bench_process(
            cfg, "process_load_torch_pread", "torch", "pread", repeat, settle
        ),
    }


def markdown(results: list[ProcessResult], header: str | None = None) -> str:
    """The rows as a table: the reference (or the peer each row names) against tensorfile;
    ``header`` replaces the first line's column names."""
    lines = [
        header
        or "| benchmark | reference wall (s) | tensorfile wall (s) | wall ratio (ref/tf) "
        "| reference load (s) | tensorfile load (s) | load ratio (ref/tf) "
        "| reference peak RSS (MiB) | tensorfile peak RSS (MiB) | RSS (tf/ref) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rss = {lib: r.median(lib, "peak_rss_kib") / 1024 for lib in LIBS}
        lines.append(
            f"| {r.name}: {r.description} "
            f"| {r.median('ref', 'wall_s'):.3f} | {r.median('tf', 'wall_s'):.3f} "
            f"| {r.ratio('wall_s'):.2f} "
            f"| {r.median('ref', 'load_s'):.3f} | {r.median('tf', 'load_s'):.3f} "
            f"| {r.ratio('load_s'):.2f} "
            f"| {rss['ref']:,.0f} | {rss['tf']:,.0f} | {rss['tf'] / rss['ref']:.2f} |"
        )
    return "\n".join(lines)
