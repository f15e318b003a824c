"""Run by ztensor 2.1.2's interpreter (``.venv-zt2``), never imported by the tests: reads and
writes zTensor v2 files with the reference implementation and exchanges values as
``.npz`` (bytes of every part) and JSON (everything else).

    python zt2_peer.py read FILE.zt OUT.npz OUT.json
    python zt2_peer.py write SPEC.json ARRAYS.npz OUT.zt
    python zt2_peer.py convert SRC DST.zt       (ztensor.convert: any format it reads)

A part's bytes are its decoded bytes (``Tensor.tobytes``), as uint8 arrays named ``a<i>``
in the npz; the JSON says which object and part each is. Attribute values that JSON cannot
hold (byte strings) are written as ``{"$bytes": hex}``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import ztensor


def _to_json(value):
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    return value


def _from_json(value):
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        return bytes.fromhex(value["$bytes"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    return value


def read(path: str, out_npz: str, out_json: str) -> None:
    arrays = {}
    objects = {}
    with ztensor.open(path) as src:
        for name in src.keys():
            t = src[name]
            parts = {}
            for part in t.parts:
                p = t[part]
                key = f"a{len(arrays)}"
                arrays[key] = np.frombuffer(p.tobytes(), np.uint8)
                parts[part] = {
                    "dtype": p.dtype,
                    "logical": p.logical,
                    "key": key,
                    "verified": p.verify(),
                }
            objects[name] = {"shape": list(t.shape), "layout": t.layout, "parts": parts}
        checked, undigested = src.verify(deep=True)
        doc = {
            "objects": objects,
            "attributes": _to_json(src.attributes),
            "verify": [checked, undigested],
        }
    np.savez(out_npz, **arrays)
    with open(out_json, "w") as f:
        json.dump(doc, f)


def write(spec_path: str, npz: str, out: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    arrays = np.load(npz)
    canonical = spec.get("canonical", True)
    w = ztensor.Writer(out, canonical=canonical, align=spec.get("align"))
    if spec.get("attributes") is not None:
        w.set_attributes(_from_json(spec["attributes"]))
    for name in sorted(spec["objects"]):
        obj = spec["objects"][name]
        parts = {}
        for role, p in obj["parts"].items():
            entry = {"dtype": p["dtype"], "data": arrays[p["key"]]}
            if p.get("logical"):
                entry["logical"] = p["logical"]
            if p.get("encoding"):
                entry["encoding"] = p["encoding"]
            parts[role] = entry
        attributes = obj.get("attributes")
        w.add_object(
            name,
            obj["shape"],
            parts,
            layout=obj.get("layout", "dense"),
            attributes=None if attributes is None else _from_json(attributes),
        )
    w.finish()


def convert(src: str, dst: str) -> None:
    ztensor.convert(src, dst)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"read": read, "write": write, "convert": convert}[command](*args)
