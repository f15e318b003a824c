"""Helpers shared by the ``tensorfile`` command-line tests: running the CLI in-process or as
the installed console script, checking its output contract, and writing small model files
(safetensors, zTensor, GGUF, sharded checkpoints) whose contents the tests know.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import cbor2
import numpy as np

from tensorfile import ztensor
from tensorfile.cli.app import main
from tensorfile.safetensors.numpy import save_file

SCRIPT = Path(sys.executable).with_name("tensorfile")
ERROR_PREFIX = "tensorfile: error: "
# rich decides colours and terminal width from these; keep the rendering plain
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(capsys: Any, *argv: str | os.PathLike[str]) -> Result:
    """Run ``tensorfile argv...`` in-process; returns the exit status and both streams."""
    capsys.readouterr()
    with mock.patch.dict(os.environ):
        for key in _RICH_ENV:
            os.environ.pop(key, None)
        code = main([os.fspath(a) for a in argv])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def run_proc(*argv: str | os.PathLike[str], cwd: Path | None = None) -> Result:
    """Run the installed console script as a separate process."""
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    proc = subprocess.run(
        [str(SCRIPT), *(os.fspath(a) for a in argv)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def strict_json(text: str) -> Any:
    """Exactly one JSON document (NaN/Infinity rejected), on one line ending in a newline."""
    assert text.endswith("\n"), repr(text[-50:])
    assert text.count("\n") == 1, "expected exactly one line of JSON"
    return json.loads(text, parse_constant=_reject_constant)


def run_json(capsys: Any, *argv: str | os.PathLike[str]) -> Any:
    """Run with ``--json``: status 0, nothing on stderr, one strict JSON document on stdout."""
    r = run(capsys, *argv, "--json")
    assert r.code == 0, r
    assert r.err == ""
    return strict_json(r.out)


def assert_one_error(r: Result, *, code: int = 2, contains: str = "") -> str:
    """Exit ``code``, nothing on stdout, exactly one ``tensorfile: error:`` line on stderr."""
    assert r.code == code, r
    assert r.out == "", r.out
    assert r.err.startswith(ERROR_PREFIX), r.err
    assert r.err.endswith("\n")
    assert r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err
    message = r.err[len(ERROR_PREFIX) : -1]
    assert message.strip(), "empty error message"
    assert contains in message, (contains, message)
    return message


def table_rows(text: str, columns: int) -> list[list[str]]:
    """The body rows (split on ``│``, stripped) of the rich tables with ``columns`` columns."""
    rows = []
    for line in text.splitlines():
        if "│" in line:
            cells = [c.strip() for c in line.split("│")]
            if len(cells) == columns:
                rows.append(cells)
    return rows


# -- model files ---------------------------------------------------------------------------

# name -> array: 149 parameters; F32 120 (480 B), F16 24 (48 B), I8 3 (3 B), I32 2 (8 B)
MODEL: dict[str, np.ndarray[Any, Any]] = {
    "lm_head.weight": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
    "model.embed.weight": np.linspace(-1, 1, 60, dtype=np.float32).reshape(10, 6),
    "model.layers.0.attn.q.weight": np.arange(36, dtype=np.float32).reshape(6, 6) - 10,
    "model.layers.0.attn.q.bias": np.arange(6, dtype=np.float16) / 4,
    "model.layers.1.mlp.up.weight": np.arange(18, dtype=np.float16).reshape(3, 6),
    "model.layers.1.mlp.up.bias": np.array([-3, 0, 7], dtype=np.int8),
    "model.norm.scale": np.array([1, -2], dtype=np.int32),
}
MODEL_META = {"format": "pt", "note": "hello world"}
MODEL_PARAMS = 149
MODEL_PARAMS_BY_DTYPE = {"F16": 24, "F32": 120, "I32": 2, "I8": 3}
MODEL_BYTES_BY_DTYPE = {"F16": 48, "F32": 480, "I32": 8, "I8": 3}
MODEL_TOTAL_BYTES = 539
SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16", "int8": "I8", "int32": "I32"}


def write_safetensors(
    path: Path,
    tensors: dict[str, np.ndarray[Any, Any]] | None = None,
    metadata: dict[str, str] | None = None,
) -> Path:
    save_file(dict(MODEL if tensors is None else tensors), str(path), metadata)
    return path


def write_zt(
    path: Path,
    tensors: dict[str, np.ndarray[Any, Any]] | None = None,
    attributes: dict[str, str] | None = None,
    **kwargs: Any,
) -> Path:
    data = dict(MODEL if tensors is None else tensors)
    ztensor.save_file(data, path, attributes=attributes, **kwargs)
    return path


def write_gguf(
    path: Path,
    tensors: dict[str, np.ndarray[Any, Any]],
    kv: Sequence[tuple[str, str, Any]] = (),
    arch: str = "llama",
) -> Path:
    """A GGUF v3 file written by the reference ``gguf`` package; ``kv`` holds
    ``(method, key, value)`` such as ``("add_uint32", "llama.block_count", 2)``."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for method, key, value in kv:
        getattr(w, method)(key, value)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_sharded(
    folder: Path,
    shards: list[dict[str, np.ndarray[Any, Any]]],
    metadata: list[dict[str, str] | None] | None = None,
) -> Path:
    """``model-0000i-of-0000n.safetensors`` files and ``model.safetensors.index.json``;
    returns the index path."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(shards)
    weight_map = {}
    total = 0
    for i, tensors in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{n:05d}.safetensors"
        meta = metadata[i - 1] if metadata else None
        save_file(dict(tensors), str(folder / name), meta)
        for key, arr in tensors.items():
            weight_map[key] = name
            total += arr.nbytes
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index


def safetensors_header(path: Path) -> tuple[int, dict[str, Any]]:
    """The declared header length and the parsed JSON header of a safetensors file."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def zt_manifest(path: Path) -> tuple[int, dict[str, Any]]:
    """The manifest length and the decoded manifest of a zTensor file."""
    raw = path.read_bytes()
    assert raw[:8] == b"ZTEN1000"
    (n,) = struct.unpack("<Q", raw[-8:])
    return n, cbor2.loads(raw[len(raw) - 8 - n : -8])
