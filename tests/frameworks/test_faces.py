"""What every framework module (flax, tensorflow, mlx, paddle) does alike, checked against
the real framework: the bytes it writes are the numpy module's, what it reads is the
framework's own array with the file's values, ``safe_open(framework=...)`` hands out the
framework's arrays (whole and sliced), the dtypes the framework lacks are refused by name,
and bad arguments are tensorfile errors."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from tensorfile.core import dtypes
from tensorfile.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    TensorFileError,
    UnsupportedError,
)
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import BRIDGES, Bridge, face, require
from tests.helpers.samples import BYTE_DTYPES, SUBBYTE_DTYPES, assert_same, sample

FRAMEWORKS = list(BRIDGES)
ALL_DTYPES = [d.name for d in dtypes.ALL]


def _held(bridge: Bridge) -> list[str]:
    return [n for n in BYTE_DTYPES if n not in bridge.lacks]


def _cases(pick: Any) -> list[Any]:
    return [pytest.param(fw, n, id=f"{fw}-{n}") for fw, b in BRIDGES.items() for n in pick(b)]


HELD = _cases(_held)
LACKED = _cases(lambda b: sorted(b.lacks))


@pytest.mark.parametrize(("fw", "name"), HELD)
def test_save_writes_the_numpy_modules_bytes(fw: str, name: str) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    x = bridge.native(sample(name, (3, 4), seed=1))
    scalar = bridge.native(sample(name, (), seed=2))
    empty = bridge.native(sample(name, (2, 0), seed=3))
    tensors = {"x": x, "scalar": scalar, "empty": empty}
    want = st_numpy.save({k: bridge.numpy(v) for k, v in tensors.items()}, {"k": "v"})
    assert mod.save(tensors, metadata={"k": "v"}) == want


@pytest.mark.parametrize(("fw", "name"), HELD)
def test_load_gives_the_frameworks_arrays(fw: str, name: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    arrays = {"x": sample(name, (3, 4), seed=4), "s": sample(name, (), seed=5)}
    arrays["e"] = sample(name, (0, 3), seed=6)
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file(arrays, path)
    blob = st_numpy.save(arrays)
    for loaded in (mod.load_file(path), mod.load(blob), mod.load_file(path, backend="pread")):
        assert set(loaded) == set(arrays)
        for k, arr in arrays.items():
            assert bridge.is_native(loaded[k]), type(loaded[k])
            # the framework's own conversion of the numpy array is the oracle (jax and mlx
            # narrow 64-bit types, as in the reference)
            assert_same(bridge.numpy(loaded[k]), bridge.numpy(bridge.as_loaded(arr)))


@pytest.mark.parametrize(("fw", "name"), HELD)
def test_round_trip(fw: str, name: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    x = bridge.native(sample(name, (2, 5), seed=7))
    path = str(tmp_path / "m.safetensors")
    mod.save_file({"w": x}, path, {"format": fw})
    back = mod.load_file(path)["w"]
    assert bridge.is_native(back)
    assert_same(bridge.numpy(back), bridge.numpy(bridge.as_loaded(bridge.numpy(x))))
    with safe_open(path, framework=fw) as f:
        assert f.metadata() == {"format": fw}
        # (jax narrows 64-bit types unless jax_enable_x64 is on: x is what jax made)
        assert f.get_slice("w").get_dtype() == dtypes.from_numpy(bridge.numpy(x).dtype).name


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_safe_open_get_tensor_and_get_slice(fw: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    face(bridge)
    arr = sample("F32", (6, 5), seed=8)
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"a": arr, "b": sample("I32", (4,), seed=9)}, path)
    with safe_open(path, framework=fw) as f:
        assert f.keys() == ["a", "b"]
        whole = f.get_tensor("a")
        assert bridge.is_native(whole)
        assert_same(bridge.numpy(whole), arr)
        sl = f.get_slice("a")
        assert sl.get_shape() == [6, 5]
        for key in [slice(None), (slice(1, 4), slice(None, None, 2)), 2, (slice(2, None), -1)]:
            part = sl[key]
            assert bridge.is_native(part), (key, type(part))
            assert_same(bridge.numpy(part), arr[key])
        assert tuple(bridge.numpy(sl[[]]).shape) == (0, 5)
        both = f.read_tensors(copy=False)
        assert list(both) == ["a", "b"] and all(bridge.is_native(t) for t in both.values())
        assert_same(bridge.numpy(both["a"]), arr)


@pytest.mark.parametrize(
    ("fw", "name"), _cases(lambda b: [n for n in SUBBYTE_DTYPES if n not in b.lacks])
)
def test_bit_packed_dtypes_the_framework_holds(fw: str, name: str) -> None:
    """F4: one element per byte in the framework (as in ml_dtypes), packed in the file."""
    bridge = BRIDGES[fw]
    mod = face(bridge)
    arr = sample(name, (3, 4), seed=13)
    blob = st_numpy.save({"x": arr})
    got = mod.load(blob)["x"]
    assert bridge.is_native(got)
    assert_same(bridge.numpy(got), arr)
    assert mod.save({"x": got}) == blob


@pytest.mark.parametrize(("fw", "name"), LACKED)
def test_a_dtype_the_framework_lacks_is_refused_by_name(fw: str, name: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"bad": sample(name, (2, 4), seed=10), "ok": np.ones(2, np.float32)}, path)
    for attempt in (
        lambda: mod.load_file(path),
        lambda: mod.load(st_numpy.save({"bad": sample(name, (4,))})),
    ):
        with pytest.raises(UnsupportedError) as info:
            attempt()
        assert name in str(info.value) and "bad" in str(info.value)
    with safe_open(path, framework=fw) as f:
        assert_same(bridge.numpy(f.get_tensor("ok")), np.ones(2, np.float32))
        with pytest.raises(UnsupportedError, match=name):
            f.get_tensor("bad")
        with pytest.raises(UnsupportedError, match=name):
            f.get_slice("bad")[:1]
        with pytest.raises(UnsupportedError, match=name):
            f.read_tensors(copy=False)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_saving_leaves_the_callers_dict_alone(fw: str) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    x = bridge.native(np.arange(4, dtype=np.float32))
    tensors = {"x": x}
    mod.save(tensors)
    assert tensors["x"] is x  # the reference replaces it with a numpy array


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_bad_arguments_are_tensorfile_errors(fw: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    torch = require("torch")
    x = bridge.native(np.zeros(2, np.float32))
    path = str(tmp_path / "m.safetensors")
    for bad in ([("x", x)], None, "x", x):
        with pytest.raises(InvalidTypeError, match="Expected a dict"):
            mod.save(bad)
        with pytest.raises(TypeError):  # what the reference raises (or an AttributeError)
            mod.save_file(bad, path)
    for value in ([1.0, 2.0], "text", 3, None, torch.zeros(2), {"nested": x}):
        with pytest.raises(InvalidTypeError, match="Key `x` is invalid"):
            mod.save({"x": value})
    for name in (1, None, ("a",), "__metadata__"):
        with pytest.raises(InvalidArgumentError):
            mod.save({name: x})
    for metadata in ({"k": 1}, {1: "v"}, "k=v"):
        with pytest.raises(InvalidArgumentError):
            mod.save({"x": x}, metadata=metadata)
    with pytest.raises(TensorFileError):
        mod.load(b"not a safetensors file")
    for data in ("text", None, 3, [b"\0"]):
        with pytest.raises(InvalidArgumentError):
            mod.load(data)
    for filename in (3, None, b"\0".decode() + "x", ["m.safetensors"]):
        with pytest.raises(TensorFileError):
            mod.load_file(filename)
    with pytest.raises(InvalidArgumentError):
        mod.load_file(path, backend="nonsense")
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("fw", ["tf", "flax", "mlx"])
def test_devices_other_than_the_cpu_are_refused(fw: str, tmp_path: Any) -> None:
    face(BRIDGES[fw])
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"a": np.zeros(1, np.float32)}, path)
    for device in ("cuda", "cuda:0", 0, "gpu", "CPU", ["cpu"]):
        with pytest.raises(InvalidArgumentError, match="not supported for framework"):
            safe_open(path, framework=fw, device=device)
    for device in ("cpu", None):  # None is the reference's default
        with safe_open(path, framework=fw, device=device) as f:
            assert BRIDGES[fw].is_native(f.get_tensor("a"))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_signatures_are_the_references(fw: str) -> None:
    """Every parameter of the reference's function, in its place, with its default; the
    extra ones (``align``, ``fsync``) are keyword-only."""
    bridge = BRIDGES[fw]
    mod = face(bridge)
    require("safetensors")
    ref = pytest.importorskip(bridge.reference, reason="the reference module cannot load here")
    for fn in ("save", "save_file", "load", "load_file"):
        ours = inspect.signature(getattr(mod, fn)).parameters
        theirs = inspect.signature(getattr(ref, fn)).parameters
        assert list(ours)[: len(theirs)] == list(theirs), fn
        for p in theirs.values():
            assert (ours[p.name].kind, ours[p.name].default) == (p.kind, p.default), (fn, p)
        for extra in list(ours)[len(theirs) :]:
            assert ours[extra].kind == inspect.Parameter.KEYWORD_ONLY, (fn, extra)


def _reference_can_save(fw: str, name: str) -> bool:
    """The reference's own limits: mlx's bf16 cannot become numpy (mlx issue 1296); paddle
    saves only the dtypes of its size table."""
    if fw == "mlx":
        return name != "BF16"
    if fw == "paddle":
        return name in {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL",
                        "F8_E4M3", "F8_E5M2", "C64"}  # fmt: skip
    return True


@pytest.mark.parametrize(("fw", "name"), HELD)
def test_same_bytes_as_the_reference(fw: str, name: str, tmp_path: Any) -> None:
    bridge = BRIDGES[fw]
    mod = face(bridge)
    require("safetensors")
    ref = pytest.importorskip(bridge.reference, reason="the reference module cannot load here")
    if not _reference_can_save(fw, name):
        pytest.skip(f"the reference cannot save {name} with {fw}")
    tensors = {"x": bridge.native(sample(name, (3, 4), seed=11))}
    if fw != "tf":  # the reference's tf.Tensor.numpy() of a 0-d tensor is no array: it fails
        tensors["s"] = bridge.native(sample(name, (), seed=12))
    assert mod.save(tensors, {"k": "v"}) == ref.save(dict(tensors), {"k": "v"})
