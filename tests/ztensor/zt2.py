"""The reference zTensor v2 implementation, ztensor 2.1.2, as a test oracle: it lives in its
own interpreter (``.venv-zt2``, made by ``make .venv-zt2/.ready``; ``$TENSORFILE_ZT2_PYTHON``
overrides) because it cannot share an environment with ztensor 1.0.1, and is driven through
``zt2_peer.py`` in a subprocess, values exchanged as ``.npz`` and JSON.

A missing interpreter fails the tests that need it (it is never a skip).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PEER = Path(__file__).resolve().parent / "zt2_peer.py"


def python() -> str:
    """The interpreter that has ztensor 2.1.2; an AssertionError saying how to make it."""
    found = os.environ.get("TENSORFILE_ZT2_PYTHON") or str(ROOT / ".venv-zt2" / "bin" / "python")
    assert Path(found).exists(), (
        f"ztensor 2.1.2's interpreter {found} is missing: run `make .venv-zt2/.ready` (or set "
        "TENSORFILE_ZT2_PYTHON)"
    )
    return found


def _run(*args: str) -> None:
    done = subprocess.run([python(), str(PEER), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"ztensor 2.1.2 failed: {done.stderr[-3000:]}"


def convert(src: Path, dst: Path) -> None:
    """``ztensor.convert(src, dst)`` with ztensor 2.1.2: ``src`` (a GGUF, a safetensors
    file...) as the zTensor v2 file ``dst``."""
    _run("convert", str(src), str(dst))


def to_json(value: Any) -> Any:
    """An attribute value as the peer exchanges it (bytes as ``{"$bytes": hex}``)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def read(path: Path) -> dict[str, Any]:
    """What ztensor 2.1.2 reads from ``path``: ``{"objects": {name: {shape, layout, parts:
    {part: {dtype, logical, bytes, verified}}}}, "attributes": ..., "verify": [checked,
    undigested]}``, each part's decoded bytes as a uint8 array."""
    out_npz, out_json = path.with_suffix(".peer.npz"), path.with_suffix(".peer.json")
    _run("read", str(path), str(out_npz), str(out_json))
    doc: dict[str, Any] = json.loads(out_json.read_text())
    with np.load(out_npz) as arrays:
        for obj in doc["objects"].values():
            for part in obj["parts"].values():
                part["bytes"] = np.array(arrays[part.pop("key")])
    return doc


def write(
    path: Path,
    objects: dict[str, Any],
    *,
    attributes: Any = None,
    canonical: bool = True,
    align: int | None = None,
) -> None:
    """Write ``objects`` (``{name: {shape, layout, attributes?, parts: {part: {dtype,
    logical?, encoding?, bytes}}}}``) with ztensor 2.1.2's writer."""
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    spec: dict[str, Any] = {
        "objects": {},
        "canonical": canonical,
        "align": align,
        "attributes": None if attributes is None else to_json(attributes),
    }
    for name, obj in objects.items():
        parts = {}
        for role, part in obj["parts"].items():
            key = f"a{len(arrays)}"
            arrays[key] = np.frombuffer(bytes(part["bytes"]), np.uint8)
            parts[role] = {k: v for k, v in part.items() if k != "bytes"} | {"key": key}
        spec["objects"][name] = {
            "shape": list(obj["shape"]),
            "layout": obj.get("layout", "dense"),
            "parts": parts,
            "attributes": to_json(obj["attributes"]) if "attributes" in obj else None,
        }
    spec_path, npz = path.with_suffix(".spec.json"), path.with_suffix(".spec.npz")
    spec_path.write_text(json.dumps(spec))
    np.savez(npz, **arrays)
    _run("write", str(spec_path), str(npz), str(path))
