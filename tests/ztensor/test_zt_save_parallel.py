"""save_file with zstd compresses tensors on worker threads: same tensors, same order, same
digests as adding them one by one; errors still leave nothing behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import ztensor as zref

from tensorfile import ztensor
from tensorfile.core.errors import ZTensorUnsupportedError
from tensorfile.ztensor import CSRTensor


def _arrays() -> dict[str, object]:
    rng = np.random.default_rng(1)
    out: dict[str, object] = {
        f"t{i}": rng.standard_normal((i + 1, 33), np.float32) for i in range(7)
    }
    out["sparse"] = CSRTensor(
        np.array([1.0, 2.0], np.float32), np.array([0, 2], np.uint64),
        np.array([0, 1, 2], np.uint64), (2, 3),
    )  # fmt: skip
    out["last"] = np.arange(5, dtype=np.int64)
    return out


@pytest.mark.parametrize("checksum", [None, "crc32c", "sha256"])
def test_parallel_save_matches_one_by_one(tmp_path: Path, checksum: str | None) -> None:
    arrays = _arrays()
    fast, slow = tmp_path / "fast.zt", tmp_path / "slow.zt"
    ztensor.save_file(arrays, fast, compression="zstd", checksum=checksum)
    with ztensor.Writer(slow, compression="zstd", checksum=checksum) as w:
        for name, tensor in arrays.items():
            w.add(name, tensor)
    with ztensor.open(fast) as f, ztensor.open(slow) as s:
        assert f.keys() == s.keys() == list(arrays)
        for name in arrays:
            a, b = f.info(name), s.info(name)
            assert a.components.keys() == b.components.keys()
            for role in a.components:
                ca, cb = a.components[role], b.components[role]
                assert (ca.range, ca.encoding, ca.digest) == (cb.range, cb.encoding, cb.digest)
    got = ztensor.load_file(fast)
    for name, value in arrays.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[name], value)
            # the v1.0 reference reads what the workers wrote
            with zref.Reader(str(fast)) as r:
                np.testing.assert_array_equal(np.array(r.read_tensor(name)), value)


def test_parallel_save_error_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    path.write_bytes(b"old")
    arrays = _arrays()
    arrays["bad"] = np.zeros(3, np.complex64)
    arrays["after"] = np.ones(3, np.float32)
    with pytest.raises(ZTensorUnsupportedError, match="complex64"):
        ztensor.save_file(arrays, path, compression="zstd")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.zt"]
