"""GGUF vocabulary benchmarks: the ops a newcomer runs first (``summary``, ``inspect``, ``id``,
``diff``) on a GGUF file whose header is mostly a tokenizer vocabulary, timed in-process.

Run from the repository root with ``python -m benchmarks.gguf_bench`` (``--tokens N`` sets
the vocabulary size, 150,000 by default; ``--repeat N`` the repetitions; ``--profile OP``
prints a cProfile of one op instead of timing). The file (written by the reference ``gguf``
package) holds ``tokenizer.ggml.tokens`` (N strings, a few of them with quotes, backslashes
and control characters, as byte-level vocabularies have), ``tokenizer.ggml.scores`` (N
float32), ``tokenizer.ggml.token_type`` (N int32), ``tokenizer.ggml.merges`` (2N strings) and
a few small tensors: about 10 MB for 150,000 tokens.

Rows (median and best seconds; there is no peer: the ``gguf`` package's ``GGUFReader``
takes ~20 s to parse such a file, so it is left out):

* ``gguf_load``: :func:`tensorfile.ops.load` (the header into a Structure).
* ``gguf_structural_hash``: :func:`tensorfile.ops.structural_hash` of the path (load + hash:
  what ``tensorfile id`` and ``summary`` do).
* ``gguf_summary``: ``tensorfile summary`` of the path, the command in-process (its output
  discarded); ``--tokens 262144`` is llama.cpp's gemma vocabulary. The vocabulary is never
  made a list of tokens (:class:`tensorfile.core.values.LazyStrings`).
* ``gguf_inspect``: :func:`tensorfile.ops.inspect` of the path.
* ``gguf_content_hash``: :func:`tensorfile.ops.content_hash` (``tensorfile id --content``).
* ``gguf_diff``: :func:`tensorfile.ops.diff` of the file against a copy with one token
  changed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tensorfile import ops
from tensorfile.cli.app import main as main_cli


def vocabulary(n: int, *, variant: int = 0) -> list[str]:
    """``n`` distinct tokens shaped like a byte-level BPE vocabulary's."""
    specials = ['"', "\\", "\n", "\t", "\r", "\x00", "\x1b", "\x7f", "<0x0A>", "Ġ\"'"]
    out = [f"<special_{variant}>"]
    for i in range(1, n):
        if i % 997 == 0:
            out.append(f"{specials[i % len(specials)]}{i}")
        elif i % 3 == 0:
            out.append(f"Ġtok{i:x}")
        elif i % 3 == 1:
            out.append(f"語{i}")
        else:
            out.append(f"word{i}ing")
    return out


def write_vocab_gguf(path: Path, n: int, *, variant: int = 0) -> Path:
    """A GGUF file with an ``n``-token vocabulary (tokens, scores, types, merges) and three
    small tensors."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_string("general.name", "vocab-bench")
    w.add_uint32("llama.block_count", 1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocabulary(n, variant=variant))
    w.add_token_scores(np.linspace(-1000.0, 0.0, n, dtype=np.float32).tolist())
    w.add_token_types([1 + i % 3 for i in range(n)])
    w.add_token_merges([f"Ġ t{i} {i % 7}" for i in range(2 * n)])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((64, 32), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(32, np.float32))
    w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 32)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _times(fn: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _summary(path: Path) -> None:
    """``tensorfile summary PATH``, in-process, its line discarded."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        if main_cli(["summary", str(path)]) != 0:
            raise RuntimeError(f"tensorfile summary {path} failed")


def rows(a: Path, b: Path) -> dict[str, Callable[[], Any]]:
    """Each benchmark's call."""
    return {
        "gguf_load": lambda: ops.load(str(a)),
        "gguf_structural_hash": lambda: ops.structural_hash(str(a)),
        "gguf_summary": lambda: _summary(a),
        "gguf_inspect": lambda: ops.inspect(str(a)),
        "gguf_content_hash": lambda: ops.content_hash(str(a)),
        "gguf_diff": lambda: ops.diff(str(a), str(b)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gguf_bench")
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", metavar="OP", help="profile one row (e.g. gguf_inspect)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tf-gguf-bench-") as tmp:
        a = write_vocab_gguf(Path(tmp) / "a.gguf", args.tokens)
        b = write_vocab_gguf(Path(tmp) / "b.gguf", args.tokens, variant=1)
        table = rows(a, b)
        print(f"{a.stat().st_size / 1e6:.1f} MB GGUF, {args.tokens:,} tokens", file=sys.stderr)
        if args.profile:
            fn = table[args.profile]
            fn()  # warm
            prof = cProfile.Profile()
            prof.runcall(fn)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            return 0
        print(f"{'benchmark':<24}{'median s':>10}{'min s':>10}")
        for name, call in table.items():
            call()  # warm the page cache and imports
            times = _times(call, args.repeat)
            print(f"{name:<24}{statistics.median(times):10.3f}{min(times):10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
