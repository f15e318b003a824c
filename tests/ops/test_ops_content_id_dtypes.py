"""The content id does not depend on the container: for every dtype safetensors and zTensor
v2 share (and v1.0 where it has the type), the id of a safetensors file equals that of its
conversion to zTensor v2 (raw and zstd) and v1.0 (F8 tensors used to differ: the v2
logical type's name was not in the one dtype vocabulary)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorfile import TensorFileError
from tensorfile.core import dtypes
from tensorfile.ops import content_hash, convert
from tensorfile.safetensors.numpy import save_file

SHARED = [n for n in dtypes.ZTENSOR_V2 if n != "C128"]


def _tensors(name: str) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    dt = dtypes.from_name(name)
    if dt.bits < 8:  # F4: two values a byte, kept packed as stored
        return {"w": np.arange(8, dtype=np.uint8).view(dt.numpy)}
    raw = np.arange(8 * dt.nbytes(1), dtype=np.uint8) % (2 if name == "BOOL" else 7)
    arr = raw.view(dt.numpy)
    return {"w": arr, "zero_d": arr[:1].reshape(())}


@pytest.mark.parametrize("name", SHARED)
def test_the_content_id_is_the_same_in_every_container(tmp_path: Path, name: str) -> None:
    src = tmp_path / "m.safetensors"
    save_file(_tensors(name), str(src))
    want = content_hash(str(src))
    for dst, extra in (("raw.zt", {}), ("zstd.zt", {"compression": "zstd"})):
        convert(str(src), str(tmp_path / dst), to="zt2", **extra)
        assert content_hash(str(tmp_path / dst)) == want, (name, dst)
    v1 = tmp_path / "v1.zt"
    if dtypes.from_name(name).ztensor_name is None:  # v1.0 lacks it: refused, never lossy
        with pytest.raises(TensorFileError, match=r"zTensor v1\.0"):
            convert(str(src), str(v1), to="zt")
    else:
        convert(str(src), str(v1), to="zt")
        assert content_hash(str(v1)) == want, (name, "v1")
