"""Remote header reads: tensorfile against huggingface_hub on the same files, served by nginx.

``remote_header_small`` / ``remote_header_big``: reading the header of a safetensors file
over HTTP (a ~1 kB header, and a ~150 kB one that does not fit the speculative first read):
``HfApi(endpoint=...).parse_safetensors_file_metadata`` against ``tensorfile.ops.load``. The
description gives each one's request count (from nginx's access log); times are medians.
"""

from __future__ import annotations

import atexit
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.common import Config, Result, check


def runners(cfg: Config) -> dict[str, Callable[[], Result]]:
    """The remote benchmarks by name (one nginx shared by both)."""
    state: dict[str, object] = {}

    def server() -> object:
        if "server" not in state:
            from tests.helpers.servers import start_nginx

            tmp = Path(tempfile.mkdtemp(prefix="tf-bench-nginx-"))
            srv, proc = start_nginx(tmp)
            atexit.register(proc.terminate)
            state["server"], state["proc"] = srv, proc
        return state["server"]

    def bench(tensors: int, name: str) -> Result:
        from huggingface_hub import HfApi

        from tensorfile import ops
        from tensorfile.safetensors.numpy import save_file

        srv = server()
        folder = srv.root / "org" / "model" / "resolve" / "main"  # type: ignore[attr-defined]
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        arrays = {
            f"model.layers.{i}.weight": rng.standard_normal(2, dtype=np.float32)
            for i in range(tensors)
        }
        save_file(arrays, str(folder / f"{name}.safetensors"))
        url = f"{srv.url}/org/model/resolve/main/{name}.safetensors"  # type: ignore[attr-defined]
        api = HfApi(endpoint=srv.url, token=False)  # type: ignore[attr-defined]

        def ref() -> object:
            return api.parse_safetensors_file_metadata("org/model", f"{name}.safetensors")

        def tf() -> object:
            return ops.load(url)

        srv.reset()  # type: ignore[attr-defined]
        got = ref()
        ref_requests = len(srv.requests())  # type: ignore[attr-defined]
        srv.reset()  # type: ignore[attr-defined]
        mine = tf()
        tf_requests = len(srv.requests())  # type: ignore[attr-defined]
        check(len(mine.tensors) == len(got.tensors) == tensors, f"{name}: tensor counts differ")  # type: ignore[attr-defined]
        check(tf_requests <= ref_requests, f"{name}: {tf_requests} requests > {ref_requests}")
        import time

        ref_t, tf_t = [], []
        for _ in range(cfg.repeat_small):
            t0 = time.perf_counter()
            ref()
            ref_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            tf()
            tf_t.append(time.perf_counter() - t0)
        header = (folder / f"{name}.safetensors").read_bytes()[:8]
        size = int.from_bytes(header, "little")
        return Result(
            f"remote_header_{name}",
            f"header over HTTP ({size:,} bytes): requests huggingface_hub {ref_requests}, "
            f"tensorfile {tf_requests}",
            size,
            tf_t,
            ref_t,
        )

    return {
        "remote_header_small": lambda: bench(10, "small"),
        "remote_header_big": lambda: bench(2000, "big"),
    }
