"""``tensorfile meta`` under SIGKILL, and what an edit costs.

``kill``: real ``tensorfile meta`` child processes edit one model file and are killed with
SIGKILL at a random instant, again and again. After each kill the file must open with the
old or the new metadata and its tensor bytes must be unchanged; every few kills (and at the
end) an edit runs to completion and must leave no temporary file at all (the leftovers of
killed writers are removed by the next edit). Kills alternate between two kinds of random
instant: anywhere in the child's life (uniform from its start to a little past the time a
complete edit takes: start-up, reading the header, writing, renaming, exiting), and inside
the write itself (uniform over the write's duration, from the moment its temporary file
appears), so that many kills interrupt a write whatever the machine's load.

``cost``: the time of one ``tensorfile.ops.edit_metadata`` call (median of ``--runs``),
short (the new header fits in the old one's space) and long (it grows), on safetensors and
zTensor, in the folder given (put it on xfs or btrfs to measure the reflink path).

    python -m benchmarks.meta_kill kill --size 1GiB --kills 200 [--format safetensors|zt|both]
    python -m benchmarks.meta_kill cost --size 1GiB --runs 5 [--dir /mnt/xfs]

The test suite runs the same :func:`run_kills` on a small file
(``tests/ops/test_meta_crash_safety.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.safetensors.numpy import save_file

N_TENSORS = 16
FORMATS = ("safetensors", "zt")


def cli() -> list[str]:
    """The ``tensorfile`` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("tensorfile")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "tensorfile.cli.app"]


def state(step: int) -> dict[str, str]:
    """The metadata after ``step`` edits: odd steps carry a long value (the header grows),
    even ones a short one (it fits)."""
    return {"step": str(step), "pad": ("p" * (3000 + 250 * step)) if step % 2 else "short"}


def make_model(folder: Path, fmt: str, size: int) -> Path:
    """A ``size``-byte model (16 float32 tensors) with the metadata of step 0."""
    path = folder / ("model.safetensors" if fmt == "safetensors" else "model.zt")
    numel = max(1, size // (4 * N_TENSORS))
    base = np.arange(numel, dtype=np.float32)
    tensors = {f"layer{i}.weight": base + i for i in range(N_TENSORS)}
    if fmt == "safetensors":
        save_file(tensors, str(path), state(0))
    else:
        ztensor.save_file(tensors, path, attributes=state(0))
    return path


def payload_digest(path: Path) -> int:
    """A checksum of the tensor bytes (safetensors: after the header; zTensor: before the
    manifest), read straight from the file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        size = os.fstat(f.fileno()).st_size
        if raw == b"ZTEN1000":
            f.seek(size - 8)
            start, stop = 0, size - 8 - int.from_bytes(f.read(8), "little")
        else:
            start, stop = 8 + int.from_bytes(raw, "little"), size
        f.seek(start)
        crc, left = 0, stop - start
        while left > 0:
            chunk = f.read(min(left, 16 << 20))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
        return crc


def classify(path: Path, old: dict[str, str], new: dict[str, str], digest: int) -> str:
    """``old`` or ``new`` when the file opens with that metadata and unchanged tensor bytes;
    else what is wrong."""
    try:
        with tensorfile.open(str(path)) as f:
            meta = dict(f.metadata)
    except Exception as exc:  # anything at all: that is the failure being counted
        return f"other: does not open: {type(exc).__name__}: {exc}"
    if payload_digest(path) != digest:
        return "other: the tensor bytes changed"
    if meta == old:
        return "old"
    if meta == new:
        return "new"
    return f"other: unexpected metadata step {meta.get('step')!r}"


def foreign_files(path: Path) -> list[str]:
    """Every file beside the model (temporary files included)."""
    return sorted(p for p in os.listdir(path.parent) if p != path.name)


def edit_argv(path: Path, step: int) -> list[str]:
    args = [f"{k}={v}" for k, v in state(step).items()]
    return [*cli(), "meta", str(path), *(a for kv in args for a in ("--set", kv))]


def _wait_for_write(path: Path, child: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until the child's temporary file appears beside ``path``: its write began."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline and child.poll() is None:
        if foreign_files(path):
            return True
        time.sleep(0.0005)
    return False


def timed_edit(path: Path, step: int) -> tuple[float, float]:
    """Run one edit to the end: its whole time, and the time its write took (from the
    temporary file's appearance to the end)."""
    t0 = time.perf_counter()
    child = subprocess.Popen(
        edit_argv(path, step), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    began = t0
    if _wait_for_write(path, child, 600):
        began = time.perf_counter()
    _, err = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the edit failed ({child.returncode}): {err.decode().strip()}")
    end = time.perf_counter()
    return end - t0, end - began


@dataclass
class KillResult:
    """What :func:`run_kills` saw."""

    fmt: str
    size: int
    kills: int
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    temp_left_by_kills: int = 0
    leftovers_after_edits: list[list[str]] = field(default_factory=list)
    edit_s: float = 0.0
    write_s: float = 0.0

    def ok(self) -> bool:
        """Every kill left old or new, and no completed edit left any file behind."""
        return not self.failures and not any(self.leftovers_after_edits)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.fmt,
            "size": self.size,
            "kills": self.kills,
            "old": self.counts["old"],
            "new": self.counts["new"],
            "other": sum(n for k, n in self.counts.items() if k not in ("old", "new")),
            "failures": self.failures[:10],
            "kills_that_left_a_temporary_file": self.temp_left_by_kills,
            "completed_edits_checked": len(self.leftovers_after_edits),
            "files_left_after_completed_edits": sum(map(len, self.leftovers_after_edits)),
            "edit_s": round(self.edit_s, 3),
            "write_s": round(self.write_s, 3),
            "ok": self.ok(),
        }


def run_kills(
    path: Path, kills: int, *, seed: int = 0, check_every: int = 10, progress: bool = False
) -> KillResult:
    """Kill ``kills`` edits of ``path`` (made by :func:`make_model`) at random instants;
    with ``progress``, a line on stderr after every completed edit."""
    fmt = "zt" if path.suffix == ".zt" else "safetensors"
    rng = random.Random(seed)
    digest = payload_digest(path)
    step = 0
    result = KillResult(fmt, path.stat().st_size, kills)
    times = []
    for _ in range(3):  # complete edits: how long one takes (and no file left behind)
        step += 1
        times.append(timed_edit(path, step))
        result.leftovers_after_edits.append(foreign_files(path))
    result.edit_s = statistics.median(t for t, _ in times)
    result.write_s = statistics.median(w for _, w in times)
    for k in range(kills):
        child = subprocess.Popen(
            edit_argv(path, step + 1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if k % 2 == 0:  # anywhere in the child's life
            time.sleep(rng.uniform(0, 1.1 * result.edit_s))
        elif _wait_for_write(path, child, 600):  # inside the write
            time.sleep(rng.uniform(0, 1.1 * result.write_s))
        child.send_signal(signal.SIGKILL)
        child.wait()
        if foreign_files(path):
            result.temp_left_by_kills += 1
        outcome = classify(path, state(step), state(step + 1), digest)
        result.counts[outcome] += 1
        if outcome == "new":
            step += 1
        elif outcome != "old":
            result.failures.append(f"kill {k}: {outcome}")
            break
        if (k + 1) % check_every == 0 or k + 1 == kills:
            if progress:
                print(f"{fmt}: {k + 1} kills, {dict(result.counts)}", file=sys.stderr, flush=True)
            step += 1
            timed_edit(path, step)
            result.leftovers_after_edits.append(foreign_files(path))
            if classify(path, state(step - 1), state(step), digest) != "new":
                result.failures.append(f"the completed edit after kill {k} did not take")
    return result


# -- cost ---------------------------------------------------------------------------------------


def measure_cost(folder: Path, fmt: str, size: int, runs: int) -> dict[str, Any]:
    """Median seconds of one short and one long ``edit_metadata`` call, and the method."""
    path = make_model(folder, fmt, size)
    os.sync()
    out: dict[str, Any] = {"format": fmt, "size": path.stat().st_size}
    for kind in ("short", "long"):
        times, methods = [], set()
        for run in range(runs):
            if kind == "short":
                change = {"note": f"run {run}"}
            else:  # always longer than any slack the header has: it must grow
                change = {f"long{run}": "l" * (20_000 * (run + 1))}
            t0 = time.perf_counter()
            r = ops.edit_metadata(str(path), set=change)
            times.append(time.perf_counter() - t0)
            methods.add(r.method)
            os.sync()  # the next run starts without the last one's dirty pages
        out[kind] = {"median_s": statistics.median(times), "runs_s": times}
        out[f"{kind}_method"] = "/".join(sorted(methods))
    path.unlink()
    return out


def _size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20}
    low = text.lower()
    for unit, mult in units.items():
        if low.endswith(unit):
            return int(float(low[: -len(unit)]) * mult)
    return int(low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.meta_kill")
    parser.add_argument("mode", choices=("kill", "cost"))
    parser.add_argument("--size", default="1GiB", help="model size (e.g. 64MiB, 1GiB)")
    parser.add_argument("--kills", type=int, default=200, help="kills per format")
    parser.add_argument("--runs", type=int, default=5, help="cost: edits per median")
    parser.add_argument("--format", choices=(*FORMATS, "both"), default="both")
    parser.add_argument("--dir", help="where the model is written (default: a temp folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    size = _size(args.size)
    fmts = FORMATS if args.format == "both" else (args.format,)
    results = []
    ok = True
    for fmt in fmts:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            folder = Path(tmp)
            if args.mode == "cost":
                doc = measure_cost(folder, fmt, size, args.runs)
                print(
                    f"{fmt}: short {doc['short']['median_s']:.3f} s ({doc['short_method']}), "
                    f"long {doc['long']['median_s']:.3f} s ({doc['long_method']})",
                    flush=True,
                )
            else:
                t0 = time.perf_counter()
                model = make_model(folder, fmt, size)
                r = run_kills(model, args.kills, seed=args.seed, progress=True)
                doc = {**r.to_json(), "seconds": round(time.perf_counter() - t0, 1)}
                ok &= r.ok()
                print(json.dumps(doc), flush=True)
            results.append(doc)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
