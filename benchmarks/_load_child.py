"""One whole-process load, run by ``benchmarks.process`` in a fresh interpreter.

Usage: ``python benchmarks/_load_child.py {ref,tf,tfs,fss,runai} {numpy,torch,zt2,pickle}
{auto,mmap,pread,-} PATH [--check] [--touch]`` (``zt2``: ztensor 2.1.2 against
``tensorfile.ztensor``, run from ``.venv-zt2``; ``pickle``: a PyTorch pickle, every tensor as
a numpy array, by ``torch.load(weights_only=True)`` (``mmap=True`` for a zipped one, as
tensorfile maps it) against ``tensorfile.open``; ``fss``: fastsafetensors on the CPU without
GDS; ``runai``: the Run:ai model streamer; ``tfs``: tensorfile's ``load_sharded``, every shard
in one read plan, owned tensors; these three torch only)

Imports the library (reference ``safetensors``, ``tensorfile.safetensors``, fastsafetensors
or the Run:ai streamer), loads every tensor of PATH with ``load_file`` (or the library's own
way) and prints one JSON line: the import and load times measured here, this process's peak
RSS and the minor page faults taken during the load. PATH may be a folder holding a sharded
checkpoint (``model.safetensors.index.json``): every shard the index names is loaded, by
``load_file`` shard after shard (the reference has no sharded loader) or, for fastsafetensors
and the Run:ai streamer, in one call over all of them. ``--touch`` materialises every tensor
inside the timed load, the same way for every library: one byte of each 4 KiB page is read
(a lazy tensor over a mapping is read from the file then; an owned one is already there).
``--check`` (the untimed warm-up) also prints a CRC-32 of every tensor's bytes, taken after
the library's loader was closed, so the parent can compare the libraries and see that their
tensors stay valid on their own. Nothing else is imported, so the numbers are what a user's
script sees.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any


def peak_rss_kib() -> int:
    """This process's peak RSS (``VmHWM``). Not ``ru_maxrss``: a child's counts the parent's
    RSS at fork time, and the parent is big."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Zt2Ref:
    """ztensor 2.1.2 giving owned arrays, as the ``zt2_load_raw`` row does: each tensor
    copied out of its mapping."""

    @staticmethod
    def load_file(path: str) -> dict[str, Any]:
        import numpy as np
        import ztensor  # type: ignore[import-untyped]

        out: dict[str, Any] = {}
        with ztensor.open(path) as s:
            for name in s.keys():
                t = s[name]
                raw = np.array(memoryview(t)) if t.caps.map else t.tobytes()
                out[name] = np.frombuffer(raw, np.float32).reshape(t.shape)
        return out


def shard_paths(path: str) -> list[str]:
    """The shards of the checkpoint in folder ``path`` (from its index), or ``[path]``."""
    import os

    if not os.path.isdir(path):
        return [path]
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        names = sorted(set(json.load(f)["weight_map"].values()))
    return [os.path.join(path, name) for name in names]


def load_fss(paths: list[str]) -> dict[str, Any]:
    """fastsafetensors on the CPU, no GDS: its tensors keep their buffer alive after the
    loader closes (its docs; ``--check`` verifies the bytes after the close)."""
    from fastsafetensors import fastsafe_open  # type: ignore[import-untyped]

    with fastsafe_open(filenames=paths, nogds=True, device="cpu", framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def load_runai(paths: list[str]) -> dict[str, Any]:
    """The Run:ai streamer: ``owned=True`` (its default) gives tensors that stay valid after
    the streamer closes (``--check`` verifies the bytes after the close)."""
    from runai_model_streamer import SafetensorsStreamer  # type: ignore[import-untyped]

    with SafetensorsStreamer() as streamer:
        streamer.stream_files(paths)
        return dict(streamer.get_tensors())


def touch(tensors: dict[str, Any]) -> int:
    """Read one byte of every 4 KiB page of every tensor (torch), the same for every
    library: a lazy tensor's pages are read from the file here."""
    import torch

    total = 0
    for t in tensors.values():
        flat = t.reshape(-1).view(torch.uint8)
        total += int(flat[::4096].sum())
    return total


def load_pickle(lib: str, path: str) -> dict[str, Any]:
    """Every tensor of the PyTorch pickle ``path`` as a numpy array: by ``torch.load`` (the
    reference) or by ``tensorfile.open`` (tensorfile's own reader)."""
    if lib == "ref":
        import torch

        with open(path, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"
        state = torch.load(path, weights_only=True, map_location="cpu", mmap=zipped)
        return {name: t.numpy() for name, t in state.items()}
    import tensorfile

    with tensorfile.open(path) as f:
        return {name: f.view(name) for name in f.keys()}  # (zero-copy, as torch mmap=True)


def touch_arrays(arrays: dict[str, Any]) -> int:
    """:func:`touch` for numpy arrays: one byte of every 4 KiB page."""
    return sum(int(a.reshape(-1).view("uint8")[::4096].sum()) for a in arrays.values())


def _zt2_module(lib: str) -> Any:
    if lib == "ref":
        return _Zt2Ref
    import tensorfile.ztensor

    return tensorfile.ztensor


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    lib, framework, backend, path = argv[:4]
    check = "--check" in argv[4:]
    materialise = "--touch" in argv[4:]
    module: Any = None
    if lib in ("fss", "runai"):
        loader = load_fss if lib == "fss" else load_runai
        import torch  # noqa: F401  (imported by both libraries: counted as their import)

        if lib == "fss":
            import fastsafetensors  # noqa: F401
        else:
            import runai_model_streamer  # noqa: F401
    elif framework == "zt2":
        module = _zt2_module(lib)
    elif framework == "pickle":  # (each library imports what it needs inside the load)
        module = None
    elif lib == "ref":
        if framework == "numpy":
            import safetensors.numpy as module
        else:
            import safetensors.torch as module
    elif framework == "numpy":
        import tensorfile.safetensors.numpy as module
    else:
        import tensorfile.safetensors.torch as module
    if lib == "tfs":  # tensorfile's sharded loader: every shard in one read plan, owned
        loader = module.load_sharded
        module = None
    t1 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    t2 = time.perf_counter()
    paths = shard_paths(path)
    if framework == "pickle":
        tensors = load_pickle(lib, path)
    elif lib == "tfs":
        tensors = loader(path)
    elif module is None:
        tensors = loader(paths)
    elif framework in ("numpy", "zt2"):
        tensors = {}
        for p in paths:
            tensors.update(module.load_file(p))
    else:
        tensors = {}
        for p in paths:
            tensors.update(module.load_file(p, backend=backend))
    if materialise:
        touch_arrays(tensors) if framework == "pickle" else touch(tensors)
    t3 = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, object] = {
        "import_s": t1 - t0,
        "load_s": t3 - t2,
        "peak_rss_kib": peak_rss_kib(),
        "load_minflt": after.ru_minflt - before.ru_minflt,
        "tensors": len(tensors),
    }
    if lib == "tf" and framework == "torch":
        import tensorfile.loading

        choice = tensorfile.loading.last()
        out["backend"] = choice.backend if choice is not None else backend
    if check:
        import zlib

        crcs = {}
        for name, t in tensors.items():
            arr = t if framework in ("numpy", "zt2", "pickle") else t.contiguous().numpy()
            crcs[name] = zlib.crc32(arr.reshape(-1).view("uint8"))
        out["crc32"] = crcs
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
