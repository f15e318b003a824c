"""The entries of a state dict that are not tensors, kept beside a hub checkpoint.

``torch.distributed.checkpoint`` hands a storage plugin every entry that is not a tensor
(a step counter, an RNG state, an optimizer's scalars) as the bytes of ``torch.save`` of it.
A hub checkpoint has no place for them: they go in one JSON sidecar,
``model.dcp-objects-<save id>.json``, that every file of the checkpoint names in its header
metadata (:data:`POINTER_KEY`), so the commit of the checkpoint is the commit of its
objects; loaders that know nothing of it (the reference ``safetensors``, transformers) never
look at it.

The file: ``{"format": "tensorfile.dcp-objects", "version": 1, "objects": {fqn: {"sha256":
hex, "data": base64}}}``; each object's digest is checked when it is read.

Example:
    >>> blob = encode({"step": b"\\x80\\x04K\\x07."})
    >>> decode(blob, "objects.json")
    {'step': b'\\x80\\x04K\\x07.'}
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping

from tensorfile.core.errors import FormatError

__all__ = [
    "MAX_OBJECTS_BYTES",
    "POINTER_KEY",
    "decode",
    "encode",
    "is_sidecar",
    "sidecar_name",
]

POINTER_KEY = "tensorfile.dcp_objects"
"""The header metadata key naming the checkpoint's objects file."""

MAX_OBJECTS_BYTES = 1 << 30
"""The largest objects file read (the objects travel through every rank's memory anyway)."""

_FORMAT = "tensorfile.dcp-objects"


def sidecar_name(prefix: str, save_id: str) -> str:
    """The objects file of the save ``save_id``.

    Example:
        >>> sidecar_name("model", "0a1b")
        'model.dcp-objects-0a1b.json'
    """
    return f"{prefix}.dcp-objects-{save_id}.json"


def is_sidecar(name: str, prefix: str) -> bool:
    """Whether ``name`` is an objects file of a save with files named ``prefix``.

    Example:
        >>> is_sidecar("model.dcp-objects-0a1b.json", "model"), is_sidecar("x.json", "model")
        (True, False)
    """
    return name.startswith(f"{prefix}.dcp-objects-") and name.endswith(".json")


def encode(objects: Mapping[str, bytes]) -> bytes:
    """The objects file of ``objects`` (fqn -> bytes)."""
    doc = {
        "format": _FORMAT,
        "version": 1,
        "objects": {
            k: {"sha256": hashlib.sha256(v).hexdigest(), "data": base64.b64encode(v).decode()}
            for k, v in sorted(objects.items())
        },
    }
    return json.dumps(doc, indent=1).encode()


def decode(raw: bytes, shown: str) -> dict[str, bytes]:
    """The objects of an objects file, each checked against its digest; anything else is a
    :class:`~tensorfile.errors.FormatError` naming ``shown``."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise FormatError(f"{shown}: not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != 1:
        raise FormatError(f"{shown}: not a {_FORMAT} file of version 1")
    objects = doc.get("objects")
    if not isinstance(objects, dict):
        raise FormatError(f"{shown}: no 'objects' mapping")
    out: dict[str, bytes] = {}
    for name, entry in objects.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("data"), str):
            raise FormatError(f"{shown}: object {name!r:.100} has no data")
        try:
            data = base64.b64decode(entry["data"], validate=True)
        except (binascii.Error, ValueError):
            raise FormatError(f"{shown}: object {name!r:.100} is not base64") from None
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise FormatError(f"{shown}: object {name!r:.100} does not match its sha256")
        out[name] = data
    return out
