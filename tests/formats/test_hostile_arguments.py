"""Bad arguments get tensorfile's own errors: never an OverflowError, TypeError, ValueError,
UnicodeEncodeError, AssertionError or RuntimeError from deeper down.

Writers (safetensors ``save``/``save_file``/``serialize``/``TensorSpec``/``StreamWriter``,
zTensor ``save_file``/``Writer``), readers (names, indices, devices, dtypes) and slices
(``safe_open(...).get_slice(...)[...]``, ``tensorfile.open(...).read_slice``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.core import slicing as _slicing
from tensorfile.errors import (
    InvalidArgumentError,
    SafetensorSliceError,
    TensorFileError,
    TensorNotFoundError,
    UnsupportedError,
)
from tensorfile.safetensors import StreamWriter, TensorSpec, safe_open, serialize, serialize_file
from tensorfile.safetensors import numpy as st_numpy

A = np.zeros(2, np.float32)


def _raises(fn: Callable[[], Any], exc: type[Exception] = TensorFileError) -> Exception:
    with pytest.raises(exc) as info:
        fn()
    assert isinstance(info.value, TensorFileError)
    return info.value


@pytest.fixture
def st_path(tmp_path: Path) -> str:
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4)}, path)
    return path


# -- safetensors writers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tensors", "metadata"),
    [
        ({"\ud800": A}, None),
        ({"a": A}, {"\udc80": "v"}),
        ({"a": A}, {"k": "\udfff"}),
        ({1: A}, None),
        ({None: A}, None),
        ({"__metadata__": A}, None),
        ({"a": A}, {"k": 1}),
        ({"a": A}, {1: "v"}),
        ({"a": A}, ["k", "v"]),
        ({"a": "not an array"}, None),
    ],
    ids=repr,
)
def test_save_refuses_bad_names_and_metadata(
    tmp_path: Path, tensors: dict[Any, Any], metadata: Any
) -> None:
    path = tmp_path / "x.safetensors"
    _raises(lambda: st_numpy.save(tensors, metadata), InvalidArgumentError)
    _raises(lambda: st_numpy.save_file(tensors, str(path), metadata), InvalidArgumentError)
    assert not path.exists()
    specs = {k: {"dtype": "F32", "shape": [2], "data": bytes(8)} for k in tensors}
    if all(isinstance(v, np.ndarray) for v in tensors.values()):
        _raises(lambda: serialize(specs, metadata), InvalidArgumentError)


@pytest.mark.parametrize("align", [0, -8, 7, 12, "8", 8.0, None, True, 2**70, 10**400])
def test_align_must_be_a_small_positive_multiple_of_8(tmp_path: Path, align: Any) -> None:
    path = str(tmp_path / "x.safetensors")
    _raises(lambda: st_numpy.save_file({"a": A}, path, align=align), InvalidArgumentError)
    spec = {"a": {"dtype": "F32", "shape": [2], "data": bytes(8)}}
    _raises(lambda: serialize_file(spec, path, align=align), InvalidArgumentError)
    _raises(lambda: StreamWriter(path, {"a": ("F32", (2,))}, align=align), InvalidArgumentError)


@pytest.mark.parametrize(
    "shape",
    [[-1, -2], [2.0], [2.5], [True, 2], ["2"], "2", None, 5, [None], [2**48], [10**400], [[2]]],
    ids=repr,
)
def test_serialize_shapes_are_integers_in_range(shape: Any) -> None:
    spec = {"a": {"dtype": "F32", "shape": shape, "data": bytes(8)}}
    _raises(lambda: serialize(spec), InvalidArgumentError)
    _raises(
        lambda: TensorSpec(dtype="float32", shape=shape, data_ptr=0, data_len=8),
        InvalidArgumentError,
    )


def test_serialize_shape_of_a_million_huge_dims_is_refused_quickly() -> None:
    import time

    spec = {"a": {"dtype": "F32", "shape": [2**40] * 1_000_000, "data": bytes(8)}}
    # CPU time of this process, not the clock: what a quadratic loop or a huge allocation
    # costs, whatever else runs on the machine (make test runs the suite in parallel)
    start = time.process_time()
    _raises(lambda: serialize(spec), InvalidArgumentError)
    assert time.process_time() - start < 2.0


@pytest.mark.parametrize(
    "spec",
    [
        {"dtype": None, "shape": [2], "data": bytes(8)},
        {"dtype": 5, "shape": [2], "data": bytes(8)},
        {"dtype": "F32", "shape": [2], "data": 5},
        {"dtype": "F32", "shape": [2], "data": "text"},
        {"dtype": "F32", "shape": [2], "data": memoryview(bytes(16))[::2]},
        {"dtype": "F32", "shape": [3], "data": bytes(8)},
    ],
    # no memory address in an id: every pytest-xdist worker must collect the same names
    ids=lambda spec: re.sub(r" at 0x[0-9a-f]+", "", repr(spec)),
)
def test_serialize_dict_specs(spec: dict[str, Any]) -> None:
    _raises(lambda: serialize({"a": spec}))


@pytest.mark.parametrize(
    "fields",
    [
        {"data_ptr": "x", "data_len": 8},
        {"data_ptr": 1, "data_len": -1},
        {"data_ptr": 1, "data_len": 2**64},
        {"data_ptr": -1, "data_len": 8},
        {"data_ptr": 1.5, "data_len": 8},
        {"data_ptr": 1, "data_len": 2**62},  # a size the shape disagrees with: no read at all
        {"data_ptr": 0, "data_len": 8},  # null
    ],
    ids=repr,
)
def test_tensor_spec_pointer_and_length(fields: dict[str, Any]) -> None:
    def run() -> Any:
        return serialize({"a": TensorSpec(dtype="float32", shape=[2], **fields)})

    _raises(run, InvalidArgumentError)


@pytest.mark.parametrize(
    "specs",
    [["a"], {"a": "F32"}, {"a": ("F32",)}, {"a": ("F32", ["x"])}, {"a": ("nope", [2])},
     {1: ("F32", [2])}, {"a": ("F32", [2**40] * 100_000)}],
    ids=repr,
)  # fmt: skip
def test_stream_writer_specs(tmp_path: Path, specs: Any) -> None:
    path = tmp_path / "s.safetensors"
    _raises(lambda: StreamWriter(str(path), specs))
    assert not path.exists()


def test_stream_writer_data(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        with StreamWriter(str(tmp_path / "s.safetensors"), {"a": ("F32", (2,))}) as w:
            w.write("a", 123)


# -- safetensors readers, slices and devices ----------------------------------------------------

BAD_INDICES = [
    2**63,
    -(2**63),
    2**64,
    10**400,
    (0, 2**63),
    (slice(None), -(2**70)),
    slice(None, None, 0),
    slice(0, 2**70, 0),
    slice("a"),
    slice(1.5),
    (Ellipsis, Ellipsis),
    (0, 0, 0),
    (None,) * 70,
    1.5,
    "x",
    [2**70],
    np.array([5]),
]


@pytest.mark.parametrize("key", BAD_INDICES, ids=repr)
def test_bad_indices_are_invalid_argument_errors(st_path: str, key: Any) -> None:
    with safe_open(st_path, framework="np") as f:
        _raises(lambda: f.get_slice("a")[key], InvalidArgumentError)
    with tensorfile.open(st_path) as r:
        _raises(lambda: r.read_slice("a", key), InvalidArgumentError)


@pytest.mark.parametrize(
    "key", [slice(0, 2**70), slice(-(2**70), None), slice(None, None, 2**70), slice(2**70, None)]
)
def test_huge_slice_bounds_are_clipped_as_numpy_does(st_path: str, key: Any) -> None:
    want = np.arange(12, dtype=np.float32).reshape(3, 4)[key]
    with tensorfile.open(st_path) as r:
        assert np.array_equal(r.read_slice("a", key), want)
    with safe_open(st_path, framework="np") as f:
        if (key.start is not None and key.start > 0) or (key.stop is not None and key.stop > 0):
            # the drop-in refuses bounds past the end, as the reference does, in its words
            with pytest.raises(SafetensorSliceError, match="out of bounds for tensor dimension"):
                f.get_slice("a")[key]
        else:
            assert np.array_equal(f.get_slice("a")[key], want)


def test_slice_plan_is_a_range_not_a_list() -> None:
    # a billion-row tensor sliced whole: the plan holds a range, never a billion ints
    p = _slicing.plan((10**9, 4), slice(None), itemsize=4)
    assert p.span == range(0, 10**9) and p.dense
    p = _slicing.plan((2**62, 0), (slice(None), slice(None)))  # nothing to read
    assert not p.span and p.result_shape == (2**62, 0)


@pytest.mark.parametrize("name", [["a"], {"a": 1}, None, 1, b"a"], ids=repr)
def test_tensor_names_of_the_wrong_type(st_path: str, name: Any) -> None:
    with safe_open(st_path, framework="np") as f:
        _raises(lambda: f.get_tensor(name), TensorFileError)
        _raises(lambda: f.get_slice(name), TensorFileError)
    with tensorfile.open(st_path) as r:
        assert name not in r
        err = _raises(lambda: r.get_tensor(name))
        assert isinstance(err, InvalidArgumentError | TensorNotFoundError)


@pytest.mark.parametrize("names", [5, None.__class__, 1.5])
def test_names_that_are_not_an_iterable(st_path: str, names: Any) -> None:
    with safe_open(st_path, framework="np") as f:
        _raises(lambda: f.read_tensors(names), InvalidArgumentError)
    with tensorfile.open(st_path) as r:
        _raises(lambda: r.get_tensors(names), InvalidArgumentError)


@pytest.mark.parametrize(
    ("device", "exc"),
    [
        ("nonsense", InvalidArgumentError),
        (None, InvalidArgumentError),
        (1.5, InvalidArgumentError),
        (-1, InvalidArgumentError),
        ("cuda:-1", InvalidArgumentError),
        (2**70, InvalidArgumentError),
        ("cuda:99", UnsupportedError),
        ("cuda", UnsupportedError),
        ("mps", UnsupportedError),
        ("xpu:0", UnsupportedError),
        ("hip", UnsupportedError),
        (7, UnsupportedError),
    ],
    ids=repr,
)
def test_invalid_or_unavailable_torch_devices(st_path: str, device: Any, exc: type) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a machine with CUDA: some of these devices exist")
    from tensorfile.safetensors import torch as st_torch

    _raises(lambda: safe_open(st_path, framework="pt", device=device), exc)
    _raises(lambda: st_torch.load_file(st_path, device=device), exc)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "meta"])
def test_usable_torch_devices(st_path: str, device: str) -> None:
    pytest.importorskip("torch")
    with safe_open(st_path, framework="pt", device=device) as f:
        assert tuple(f.get_tensor("a").shape) == (3, 4)


@pytest.mark.parametrize("device", ["cuda", "nonsense", 0])
def test_numpy_arrays_live_on_the_cpu(st_path: str, device: Any) -> None:
    _raises(lambda: safe_open(st_path, framework="np", device=device), InvalidArgumentError)


@pytest.mark.parametrize("data", [123, "text", None, np.zeros(16, np.uint8)[::2]], ids=repr)
def test_load_of_something_that_is_not_a_file_s_bytes(data: Any) -> None:
    _raises(lambda: st_numpy.load(data), InvalidArgumentError)


@pytest.mark.parametrize("backend", ["nope", None, ["mmap"]], ids=repr)
def test_unknown_backend(st_path: str, backend: Any) -> None:
    _raises(lambda: safe_open(st_path, framework="np", backend=backend), InvalidArgumentError)


# -- zTensor writers and readers -------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": 99},
        {"level": 10**30},
        {"level": -(10**30)},
        {"level": "3"},
        {"level": None},
        {"level": 3.5},
        {"level": True},
        {"compression": "nope"},
        {"compression": np.array([1, 2])},
        {"compression": ["zstd"]},
        {"checksum": "md5"},
        {"checksum": np.array(["crc32c"])},
        {"checksum": 1},
        {"attributes": [("k", "v")]},
        {"attributes": {"k": 1}},
        {"attributes": {"\ud800": "v"}},
        {"attributes": {"k": "\udc80"}},
    ],
    ids=repr,
)
def test_zt_writer_options(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    path = tmp_path / "x.zt"
    _raises(lambda: ztensor.save_file({"a": A}, path, **kwargs))
    with ztensor.Writer(tmp_path / "y.zt") as w:
        options = {k: v for k, v in kwargs.items() if k in ("level", "compression", "checksum")}
        if options:
            _raises(lambda: w.add("a", A, **options))
    assert not path.exists()


@pytest.mark.parametrize("level", [-(2**17), -5, 0, 1, 22])
def test_zt_every_zstd_level_works(tmp_path: Path, level: int) -> None:
    path = tmp_path / "x.zt"
    ztensor.save_file({"a": A}, path, compression="zstd", level=level)
    assert ztensor.load_file(path)["a"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", ["\ud800", "a\udcffb", 1, None, ("a",)], ids=repr)
def test_zt_tensor_names(tmp_path: Path, name: Any) -> None:
    path = tmp_path / "x.zt"
    _raises(lambda: ztensor.save_file({name: A}, path), InvalidArgumentError)
    assert not path.exists()


@pytest.mark.parametrize("path", ["nul\x00.zt", 123, None], ids=repr)
def test_zt_writer_paths(path: Any) -> None:
    _raises(lambda: ztensor.save_file({"a": A}, path), InvalidArgumentError)


@pytest.mark.parametrize(
    "shape",
    [["x"], [2.5], [-1], [True], "12", None, [2**64], [2**40] * 100_000],
    ids=lambda s: repr(s)[:40],
)
def test_zt_shapes_of_sparse_and_streamed_tensors(tmp_path: Path, shape: Any) -> None:
    _raises(lambda: ztensor.COOTensor(np.ones(0), np.zeros((0, 0)), shape), InvalidArgumentError)
    with ztensor.Writer(tmp_path / "s.zt") as w:
        _raises(lambda: w.add_stream("a", "float32", shape, []), InvalidArgumentError)


def test_zt_stream_chunks(tmp_path: Path) -> None:
    with ztensor.Writer(tmp_path / "s.zt") as w:
        _raises(lambda: w.add_stream("a", "float32", [2], 5), InvalidArgumentError)
        _raises(lambda: w.add_stream("b", "float32", [2], ["text"]), InvalidArgumentError)


def test_zt_csr_shape_strings_are_refused() -> None:
    _raises(
        lambda: ztensor.CSRTensor(np.ones(1), [0], [0, 1], ("1", 1)),  # type: ignore[arg-type]
        InvalidArgumentError,
    )


def test_zt_reader_arguments(tmp_path: Path) -> None:
    path = tmp_path / "r.zt"
    ztensor.save_file({"a": A}, path)
    with ztensor.open(path) as r:
        _raises(lambda: r.read_component("a", "data", dtype="nonsense"), InvalidArgumentError)
        _raises(lambda: r.read_component("a", "data", dtype=object), InvalidArgumentError)
        _raises(lambda: r.component("a", ["data"]), InvalidArgumentError)
        _raises(lambda: r.get_tensor(["a"]), InvalidArgumentError)
        _raises(lambda: r.get_tensors(5), InvalidArgumentError)
        _raises(lambda: r.read_slice("a", 2**63), InvalidArgumentError)
    _raises(lambda: ztensor.load_file(path, framework="nonsense"), UnsupportedError)
    _raises(lambda: ztensor.open(123), InvalidArgumentError)  # type: ignore[arg-type]


def test_zt_dense_form_of_a_huge_sparse_tensor_is_an_error_of_ours() -> None:
    coo = ztensor.COOTensor(np.ones(1), np.zeros((3, 1), np.uint64), (2**40, 2**40, 2**40))
    _raises(coo.to_dense, UnsupportedError)
    csr = ztensor.CSRTensor(np.ones(1), [0], [0, 1], (1, 2**62))
    _raises(csr.to_dense, UnsupportedError)
