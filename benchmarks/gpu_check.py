"""Load safetensors files to a GPU: tensorfile against the reference, fastsafetensors and the
Run:ai streamer, each load in a fresh process, loaders alternated, medians (issue 25).

Usage (from the repository root, with tensorfile importable, e.g. ``PYTHONPATH=src``)::

    python benchmarks/gpu_check.py                       # cuda:0, 1 GiB and 4 GiB files
    python benchmarks/gpu_check.py --device cpu --size-mib 64 --repeats 1   # smoke test

For each file size it writes one file (tensors of 1-64 MiB, bf16/f16/f32/i8, a few small
ones between them), then, per mode (``warm``: the file in the page cache; ``cold``: evicted
with ``posix_fadvise(DONTNEED)`` before each load), runs rounds of one fresh child process
per loader, in alternating order, until ``--repeats`` rounds are done or ``--budget-s`` would
be passed. A child imports its library, initialises the device (not timed), loads every
tensor to the device, synchronises, and reports the load time and its peak host RSS
(``VmHWM``) next to its RSS before the load. One untimed warm-up child per loader also
reports a checksum of every tensor (computed on the device), which must equal the
reference's: a loader whose values differ is marked in the table.

Loaders: ``tf`` (``tensorfile.safetensors.torch.load_file(path, device=...)``: the pinned
ring of :mod:`tensorfile.frameworks.torch_stream`; on the cpu, the ring explicitly),
``ref`` (``safetensors.torch.load_file(path, device=...)``), ``fastsafe``
(``fastsafe_open(..., nogds=True, device=...)``), ``runai`` (``SafetensorsStreamer``,
tensors moved to the device as they arrive, ``owned=False``), ``tf8`` (the ring with 8
reader threads instead of 4). A loader whose library is missing is skipped.

Prints a markdown table, and one JSON object with every measurement (``--json`` also writes
it to a file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
LOADERS = ("tf", "ref", "fastsafe", "runai")
MODULES = {  # imported before the clock starts: the load alone is timed
    "tf": "tensorfile.safetensors.torch,tensorfile.frameworks.torch_stream",
    "tf8": "tensorfile.safetensors.torch,tensorfile.frameworks.torch_stream",
    "ref": "safetensors.torch",
    "fastsafe": "fastsafetensors",
    "runai": "runai_model_streamer",
}


# -- the child: one load --------------------------------------------------------------------


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _load(loader: str, path: str, device: str) -> dict[str, Any]:

    if loader in ("tf", "tf8"):
        if device == "cpu" or loader == "tf8":  # the ring itself (load_file takes it off the cpu)
            import tensorfile
            from tensorfile.frameworks.torch_stream import stream_read

            opts = {"threads": 8} if loader == "tf8" else {}
            with tensorfile.open(path) as r:
                names = r.keys()
                return dict(zip(names, stream_read(r, names, device, **opts), strict=True))
        import tensorfile.safetensors.torch as tst

        return tst.load_file(path, device=device)
    if loader == "ref":
        import safetensors.torch

        out = safetensors.torch.load_file(path, device=device)
        if device == "cpu":  # lazy mappings on the cpu: read them, as the others do
            out = {k: v.clone() for k, v in out.items()}
        return out
    if loader == "fastsafe":
        from fastsafetensors import fastsafe_open

        with fastsafe_open(filenames=[path], nogds=True, device=device) as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    if loader == "runai":
        from runai_model_streamer import SafetensorsStreamer

        got: dict[str, Any] = {}
        with SafetensorsStreamer() as s:
            if device == "cpu":
                s.stream_file(path)
                return dict(s.get_tensors())
            try:
                s.stream_file(path, owned=False)  # views of a reused ring: copy each at once
            except TypeError:  # a release without ``owned``
                s.stream_file(path)
            for name, tensor in s.get_tensors():
                got[name] = tensor.to(device)
        return got
    raise SystemExit(f"unknown loader {loader!r}")


def _checksums(tensors: dict[str, Any]) -> dict[str, list[int]]:
    """Per tensor: dtype-independent sums of its bytes (plain and position-weighted), on the
    tensor's device."""
    import torch

    out = {}
    for name in sorted(tensors):
        t = tensors[name].contiguous().reshape(-1)
        b = t.view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)
        b = b.to(torch.int64)
        weights = torch.arange(b.numel(), device=b.device, dtype=torch.int64) % 65521 + 1
        out[name] = [int(b.sum()), int((b * weights).sum()), *t.shape]
    return out


def child(loader: str, path: str, device: str, check: bool) -> None:
    t0 = time.perf_counter()
    import torch

    if device.startswith("cuda"):
        torch.cuda.init()
        torch.empty(1, device=device)  # the context, before the clock
    for module in MODULES[loader].split(","):
        __import__(module)
    rss_before = _rss_kib("VmRSS")
    t1 = time.perf_counter()
    tensors = _load(loader, path, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    devices = sorted({str(t.device) for t in tensors.values()})
    result: dict[str, Any] = {
        "setup_s": t1 - t0,
        "load_s": t2 - t1,
        "rss_before_kib": rss_before,
        "peak_rss_kib": _rss_kib("VmHWM"),
        "tensors": len(tensors),
        "devices": devices,
    }
    if check:
        result["checksums"] = _checksums(tensors)
    print(json.dumps(result))


# -- the parent -----------------------------------------------------------------------------


def make_file(path: Path, size_mib: int) -> int:
    """A safetensors file of about ``size_mib`` MiB (written with the reference); returns its
    data bytes."""
    import torch
    from safetensors.torch import save_file

    sizes = [1, 3, 8, 16, 24, 32, 48, 64]  # MiB, cycled
    dtypes = [torch.bfloat16, torch.float16, torch.float32, torch.int8]
    tensors: dict[str, Any] = {}
    g = torch.Generator().manual_seed(size_mib)
    block = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8, generator=g)
    total, i = 0, 0
    while total < size_mib << 20:
        mib = min(sizes[i % len(sizes)], size_mib - (total >> 20)) or 1
        raw = block.repeat(mib)
        raw[: min(8, raw.numel())] = i % 251  # no two tensors alike
        dt = dtypes[i % len(dtypes)]
        tensors[f"layer.{i:04d}.weight"] = raw.view(dt).reshape(-1, 1024 // dt.itemsize)
        tensors[f"layer.{i:04d}.bias"] = torch.full((i % 7 + 1,), float(i)).to(torch.float32)
        total += raw.numel()
        i += 1
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    return total


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def spawn(loader: str, path: Path, device: str, check: bool = False) -> dict[str, Any]:
    args = [sys.executable, str(HERE), "--child", loader, str(path), "--device", device]
    start = time.perf_counter()
    done = subprocess.run(args + (["--check"] if check else []), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["failed"], "wall_s": wall}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def available(loader: str) -> bool:
    import importlib.util

    top = MODULES[loader].split(".")[0]
    return importlib.util.find_spec(top) is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=2, metavar=("LOADER", "PATH"), help=argparse.SUPPRESS)
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--size-mib", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--modes", default="warm,cold")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=330.0, help="start no round after this")
    p.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp") + "/tensorfile-gpu-check")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], a.device, a.check)
        return 0

    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu for the smoke test", file=sys.stderr)
        return 2
    began = time.perf_counter()
    loaders = [x for x in a.loaders.split(",") if x]
    skipped = [x for x in loaders if not available(x)]
    loaders = [x for x in loaders if x not in skipped]
    modes = [m for m in a.modes.split(",") if m]
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else "cpu",
        "cpus": os.cpu_count(),
        "skipped": skipped,
        "rows": [],
    }
    for size in a.size_mib:
        path = folder / f"model-{size}mib.safetensors"
        data = make_file(path, size) if not path.exists() else path.stat().st_size
        warm(path)
        checks = {x: spawn(x, path, a.device, check=True) for x in loaders}  # warm-ups
        oracle = checks.get("ref", {}).get("checksums")
        for mode in modes:
            runs: dict[str, list[dict[str, Any]]] = {x: [] for x in loaders}
            for k in range(a.repeats):
                if k and time.perf_counter() - began > a.budget_s:
                    break
                order = loaders if k % 2 == 0 else loaders[::-1]
                for x in order:
                    evict(path) if mode == "cold" else warm(path)
                    runs[x].append(spawn(x, path, a.device))
            for x in loaders:
                report["rows"].append(_row(size, mode, x, data, runs[x], checks[x], oracle))
    report["total_s"] = time.perf_counter() - began
    report["measured"] = time.strftime("%Y-%m-%d", time.gmtime())
    report["python"] = sys.version.split()[0]
    report["torch"] = torch.__version__
    _print(report)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0 if all(r["equal"] is not False for r in report["rows"]) else 1


def _row(
    size: int,
    mode: str,
    loader: str,
    data: int,
    runs: list[dict[str, Any]],
    check: dict[str, Any],
    oracle: Any,
) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    errors = [r["error"] for r in runs if "error" in r] + (
        [check["error"]] if "error" in check else []
    )
    load = statistics.median(r["load_s"] for r in ok) if ok else None
    got = check.get("checksums")
    return {
        "size_mib": size,
        "mode": mode,
        "loader": loader,
        "runs": len(ok),
        "load_s": load,
        "gb_s": data / load / 1e9 if load else None,
        "wall_s": statistics.median(r["wall_s"] for r in ok) if ok else None,
        "peak_rss_gib": statistics.median(r["peak_rss_kib"] for r in ok) / 2**20 if ok else None,
        "extra_rss_gib": (
            statistics.median(r["peak_rss_kib"] - r["rss_before_kib"] for r in ok) / 2**20
            if ok
            else None
        ),
        "equal": None if oracle is None or got is None else got == oracle,
        "errors": errors[:2],
        "all_load_s": [round(r["load_s"], 4) for r in ok],
    }


def _print(report: dict[str, Any]) -> None:
    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    print(f"\n{report['device']}, {report['cpus']} cpus; skipped: {report['skipped'] or 'none'}")
    print("| size | mode | loader | load s (median) | GB/s | wall s | peak RSS GiB | "
          "RSS added by the load GiB | equal to ref | runs |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in report["rows"]:
        print(
            f"| {r['size_mib']} MiB | {r['mode']} | {r['loader']} | {f(r['load_s'], '.3f')} | "
            f"{f(r['gb_s'], '.2f')} | {f(r['wall_s'], '.2f')} | {f(r['peak_rss_gib'], '.2f')} | "
            f"{f(r['extra_rss_gib'], '.2f')} | {r['equal']} | {r['runs']}"
            + (f" ({r['errors'][0]})" if r["errors"] else "")
            + " |"
        )
    print(f"total {report['total_s']:.0f} s")
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
