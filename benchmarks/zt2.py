"""zTensor v2 benchmarks: tensorfile against ``ztensor`` 2.1.2, in one process.

ztensor 2.1.2 cannot share an environment with ztensor 1.0.1 (the peer of the v1.0 rows),
so these rows run in a child interpreter from ``.venv-zt2`` (``make bench`` installs
tensorfile and safetensors there) and hand their timings back as JSON. Inside the child both
libraries run alternately in the same process, as everywhere else in the runner.

Rows (the 16 x 64 MiB float32 tensors of the safetensors rows; ``--quick`` shrinks them):

* ``zt2_save_raw``: ``ztensor.Writer(path)`` (canonical: raw, xxh3 digests, 64 KiB
  placement) + ``add`` per tensor, against ``tensorfile.ztensor.save_file(..., version=2,
  checksum="xxh3")``, which writes the same canonical form (the files are compared byte for
  byte before timing). Each save makes a new file: before each timed save both outputs are
  removed, synced and ``--settle`` seconds (default 2) pass, so the memory they held goes
  back to the host and neither library reuses the pages the other just freed.
* ``zt2_save_raw_replace``: the same, each save over the file of the previous one (as a
  training loop overwriting its checkpoint). ztensor truncates the old file and writes into
  the pages it just freed; tensorfile writes a temporary file beside it and renames it over
  the old one only when it is complete (so a crash leaves the old file), which needs fresh
  pages for all of it. Reported; the issue's target is on the row above.
* ``zt2_save_zstd``: ``ztensor.Writer(path, canonical=False)`` + ``add(...,
  encoding="zt.zstd-seekable/1")`` against ``save_file(..., version=2, compression="zstd")``
  (new files, as ``zt2_save_raw``).
* ``zt2_load_raw`` / ``zt2_load_zstd``: owned arrays of every tensor: the reference copies
  each tensor out of ``ztensor.open(path)`` (``np.array(memoryview(t))`` for raw parts,
  ``t.tobytes()`` for encoded ones, which is its only way to decode them) against
  ``tensorfile.ztensor.load_file(path)``. Both files are written by ztensor 2.1.2.
* ``zt2_process_load_raw``: ``zt2_load_raw`` in a fresh interpreter per run
  (``benchmarks/_load_child.py ... zt2``: import + load, wall time from spawn to exit,
  ``--settle`` seconds before each), what a user's script sees; see ``benchmarks.process``.
* ``zt2_convert_raw``: ``ztensor.convert(st, zt)`` (canonical) against
  ``tensorfile.convert(st, zt, to="zt2", checksum="xxh3")``.
* ``zt2_convert_zstd``: ztensor's convert cannot compress, so the peer is its own API doing
  the job (``ztensor.open(st)`` + a non-canonical ``Writer`` with the zstd encoding) against
  ``tensorfile.convert(st, zt, to="zt2", compression="zstd")``.
* The convert rows write a new file each time, as ``zt2_save_raw``.
* ``zt2_convert_back``: zTensor v2 → safetensors. ztensor writes only ``.zt``, so the peer
  is ``ztensor.open(zt)`` + ``safetensors.numpy.save_file`` of the arrays it hands out,
  against ``tensorfile.convert(zt, st)``.

Usage: ``.venv/bin/python -m benchmarks.run --only zt2_load_raw`` (the parent starts the
child), or directly ``.venv-zt2/bin/python -m benchmarks.zt2 --data bench-data --json x``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import N_BIG, REPO, Config, Result

ZT2_BENCHMARKS = (
    "zt2_save_raw",
    "zt2_save_raw_replace",
    "zt2_save_zstd",
    "zt2_load_raw",
    "zt2_process_load_raw",
    "zt2_load_zstd",
    "zt2_convert_raw",
    "zt2_convert_zstd",
    "zt2_convert_back",
)
ZT2_PYTHON = REPO / ".venv-zt2" / "bin" / "python"
ZSTD = "zt.zstd-seekable/1"


# --------------------------------------------------------------------------- parent side


def peer_version() -> str | None:
    """The version of ``ztensor`` in ``.venv-zt2`` (None when that environment is missing)."""
    if not ZT2_PYTHON.exists():
        return None
    code = "import importlib.metadata as m; print(m.version('ztensor'))"
    done = subprocess.run([str(ZT2_PYTHON), "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def runners(cfg: Config, selected: list[str]) -> dict[str, Callable[[], Result]]:
    """Runners for the v2 rows: the first one called runs the child for all selected rows."""
    wanted = [n for n in ZT2_BENCHMARKS if n in selected]
    cache: dict[str, Result] = {}

    def run(name: str) -> Result:
        if not cache:
            cache.update(_run_child(cfg, wanted))
        return cache[name]

    return {name: (lambda name=name: run(name)) for name in wanted}  # type: ignore[misc]


def _run_child(cfg: Config, names: list[str]) -> dict[str, Result]:
    if not ZT2_PYTHON.exists():
        raise SystemExit(f"{ZT2_PYTHON} is missing: run `make .venv-zt2/.bench` first")
    out = cfg.data / "zt2-results.json"
    cmd = [
        str(ZT2_PYTHON),
        "-m",
        "benchmarks.zt2",
        "--data",
        str(cfg.data),
        "--big-numel",
        str(cfg.big_numel),
        "--repeat",
        str(cfg.repeat_big),
        "--json",
        str(out),
    ]
    for name in names:
        cmd += ["--only", name]
    subprocess.run(cmd, cwd=REPO, check=True)
    rows = json.loads(out.read_text())
    out.unlink()
    return {
        r["name"]: Result(
            r["name"], r["description"], r["bytes"], r["tensorfile_times_s"], r["reference_times_s"]
        )
        for r in rows
    }


# --------------------------------------------------------------------------- child side


def _load_child(lib: str, path: str, check: bool = False) -> tuple[dict[str, Any], float]:
    """One fresh interpreter loading ``path`` with ``lib``: its JSON line and its wall time
    from spawn to exit (see ``benchmarks/_load_child.py``)."""
    argv = [sys.executable, str(REPO / "benchmarks" / "_load_child.py"), lib, "zt2", "-", path]
    t0 = time.perf_counter()
    out = subprocess.run(argv + (["--check"] if check else []), cwd=REPO, capture_output=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{lib} zt2 load child failed: {out.stderr.decode()[-2000:]}")
    return json.loads(out.stdout), wall


def _child(args: argparse.Namespace) -> int:
    import numpy as np
    import safetensors.numpy
    import ztensor as zref

    import tensorfile
    import tensorfile.safetensors.numpy
    import tensorfile.ztensor
    from benchmarks.common import alternate, check, files_identical, page_in

    cfg = Config(args.data.resolve(), args.big_numel, 7, args.repeat, args.repeat)
    st = cfg.big_path
    check(st.exists(), f"{st} is missing (the parent runner makes it)")
    page_in(st)
    arrays = tensorfile.safetensors.numpy.load_file(str(st))
    size = f"{N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32"

    def path(tag: str) -> str:
        return str(cfg.data / f"zt2-{tag}.zt")

    def ref_save(out: str, zstd: bool) -> None:
        with zref.Writer(out, canonical=not zstd) as w:
            for name, a in arrays.items():
                flat = a.reshape(-1).view(np.uint8)
                w.add(name, flat, list(a.shape), "f32", encoding=ZSTD if zstd else None)

    def tf_save(out: str, zstd: bool) -> None:
        if zstd:
            tensorfile.ztensor.save_file(arrays, out, version=2, compression="zstd")
        else:
            tensorfile.ztensor.save_file(arrays, out, version=2, checksum="xxh3")

    def ref_load(p: str) -> dict[str, Any]:
        with zref.open(p) as s:
            out = {}
            for name in s.keys():
                t = s[name]
                raw = np.array(memoryview(t)) if t.caps.map else t.tobytes()
                out[name] = np.frombuffer(raw, np.float32).reshape(t.shape)
            return out

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)

    def result(name: str, what: str, times: tuple[list[float], list[float]]) -> dict[str, Any]:
        ref_t, tf_t = times
        return Result(name, what, cfg.big_bytes, tf_t, ref_t).to_json()

    rows: list[dict[str, Any]] = []
    few = max(1, min(args.repeat, 3))

    def save_row(zstd: bool, replace: bool = False) -> None:
        kind = "zstd" if zstd else "raw"
        ref_out, tf_out = path(f"ref-{kind}"), path(f"tf-{kind}")
        ref_save(ref_out, zstd)
        tf_save(tf_out, zstd)
        check(same(ref_load(tf_out), arrays), f"zt2_save_{kind}: ztensor reads ours")
        check(same(tensorfile.ztensor.load_file(ref_out), arrays), f"zt2_save_{kind}: theirs")
        note = ""
        if not zstd:
            identical = files_identical(Path(ref_out), Path(tf_out))
            note = ", canonical: files byte-identical" if identical else ", files differ"

        def fresh() -> None:
            # Each save makes a new file: the previous outputs are removed (untimed), their
            # freed memory given time to go back to the host, so neither library writes into
            # pages the other (or its own last run) just released.
            for out in (ref_out, tf_out):
                Path(out).unlink(missing_ok=True)
            os.sync()
            time.sleep(args.settle)

        times = alternate(
            lambda: ref_save(ref_out, zstd),
            lambda: tf_save(tf_out, zstd),
            few if zstd else args.repeat,
            setup=os.sync if replace else fresh,
        )
        if zstd:
            note = f", stored {os.path.getsize(tf_out) / cfg.big_bytes:.3f} of raw"
        name = f"zt2_save_{kind}" + ("_replace" if replace else "")
        what = "over the previous file" if replace else "to a new file"
        rows.append(result(name, f"zTensor v2 save {what}, {size}, {kind}{note}", times))
        for out in (ref_out, tf_out):
            Path(out).unlink(missing_ok=True)

    def process_load_row() -> None:
        src = path("src-process")
        ref_save(src, False)
        page_in(Path(src))
        want, got = (_load_child(lib, src, check=True)[0] for lib in ("ref", "tf"))
        check(want["crc32"] == got["crc32"], "zt2_process_load_raw: different bytes")
        walls: dict[str, list[float]] = {"ref": [], "tf": []}
        for _ in range(args.repeat):
            for lib in ("ref", "tf"):
                time.sleep(args.settle)
                walls[lib].append(_load_child(lib, src)[1])
        rows.append(
            Result(
                "zt2_process_load_raw",
                f"fresh process: import + zTensor v2 load (owned arrays), {size}, raw",
                cfg.big_bytes,
                walls["tf"],
                walls["ref"],
            ).to_json()
        )
        Path(src).unlink(missing_ok=True)

    def load_row(zstd: bool) -> None:
        kind = "zstd" if zstd else "raw"
        src = path(f"src-{kind}")
        ref_save(src, zstd)
        page_in(Path(src))
        check(same(tensorfile.ztensor.load_file(src), ref_load(src)), f"zt2_load_{kind}")
        gc.collect()
        times = alternate(
            lambda: ref_load(src),
            lambda: tensorfile.ztensor.load_file(src),
            few if zstd else args.repeat,
        )
        rows.append(
            result(f"zt2_load_{kind}", f"zTensor v2 load (owned arrays), {size}, {kind}", times)
        )
        Path(src).unlink(missing_ok=True)

    def ref_convert_zstd(out: str) -> None:
        with zref.open(str(st)) as s, zref.Writer(out, canonical=False) as w:
            for name in s.keys():
                t = s[name]
                w.add(name, memoryview(t), t.shape, t.dtype, encoding=ZSTD)

    def ref_convert_back(src: str, out: str) -> None:
        with zref.open(src) as s:
            got = {n: np.array(memoryview(s[n])).view(np.float32).reshape(s[n].shape) for n in s}
        safetensors.numpy.save_file(got, out)

    def convert_row(kind: str) -> None:
        ref_out, tf_out = path(f"cref-{kind}"), path(f"ctf-{kind}")
        options: dict[str, Any] = {"to": "zt2"}
        if kind == "raw":
            options["checksum"] = "xxh3"
            ref: Callable[[], object] = lambda: zref.convert(str(st), ref_out)  # noqa: E731
        elif kind == "zstd":
            options["compression"] = "zstd"
            ref = lambda: ref_convert_zstd(ref_out)  # noqa: E731
        else:
            back_src = path("back-src")
            zref.convert(str(st), back_src)
            page_in(Path(back_src))
            ref_out = str(cfg.data / "zt2-cref-back.safetensors")
            tf_out = str(cfg.data / "zt2-ctf-back.safetensors")
            options = {}
            ref = lambda: ref_convert_back(back_src, ref_out)  # noqa: E731
        source = str(st) if kind != "back" else back_src

        def tf() -> object:
            return tensorfile.convert(source, tf_out, **options)

        ref()
        tf()
        want = tensorfile.ops.content_hash(str(st))
        check(tensorfile.ops.content_hash(tf_out) == want, f"zt2_convert_{kind}: content id")
        check(tensorfile.ops.content_hash(ref_out) == want, f"zt2_convert_{kind}: peer")

        def fresh() -> None:  # a new file each time, as the save rows
            for out in (ref_out, tf_out):
                Path(out).unlink(missing_ok=True)
            os.sync()
            time.sleep(args.settle)

        times = alternate(ref, tf, few if kind == "zstd" else args.repeat, setup=fresh)
        what = {
            "raw": "safetensors → zTensor v2, canonical raw (ztensor.convert)",
            "zstd": "safetensors → zTensor v2, zstd (ztensor open + Writer)",
            "back": "zTensor v2 → safetensors (ztensor open + safetensors save_file)",
        }[kind]
        rows.append(result(f"zt2_convert_{kind}", f"convert {what}, {size}", times))
        for p in (ref_out, tf_out, path("back-src")):
            Path(p).unlink(missing_ok=True)

    work: dict[str, Callable[[], None]] = {
        "zt2_save_raw": lambda: save_row(False),
        "zt2_save_raw_replace": lambda: save_row(False, replace=True),
        "zt2_save_zstd": lambda: save_row(True),
        "zt2_process_load_raw": process_load_row,
        "zt2_load_raw": lambda: load_row(False),
        "zt2_load_zstd": lambda: load_row(True),
        "zt2_convert_raw": lambda: convert_row("raw"),
        "zt2_convert_zstd": lambda: convert_row("zstd"),
        "zt2_convert_back": lambda: convert_row("back"),
    }
    for name in args.only or ZT2_BENCHMARKS:
        print(f"  (zt2 child) running {name}...", file=sys.stderr, flush=True)
        work[name]()
        gc.collect()
    args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="zTensor v2 rows (run in .venv-zt2)")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--big-numel", type=int, default=1 << 24)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--only", choices=ZT2_BENCHMARKS, action="append", default=None)
    return _child(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
