"""tensorfile.safetensors.paddle with paddle itself: paddle's own save/load as the oracle,
devices, the reference's exact bytes, and what only paddle has (places, sparse tensors,
strided views, parameters)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorfile.errors import InvalidArgumentError, UnsupportedError
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import lazy

paddle = lazy("paddle")
st_paddle = pytest.importorskip("tensorfile.safetensors.paddle")


def _equal(a: Any, b: Any) -> bool:
    """Same dtype, shape and values (paddle has no F8 comparison: through float32, exact)."""
    if a.dtype != b.dtype or list(a.shape) != list(b.shape):
        return False
    if "float8" in str(a.dtype):
        a, b = a.astype(paddle.float32), b.astype(paddle.float32)
    return bool(paddle.all(a == b))


def test_paddle_save_and_safetensors_agree(tmp_path: Any) -> None:
    data = {
        "f32": paddle.randn((64, 32)),
        "bf16": paddle.randn((8, 8)).astype(paddle.bfloat16),
        "e5m2": paddle.randn((16,)).astype(paddle.float8_e5m2),
        "c64": paddle.randn((4,)).astype(paddle.complex64),
        "i64": paddle.arange(10, dtype=paddle.int64),
    }
    paddle.save(data, str(tmp_path / "m.pdparams"))
    st_paddle.save_file(data, tmp_path / "m.safetensors")
    theirs = paddle.load(str(tmp_path / "m.pdparams"))
    for loaded in (
        st_paddle.load_file(tmp_path / "m.safetensors"),
        st_paddle.load((tmp_path / "m.safetensors").read_bytes()),
    ):
        for k, v in data.items():
            assert loaded[k].place.is_cpu_place()
            assert _equal(loaded[k], v), k
            if theirs[k].dtype == v.dtype:  # (paddle 3.3's own load makes F8 int8)
                assert _equal(loaded[k], theirs[k]), k


def test_the_references_bytes() -> None:
    """The reference's own test: one 2x2 F32 tensor, to the byte."""
    blob = st_paddle.save({"test": paddle.zeros((2, 2), dtype=paddle.float32)})
    assert blob == (
        b'@\x00\x00\x00\x00\x00\x00\x00{"test":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'
        b"    " + b"\x00" * 16
    )


def test_zero_size_strided_and_parameter_tensors_save_by_value() -> None:
    x = paddle.arange(24, dtype=paddle.float32).reshape((4, 6))
    strided = x[:, ::2]
    assert not strided.is_contiguous()  # the reference refuses it
    param = paddle.create_parameter([3], "float32")
    data = {"empty": paddle.zeros((2, 0)), "strided": strided, "param": param}
    back = st_paddle.load(st_paddle.save(data))
    assert list(back["empty"].shape) == [2, 0]
    assert back["strided"].tolist() == strided.tolist()
    assert back["param"].tolist() == param.tolist()


def test_tensors_paddle_cannot_save_here_are_refused() -> None:
    with pytest.raises(UnsupportedError, match="paddle dtype complex128"):
        st_paddle.save({"x": paddle.to_tensor([1 + 2j], dtype=paddle.complex128)})
    sparse = paddle.sparse.sparse_coo_tensor([[0], [1]], [1.0], [2, 2])
    with pytest.raises(InvalidArgumentError, match="sparse tensor"):
        st_paddle.save({"x": sparse})


def test_u16_is_refused_where_the_reference_reads_bf16(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"u": np.arange(3, dtype=np.uint16)}, path)
    with pytest.raises(UnsupportedError, match="'u' is U16"):
        st_paddle.load_file(path)


def test_devices(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"a": np.arange(3, dtype=np.float32)}, path)
    for device in ("cpu", None, paddle.CPUPlace()):
        assert st_paddle.load_file(path, device=device)["a"].place.is_cpu_place()
    for device in ("nonsense", "cpu:1", "tpu", 1.5, ["cpu"], True, -1):
        with pytest.raises(InvalidArgumentError, match="not a paddle device"):
            st_paddle.load_file(path, device=device)
    if not paddle.device.is_compiled_with_cuda():
        for device in ("cuda", "cuda:0", "gpu", "gpu:1", 0):
            with pytest.raises(UnsupportedError, match="not available to this paddle"):
                safe_open(path, framework="paddle", device=device)
        with pytest.raises(UnsupportedError, match="not available"):
            st_paddle.load(st_numpy.save({"a": np.zeros(1)}), device="cuda")
    else:  # pragma: no cover - a machine with a GPU
        got = st_paddle.load_file(path, device="cuda")["a"]
        assert got.place.is_gpu_place() and got.tolist() == [0.0, 1.0, 2.0]
