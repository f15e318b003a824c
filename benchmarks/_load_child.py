"""One whole-process load, run by ``benchmarks.process`` in a fresh interpreter.

Usage: ``python benchmarks/_load_child.py {ref,tf} {numpy,torch,zt2} {mmap,pread,-} PATH
[--check]`` (``zt2``: ztensor 2.1.2 against ``tensorfile.ztensor``, run from ``.venv-zt2``)

Imports the library (reference ``safetensors`` or ``tensorfile.safetensors``), loads every
tensor of PATH with ``load_file`` and prints one JSON line: the import and load times measured
here, this process's peak RSS and the minor page faults taken during the load. ``--check``
(the untimed warm-up) also prints a CRC-32 of every tensor's bytes so the parent can compare
the two libraries. Nothing else is imported, so the numbers are what a user's script sees.
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


def _zt2_module(lib: str) -> Any:
    if lib == "ref":
        return _Zt2Ref
    import tensorfile.ztensor

    return tensorfile.ztensor


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    lib, framework, backend, path = argv[:4]
    check = "--check" in argv[4:]
    module: Any
    if framework == "zt2":
        module = _zt2_module(lib)
    elif lib == "ref":
        if framework == "numpy":
            import safetensors.numpy as module
        else:
            import safetensors.torch as module
    elif framework == "numpy":
        import tensorfile.safetensors.numpy as module
    else:
        import tensorfile.safetensors.torch as module
    t1 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    t2 = time.perf_counter()
    if framework in ("numpy", "zt2"):
        tensors = module.load_file(path)
    else:
        tensors = module.load_file(path, backend=backend)
    t3 = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, object] = {
        "import_s": t1 - t0,
        "load_s": t3 - t2,
        "peak_rss_kib": peak_rss_kib(),
        "load_minflt": after.ru_minflt - before.ru_minflt,
        "tensors": len(tensors),
    }
    if check:
        import zlib

        crcs = {}
        for name, t in tensors.items():
            arr = t if framework in ("numpy", "zt2") else t.contiguous().numpy()
            crcs[name] = zlib.crc32(arr.reshape(-1).view("uint8"))
        out["crc32"] = crcs
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
