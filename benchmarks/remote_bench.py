"""Remote reads over HTTP, served by nginx on 127.0.0.1.

``remote_header_small`` / ``remote_header_big``: reading the header of a safetensors file
over HTTP (a ~1 kB header, and a ~150 kB one that does not fit the speculative first read):
``HfApi(endpoint=...).parse_safetensors_file_metadata`` against ``tensorfile.ops.load``. The
description gives each one's request count (from nginx's access log); times are medians.

``http_load_1g`` / ``http_load_4g_sharded``: whole loads in a fresh process (see
``benchmarks/remote_load.py``), every tensor a torch CPU tensor:
``tensorfile.safetensors.torch.load_file(url, backend="pread")`` (concurrent range requests
straight into the tensors) and ``load_sharded(index_url)`` (all shards in one plan) against
one plain GET per file (``urllib.request``) + ``safetensors.torch.load``.
"""

from __future__ import annotations

import atexit
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import N_BIG, Config, Result, check
from benchmarks.remote_load import LoadResult, crcs, make_shards, run_row

REMOTE_LOAD_BENCHMARKS = ("http_load_1g", "http_load_4g_sharded")


def runners(cfg: Config, settle: float = 2.0) -> dict[str, Callable[[], Any]]:
    """The remote benchmarks by name (one nginx shared by all)."""
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

    def load_row(sharded: bool) -> LoadResult:
        srv = server()
        www: Path = srv.root  # type: ignore[attr-defined]
        if sharded:
            index, paths = make_shards(cfg.data, cfg.big_numel, N_BIG)
            folder = www / index.parent.name
            folder.mkdir(exist_ok=True)
            for p in (*paths, index):
                _link(p, folder / p.name)
            base = f"{srv.url}/{index.parent.name}"  # type: ignore[attr-defined]
            urls = [f"{base}/{p.name}" for p in paths]
            argv: dict[str, tuple[list[str], str | None]] = {
                "tf": (urls, f"{base}/{index.name}"),
                "urllib": (urls, None),
            }
            row = LoadResult(
                "http_load_4g_sharded",
                f"HTTP (nginx), 4 shards x {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32",
                4 * cfg.big_bytes,
                ["tf", "urllib"],
            )
            repeat, expected = max(1, cfg.repeat_big - 2), crcs(paths)
        else:
            _link(cfg.big_path, www / cfg.big_path.name)
            url = f"{srv.url}/{cfg.big_path.name}"  # type: ignore[attr-defined]
            argv = {"tf": ([url], None), "urllib": ([url], None)}
            row = LoadResult(
                "http_load_1g",
                f"HTTP (nginx), {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32, torch CPU tensors",
                cfg.big_bytes,
                ["tf", "urllib"],
            )
            repeat, expected = cfg.repeat_big, crcs([cfg.big_path])
        return run_row(row, argv, {}, expected, list(argv), repeat, settle)

    return {
        "remote_header_small": lambda: bench(10, "small"),
        "remote_header_big": lambda: bench(2000, "big"),
        "http_load_1g": lambda: load_row(False),
        "http_load_4g_sharded": lambda: load_row(True),
    }


def _link(target: Path, link: Path) -> None:
    """``link`` names ``target`` (nginx follows symbolic links)."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
