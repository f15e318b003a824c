"""The dtype table of ``tensorfile.core.dtypes``: every safetensors and zTensor name, numpy
dtype and bit width."""

from __future__ import annotations

import numpy as np

from tensorfile.core import dtypes


def test_dtype_table_is_complete_and_consistent() -> None:
    names = [d.name for d in dtypes.ALL]
    assert names == ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                     "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
                     "I32", "U32", "F32", "C64", "F64", "I64", "U64"]  # fmt: skip
    for d in dtypes.ALL:
        assert dtypes.from_safetensors(d.name) is d
        assert dtypes.numpy_dtype(d).itemsize * 8 == max(d.bits, 8) or d.is_subbyte
        assert dtypes.from_numpy(d.numpy) is d
        if d.ztensor_name:
            assert dtypes.from_ztensor(d.ztensor_name) is d
    assert dtypes.from_numpy(np.dtype(">f4")).name == "F32"
