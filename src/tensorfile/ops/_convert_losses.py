"""What a conversion cannot keep, said in :attr:`tensorfile.ops.ConvertResult.notes`: no
loss is silent. The tensors' values are kept, or refused before anything is written (a
bf16 tensor to ``.npz``, a sparse one without ``densify``), or noted where they change
(GGUF's quantized blocks, dequantized to float32, note themselves). What else can be lost
is noted here:

- metadata, where the destination holds none (``.npz``, ``.npy``), holds only text
  (safetensors, zTensor v1.0: other values become JSON text), or has no types of GGUF's
  (a uint32 and an int64 are both a number, a float32 its shortest decimal);
- the per-tensor digests a source stores (zTensor), where the destination stores none or
  ``checksum`` was not given;
- zTensor v2 object attributes (convert writes file metadata only);
- and, whatever the destination, what no digest vouched for: the tensors a source's
  digests leave out (:func:`uncovered_notes`: that source fails ``verify``, rule
  ``uncovered``, and with ``checksum=`` the output's fresh digests would hide it).

Example:
    >>> from tensorfile import formats
    >>> losses(Kept("safetensors", {"n": 3}), formats.NPZ, {}, "npz")
    ["metadata: 1 key not kept (npz holds no metadata): 'n'"]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import formats

__all__ = ["Kept", "losses", "uncovered_notes"]

_SHOWN = 5  # names a note lists before "..."


@dataclass(frozen=True)
class Kept:
    """What a source holds beside its tensors' values, which a destination may not keep.

    Attributes:
        format: the source's format name (``gguf``: metadata with GGUF's value types).
        metadata: its metadata, as plain values.
        digests: the number of tensors with a stored digest, by algorithm.
        object_attributes: the tensors that carry attributes of their own (zTensor v2).
        uncovered: the tensors no stored digest covers while others are covered (the
            source fails ``verify``'s rule ``uncovered``).
    """

    format: str
    metadata: Mapping[str, Any]
    digests: Mapping[str, int] = field(default_factory=dict)
    object_attributes: tuple[str, ...] = ()
    uncovered: tuple[str, ...] = ()


def _names(names: list[str]) -> str:
    names = sorted(names)
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _has_number(value: Any) -> bool:
    """Whether ``value`` (a plain metadata value) holds a number, whose GGUF type (uint32,
    float32...) no other format keeps."""
    if isinstance(value, list):
        return any(_has_number(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def _metadata(kept: Kept, fmt: formats.Format, options: Mapping[str, Any], label: str) -> list[str]:
    meta = kept.metadata
    if not meta:
        return []
    if fmt in (formats.NPZ, formats.NPY):
        return [
            f"metadata: {_count(len(meta), 'key')} not kept ({label} holds no metadata): "
            f"{_names(list(meta))}"
        ]
    notes = []
    cbor = fmt is formats.ZTENSOR and options.get("version") == 2
    if not cbor:
        as_json = [k for k, v in meta.items() if not isinstance(v, str)]
        if as_json:
            notes.append(
                f"metadata: {_count(len(as_json), 'value')} not text, written as JSON text "
                f"({label} holds text only): {_names(as_json)}"
            )
    if kept.format == "gguf" and any(_has_number(v) for v in meta.values()):
        notes.append(
            f"metadata: GGUF's value types are not kept ({label} has none of its own: "
            "a uint32 and an int64 are both a number, a float32 is written as its shortest "
            "decimal)"
        )
    return notes


def _digests(kept: Kept, fmt: formats.Format, options: Mapping[str, Any], label: str) -> list[str]:
    if not kept.digests or options.get("checksum") is not None:
        return []
    found = ", ".join(f"{alg} ({_count(n, 'tensor')})" for alg, n in sorted(kept.digests.items()))
    if fmt in (formats.NPZ, formats.NPY):
        return [f"checksums: the source's digests are not kept ({label} stores none): {found}"]
    return [
        f"checksums: the source's digests are not kept: {found}; pass checksum= (--checksum) "
        f"to have {label} store its own"
    ]


def uncovered_notes(kept: Kept, options: Mapping[str, Any], label: str) -> list[str]:
    """The source's tensors no digest covered: their bytes were not checked as they were
    read, and with ``checksum=`` the output's digests of them vouch for whatever they
    held (the source fails ``verify``, the output would pass it)."""
    names = list(kept.uncovered)
    if not names:
        return []
    note = (
        f"checksums: the source's digests leave out {_count(len(names), 'tensor')} "
        f"({_names(names)}): their bytes were copied unchecked, and the source fails "
        "verify (rule uncovered)"
    )
    if options.get("checksum") is not None:
        note += f"; the digests {label} stores for them are new, over those unchecked bytes"
    return [note]


def losses(kept: Kept, fmt: formats.Format, options: Mapping[str, Any], label: str) -> list[str]:
    """The notes on what writing a source that holds ``kept`` to ``fmt`` with ``options``
    (already checked; ``label`` the destination's name in messages) does not keep."""
    notes = _metadata(kept, fmt, options, label) + _digests(kept, fmt, options, label)
    if kept.object_attributes:
        names = list(kept.object_attributes)
        notes.append(
            f"object attributes: those of {_count(len(names), 'tensor')} are not kept "
            f"(convert writes file metadata only): {_names(names)}"
        )
    return notes
