"""A dict of numpy arrays as the zip ``torch.save`` writes, without torch (for the sample
``model.pt``; tensorfile itself reads PyTorch pickles only through torch)."""

from __future__ import annotations

import struct
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["save_torch_pickle"]

NDArray = np.ndarray[Any, Any]

# torch's storage class for each dtype a sample has
_STORAGES = {"float32": "FloatStorage", "float16": "HalfStorage", "bfloat16": "BFloat16Storage"}
_STORAGES["int64"] = "LongStorage"
_ALIGN = 64  # torch.save aligns each storage's bytes in the zip to 64


def _pickle_str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def _pickle_int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)  # BININT


def _pickle_ints(values: Sequence[int]) -> bytes:
    return b"(" + b"".join(_pickle_int(v) for v in values) + b"t"  # MARK ... TUPLE


def _tensor_pickle(key: str, arr: NDArray) -> bytes:
    """``torch._utils._rebuild_tensor_v2`` of storage ``key``, as ``torch.save`` pickles a
    contiguous tensor (the opcodes torch's ``weights_only`` unpickler accepts)."""
    strides: list[int] = []
    step = 1
    for n in reversed(arr.shape):
        strides.insert(0, step)
        step *= n
    storage = (
        b"("
        + _pickle_str("storage")
        + b"ctorch\n"
        + _STORAGES[str(arr.dtype)].encode()
        + b"\n"
        + _pickle_str(key)
        + _pickle_str("cpu")
        + _pickle_int(arr.size)
        + b"tQ"  # TUPLE, BINPERSID
    )
    return (
        b"ctorch._utils\n_rebuild_tensor_v2\n("
        + storage
        + _pickle_int(0)
        + _pickle_ints(arr.shape)
        + _pickle_ints(strides)
        + b"\x89"  # NEWFALSE: requires_grad
        + b"ccollections\nOrderedDict\n)R"  # backward hooks: OrderedDict()
        + b"tR"
    )


def save_torch_pickle(tensors: Mapping[str, NDArray], path: Path) -> None:
    """A dict of tensors as the zip ``torch.save`` writes, without torch: a protocol-2
    pickle of ``_rebuild_tensor_v2`` calls and each storage's bytes, stored at a multiple
    of 64 bytes. ``torch.load(weights_only=True)`` reads it back exactly."""
    body = [b"\x80\x02}("]  # PROTO 2, EMPTY_DICT, MARK
    for i, (name, arr) in enumerate(tensors.items()):
        body.append(_pickle_str(name) + _tensor_pickle(str(i), arr))
    body.append(b"u.")  # SETITEMS, STOP
    root = path.stem
    entries = [(f"{root}/data.pkl", b"".join(body)), (f"{root}/byteorder", sys.byteorder.encode())]
    for i, arr in enumerate(tensors.values()):  # native byte order, as the entry above says
        entries.append((f"{root}/data/{i}", np.ascontiguousarray(arr).tobytes()))
    entries.append((f"{root}/version", b"3\n"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            start = z.fp.tell() if z.fp is not None else 0
            header = 30 + len(name.encode()) + 4  # 4: the extra field's own header
            info.extra = b"FB" + struct.pack("<H", -(start + header) % _ALIGN)
            info.extra += b"Z" * (-(start + header) % _ALIGN)
            z.writestr(info, data)
