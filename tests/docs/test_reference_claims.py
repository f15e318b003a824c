"""Every claim the docs make about the reference ``safetensors`` (0.8.0, the pinned one), shown
against the real library.

Each row of the tables of docs/differences.md, each framework bullet there, each row of the
"What you gain" table of docs/guides/migrating.md and of the table of
docs/guides/errors.md has a test here, named after the row (:data:`ROWS` maps each row to
its test, and :func:`test_every_row_has_its_test` fails when a row is added, renamed or
dropped without one). Each test runs the real ``safetensors`` and tensorfile side by side and
shows the stated difference. Claims in prose are shown too: the whitespace the reference's
JSON parser skips (guides/formats.md) by ``test_whitespace_before_header``, its 8-byte
alignment (guides/convert-verify.md) by ``test_align``, its digests-as-text reading
(guides/convert-verify.md) by ``test_digests``, its header limit (guides/errors.md) by
``test_header_limit``, its owned numpy arrays (guides/loading-fast.md) by
``test_numpy_load_file_gives_owned_writable_arrays``, and the byte-swapped big-endian
arrays under differences.md's writing table by ``test_numpy_arrays_not_c_ordered``.

Rows no test here shows (``"NOT_SHOWN"`` in :data:`ROWS`), and why:

- migrating.md, "`load_file`": that the reference fills buffers in one thread is a fact of
  its Rust code; counting threads while it runs would be a race, not a test.
- migrating.md, "loading to a GPU": needs a CUDA device (the benchmarks show it, on an H100),
  as does loading-fast.md's "the reference ... copies tensor by tensor from pageable memory".

Rows that compare with other packages are shown where those packages are tested:
differences.md's zTensor table (the ``ztensor`` package) by tests/ztensor/test_zt_interop.py
(``test_reference_dense_reads_in_tensorfile`` for the scalar, the checksum tests for the
digests); its prose on huggingface_hub by tests/safetensors/test_sharded_save.py (that
huggingface_hub removes the old files before it writes the new ones is read from its source,
``save_torch_state_dict``; no test here kills it mid-save); weight-inspect's hash by
tests/ops/test_ops_hash.py; the Spark connector's layout by tests/dataset.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as ref_np
import torch

import tensorfile
import tensorfile.safetensors as ts
import tensorfile.safetensors.numpy as tf_np
from tensorfile import errors
from tests.helpers.frameworks import require

REPO = Path(__file__).resolve().parents[2]
ENTRY = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'


def blob(header: str, data: bytes = b"") -> bytes:
    """A safetensors file from its header text and its data."""
    raw = header.encode()
    return struct.pack("<Q", len(raw)) + raw + data


def ref_keys(path: Path) -> list[str]:
    """The names the reference reads from ``path``'s header (no data is read)."""
    with safetensors.safe_open(str(path), framework="np") as f:
        return list(f.keys())


# -- differences.md: reading safetensors, stricter validation ---------------------------------


def test_duplicate_tensor_name() -> None:
    second = '{"dtype":"I8","shape":[1],"data_offsets":[0,1]}'
    data = blob('{"w":' + ENTRY + ',"w":' + second + "}", b"\x05")
    assert [(name, t["dtype"]) for name, t in safetensors.deserialize(data)] == [("w", "I8")]
    with pytest.raises(errors.DuplicateTensorError):
        ts.deserialize(data)


def test_duplicate_metadata_key(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(blob('{"__metadata__":{"a":"1","a":"2"},"w":' + ENTRY + "}", b"\x05"))
    with safetensors.safe_open(str(path), framework="np") as f:
        assert f.metadata() == {"a": "2"}
    with pytest.raises(errors.InvalidMetadataError):
        tf_np.load_file(path)


def test_whitespace_before_header() -> None:
    data = blob(' {"w":' + ENTRY + "}", b"\x05")
    assert ref_np.load(data)["w"].tolist() == [5]
    with pytest.raises(errors.HeaderSyntaxError):
        tf_np.load(data)


def test_dimension_of_2_48() -> None:
    data = blob(json.dumps({"w": {"dtype": "U8", "shape": [0, 2**48], "data_offsets": [0, 0]}}))
    assert ref_np.load(data)["w"].shape == (0, 2**48)
    with pytest.raises(errors.InvalidTensorEntryError):
        tf_np.load(data)


def test_empty_tensor_overflowing_64_bits(tmp_path: Path) -> None:
    path = tmp_path / "o.safetensors"
    shape = [0, 2**40, 2**40]  # 2**80 elements of 64 bits, were it not empty
    path.write_bytes(
        blob(json.dumps({"w": {"dtype": "F64", "shape": shape, "data_offsets": [0, 0]}}))
    )
    assert ref_keys(path) == ["w"]
    with pytest.raises(errors.ValidationOverflowError):
        tf_np.load_file(path)


# -- differences.md: writing safetensors ------------------------------------------------------


@pytest.mark.parametrize(
    "save_file", [ref_np.save_file, tf_np.save_file], ids=["reference", "tensorfile"]
)
def test_any_file(save_file: Callable[..., None], tmp_path: Path) -> None:
    """Both write a temporary file and rename it over the target: a hard link to the old file
    keeps the old bytes (a write in place would change them through the link too)."""
    path, link = tmp_path / "a.safetensors", tmp_path / "old.safetensors"
    save_file({"x": np.zeros(4, np.float32)}, path)
    os.link(path, link)
    old = link.read_bytes()
    save_file({"x": np.ones(4, np.float32)}, path)
    assert link.read_bytes() == old
    assert not os.path.samefile(path, link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "old.safetensors"]
    # and only tensorfile can flush the file to the disk before returning
    assert (save_file is tf_np.save_file) == ("fsync" in inspect.signature(save_file).parameters)


def test_file_mode(tmp_path: Path) -> None:
    """A new file: 0600 and the umask's; over a 0640 file: 0600 and 0640 (review j07); over
    a read-only file: replaced (0600) and refused, untouched (j07b)."""
    r, t = tmp_path / "r.safetensors", tmp_path / "t.safetensors"
    old = os.umask(0o022)
    try:
        ref_np.save_file({"x": np.zeros(1)}, r)
        tf_np.save_file({"x": np.zeros(1)}, t)
        assert (r.stat().st_mode & 0o777, t.stat().st_mode & 0o777) == (0o600, 0o644)
        for path, save in ((r, ref_np.save_file), (t, tf_np.save_file)):
            path.chmod(0o640)
            save({"x": np.ones(1)}, path)
        assert (r.stat().st_mode & 0o777, t.stat().st_mode & 0o777) == (0o600, 0o640)
        r.chmod(0o444)
        t.chmod(0o444)
        kept = t.read_bytes()
        ref_np.save_file({"x": np.zeros(1)}, r)  # (a rename: for any user who may write here)
        assert r.stat().st_mode & 0o777 == 0o600
        with pytest.raises(errors.SourceError, match=r"read-only \(mode 0444\)"):
            tf_np.save_file({"x": np.zeros(1)}, t)
        assert (t.read_bytes(), t.stat().st_mode & 0o777) == (kept, 0o444)
    finally:
        os.umask(old)


def header_metadata_keys(data: bytes) -> list[str]:
    """The keys of a file's ``__metadata__``, in the order the file holds them."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n], object_pairs_hook=lambda pairs: pairs)
    return [key for key, _ in dict(header)["__metadata__"]]


def test_metadata_keys() -> None:
    metadata = {k: "v" for k in "hgfedcba"}
    x = {"x": np.zeros(1, np.float32)}
    assert len({ref_np.save(x, metadata) for _ in range(20)}) > 1
    ours = {tf_np.save(x, metadata) for _ in range(20)}
    assert len(ours) == 1
    assert header_metadata_keys(ours.pop()) == sorted(metadata)


ARRAYS = {
    "transposed": np.arange(12, dtype=np.float32).reshape(3, 4).T,
    "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    "fortran": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
    "big-endian": np.arange(12, dtype=">f4").reshape(3, 4),
}


@pytest.mark.parametrize("kind", list(ARRAYS))
def test_numpy_arrays_not_c_ordered(kind: str) -> None:
    """The reference writes the raw memory of a transposed, strided or Fortran-ordered array
    (wrong values back); a big-endian one it byte-swaps correctly (0.8.0); tensorfile saves
    every one by value."""
    arr = ARRAYS[kind]
    assert np.array_equal(ref_np.load(ref_np.save({"a": arr}))["a"], arr) == (kind == "big-endian")
    assert np.array_equal(tf_np.load(tf_np.save({"a": arr}))["a"], arr)


def test_save_empty() -> None:
    with pytest.raises(safetensors.SafetensorError):
        ref_np.load(ref_np.save({}, {}))
    assert tf_np.load(tf_np.save({}, {})) == {}


ML_DTYPES = {
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F4": "float4_e2m1fn",
    "F6_E2M3": "float6_e2m3fn",
}


@pytest.mark.parametrize("dtype", list(ML_DTYPES))
def test_ml_dtypes_arrays_in_numpy(dtype: str) -> None:
    """The reference saves bf16 and fp8 arrays but cannot load them back (``KeyError``), and
    refuses F4/F6; tensorfile round-trips all of them."""
    arr = np.ones(4, getattr(ml_dtypes, ML_DTYPES[dtype]))
    if dtype in ("F4", "F6_E2M3"):
        with pytest.raises(safetensors.SafetensorError, match="Unknown dtype"):
            ref_np.save({"a": arr})
    else:
        with pytest.raises(KeyError, match=dtype):
            ref_np.load(ref_np.save({"a": arr}))
    back = tf_np.load(tf_np.save({"a": arr}))["a"]
    assert back.dtype == arr.dtype and np.array_equal(
        back.astype(np.float32), arr.astype(np.float32)
    )


@pytest.mark.parametrize("framework", ["flax", "tensorflow"])
def test_save_in_flax_and_tensorflow(framework: str) -> None:
    if framework == "flax":
        native = require("jax.numpy").zeros(2)
    else:
        native = require("tensorflow").zeros(2)
    ref = require(f"safetensors.{framework}")
    ours = require(f"tensorfile.safetensors.{framework}")
    theirs, mine = {"x": native}, {"x": native}
    ref.save(theirs)
    ours.save(mine)
    assert type(theirs["x"]) is np.ndarray
    assert mine["x"] is native


def test_align(tmp_path: Path) -> None:
    x = {"weight": np.zeros(3, np.float32)}  # a header of 8 + 64 bytes: 8-aligned, not 64
    with pytest.raises(TypeError, match="align"):
        ref_np.save_file(x, tmp_path / "r.safetensors", align=64)  # type: ignore[call-arg]
    ref_np.save_file(x, tmp_path / "r.safetensors")
    tf_np.save_file(x, tmp_path / "t.safetensors", align=64)
    (n,) = struct.unpack("<Q", (tmp_path / "r.safetensors").read_bytes()[:8])
    (m,) = struct.unpack("<Q", (tmp_path / "t.safetensors").read_bytes()[:8])
    assert (8 + n) % 8 == 0 and (8 + n) % 64 != 0
    assert (8 + m) % 64 == 0


# -- differences.md: reading, what tensorfile accepts beyond the reference --------------------


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "a.safetensors"
    tf_np.save_file({"a": np.arange(50, dtype=np.int32).reshape(10, 5)}, path)
    return path


@pytest.mark.parametrize("index", ["negative step", "None"])
def test_get_slice_indexes(small: Path, index: str) -> None:
    key: Any = slice(None, None, -3) if index == "negative step" else (None, slice(None))
    with safetensors.safe_open(str(small), framework="np") as f:
        with pytest.raises(safetensors.SafetensorError):
            f.get_slice("a")[key]
    with ts.safe_open(small, framework="np") as g:
        assert np.array_equal(g.get_slice("a")[key], np.arange(50).reshape(10, 5)[key])


def test_safe_open_handle(small: Path) -> None:
    data = small.read_bytes()
    with pytest.raises(AttributeError):
        safetensors._safe_open_handle(io.BytesIO(data), framework="np")  # type: ignore[attr-defined]
    with ts._safe_open_handle(io.BytesIO(data), framework="np") as f:
        assert f.keys() == ["a"]


def test_bf16_fp8_in_numpy_load() -> None:
    data = blob('{"w":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}', b"\x80\x3f")
    with pytest.raises(KeyError):
        ref_np.load(data)
    w = tf_np.load(data)["w"]
    assert w.dtype == ml_dtypes.bfloat16 and float(w[0]) == 1.0


def test_where_a_file_can_be(small: Path, pages_root: Path, http_base: str) -> None:
    served = pages_root / "reference-claims"
    served.mkdir(exist_ok=True)
    (served / "a.safetensors").write_bytes(small.read_bytes())
    url = f"{http_base}/reference-claims/a.safetensors"
    with pytest.raises(FileNotFoundError):
        safetensors.safe_open(url, framework="np")
    with ts.safe_open(url, framework="np") as f:
        assert f.get_tensor("a")[9, 4] == 49
    with tensorfile.open(small.read_bytes()) as r:
        assert r.keys() == ["a"]


def test_loading(small: Path) -> None:
    with safetensors.safe_open(str(small), framework="np") as f:
        assert not np.shares_memory(f.get_tensor("a"), f.get_tensor("a"))
    with tensorfile.open(small) as r:
        a, b = r.view("a"), r.view("a")
        assert np.shares_memory(a, b) and not a.flags.writeable
        assert a[9, 4] == 49


def test_safe_open_load_file_keywords(small: Path, tmp_path: Path) -> None:
    assert ref_np.load_file(small, backend="pread")["a"][9, 4] == 49
    with pytest.raises(safetensors.SafetensorError, match="auto"):
        safetensors.safe_open(str(small), framework="np", backend="auto")
    with pytest.raises(TypeError):
        ref_np.load_file(small, verify=True)  # type: ignore[call-arg]
    with pytest.warns(errors.NoDigestsWarning):  # the file has none to check
        got = tf_np.load_file(
            small, backend="auto", verify=True, cache_dir=tmp_path / "c", copy=False
        )
    assert got["a"][9, 4] == 49


# -- differences.md: errors -------------------------------------------------------------------


def test_any_invalid_file() -> None:
    data = blob('{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}', b"\x05")
    with pytest.raises(safetensors.SafetensorError) as theirs:
        ref_np.load(data)
    assert type(theirs.value) is safetensors.SafetensorError
    with pytest.raises(ts.SafetensorError) as ours:
        tf_np.load(data)
    assert type(ours.value) is not ts.SafetensorError
    assert ours.value.tensor == "w"


def test_get_tensor_of_a_missing_name(small: Path) -> None:
    with safetensors.safe_open(str(small), framework="np") as f:
        with pytest.raises(safetensors.SafetensorError) as theirs:
            f.get_tensor("b")
    assert not isinstance(theirs.value, KeyError)
    with ts.safe_open(small, framework="np") as g:
        with pytest.raises(errors.MissingTensorError) as ours:
            g.get_tensor("b")
    assert isinstance(ours.value, KeyError) and isinstance(ours.value, ts.SafetensorError)


def test_tensor_on_torch_meta_device() -> None:
    import safetensors.torch as ref_torch

    import tensorfile.safetensors.torch as tf_torch

    meta = {"x": torch.zeros(2, device="meta")}
    with pytest.raises(NotImplementedError):
        ref_torch.save(meta)
    with pytest.raises(errors.UnsavableTensorError) as ours:
        tf_torch.save(meta)
    assert isinstance(ours.value, RuntimeError) and isinstance(ours.value, ValueError)


def test_wrong_argument_type() -> None:
    with pytest.raises(TypeError) as theirs:
        safetensors.safe_open(3.5, framework="np")  # type: ignore[arg-type]
    assert not isinstance(theirs.value, ValueError)
    with pytest.raises(errors.InvalidTypeError) as ours:
        ts.safe_open(3.5, framework="np")  # type: ignore[arg-type]
    assert isinstance(ours.value, TypeError) and isinstance(ours.value, ValueError)


def test_messages(tmp_path: Path) -> None:
    missing = tmp_path / "nope.safetensors"
    for load_file in (ref_np.load_file, tf_np.load_file):
        with pytest.raises(
            FileNotFoundError, match=f"No such file or directory: {re.escape(str(missing))}"
        ):
            load_file(missing)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(blob('{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}', b"\x05"))
    with pytest.raises(safetensors.SafetensorError) as theirs:
        ref_np.load_file(bad)
    with pytest.raises(ts.SafetensorError) as ours:
        tf_np.load_file(bad)
    assert str(bad) not in str(theirs.value)
    assert str(bad) in str(ours.value) and "'w'" in str(ours.value)


# -- differences.md: frameworks ---------------------------------------------------------------


def test_mlx_bf16() -> None:
    mx = require("mlx.core")
    ref_mlx = require("safetensors.mlx")
    ours = require("tensorfile.safetensors.mlx")
    arr = mx.ones(3, dtype=mx.bfloat16)
    with pytest.raises(ValueError):
        ref_mlx.save({"x": arr})
    back = ours.load(ours.save({"x": arr}))["x"]
    assert back.dtype == mx.bfloat16 and back.tolist() == [1.0, 1.0, 1.0]


def test_paddle(tmp_path: Path) -> None:
    paddle = require("paddle")
    ref_paddle = require("safetensors.paddle")
    ours = require("tensorfile.safetensors.paddle")
    # any strides
    t = paddle.arange(12, dtype="float32").reshape([3, 4]).transpose([1, 0])
    with pytest.raises(ValueError, match="non contiguous"):
        ref_paddle.save({"x": t})
    assert ours.load(ours.save({"x": t}))["x"].numpy().tolist() == t.numpy().tolist()
    # zero-size: the reference saves one but cannot load it back
    ref_paddle.save_file({"x": paddle.zeros([0, 3])}, tmp_path / "z.safetensors")
    with pytest.raises(ValueError):
        ref_paddle.load_file(tmp_path / "z.safetensors")
    assert ours.load_file(tmp_path / "z.safetensors")["x"].shape == [0, 3]
    # U16: the reference reads it as bf16
    u16 = tmp_path / "u16.safetensors"
    u16.write_bytes(blob('{"w":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}', b"\x80\x3f"))
    assert ref_paddle.load_file(u16)["w"].dtype == paddle.bfloat16
    with pytest.raises(errors.UnsupportedError, match="U16"):
        ours.load_file(u16)
    # a device the installed paddle cannot use
    if not paddle.device.is_compiled_with_cuda():
        with pytest.raises(ValueError) as theirs:
            ref_paddle.load_file(u16, device="cuda")
        assert not isinstance(theirs.value, errors.TensorFileError)
        with pytest.raises(errors.UnsupportedError):
            ours.load_file(tmp_path / "missing.safetensors", device="cuda")


def test_dtypes_a_framework_cannot_hold(tmp_path: Path) -> None:
    require("mlx.core")
    ref_mlx = require("safetensors.mlx")
    ours = require("tensorfile.safetensors.mlx")
    path = tmp_path / "f8.safetensors"
    tf_np.save_file({"w": np.ones(2, ml_dtypes.float8_e4m3fn)}, path)
    with pytest.raises(AttributeError):  # numpy has no float8_e4m3fn
        ref_mlx.load_file(path)
    with pytest.raises(errors.UnsupportedError, match="F8_E4M3"):
        ours.load_file(path)


def test_jax_64_bit() -> None:
    jax = require("jax")
    ref_flax = require("safetensors.flax")
    ours = require("tensorfile.safetensors.flax")
    data = tf_np.save({"i": np.arange(3, dtype=np.int64)})
    assert not jax.config.jax_enable_x64
    assert str(ref_flax.load(data)["i"].dtype) == str(ours.load(data)["i"].dtype) == "int32"


# -- migrating.md: what you gain (rows not shown above) ---------------------------------------


def test_larger_than_memory_files(tmp_path: Path) -> None:
    assert not hasattr(safetensors, "StreamWriter")
    path = tmp_path / "big.safetensors"
    with ts.StreamWriter(path, {"w": ("F32", (4, 2))}) as w:
        w.write("w", np.zeros((2, 2), np.float32))
        w.write("w", np.ones((2, 2), np.float32))
    assert ref_np.load_file(path)["w"].tolist() == [[0, 0], [0, 0], [1, 1], [1, 1]]


def test_digests(small: Path, tmp_path: Path) -> None:
    x = {"a": np.arange(6, dtype=np.float32)}
    with pytest.raises(TypeError, match="checksum"):
        ref_np.save_file(x, tmp_path / "r.safetensors", checksum="xxh3")  # type: ignore[call-arg]
    path = tmp_path / "t.safetensors"
    tf_np.save_file(x, path, checksum="xxh3")
    with safetensors.safe_open(str(path), framework="np") as f:  # digests are text to it
        assert isinstance(f.metadata()["tensorfile.digests"], str)
        assert np.array_equal(f.get_tensor("a"), x["a"])
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    assert not np.array_equal(ref_np.load_file(path)["a"], x["a"])  # read without a word
    with pytest.raises(errors.ChecksumError):
        tf_np.load_file(path, verify=True)


# -- guides/errors.md: code written for safetensors keeps working -----------------------------


def test_the_file_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as theirs:
        ref_np.load_file(tmp_path / "nope.safetensors")
    assert type(theirs.value) is FileNotFoundError
    with pytest.raises(errors.SafetensorNotFoundError):
        tf_np.load_file(tmp_path / "nope.safetensors")
    assert issubclass(errors.SafetensorNotFoundError, FileNotFoundError)


def test_saving_into_a_missing_folder(tmp_path: Path) -> None:
    x = {"x": np.zeros(1)}
    with pytest.raises(safetensors.SafetensorError):
        ref_np.save_file(x, tmp_path / "no" / "a.safetensors")
    with pytest.raises(errors.SafetensorIOError) as ours:
        tf_np.save_file(x, tmp_path / "no" / "a.safetensors")
    assert isinstance(ours.value, ts.SafetensorError) and isinstance(ours.value, OSError)


@pytest.mark.parametrize("argument", ["metadata", "path"])
def test_metadata_not_text_or_an_int_path(argument: str) -> None:
    def call(module: Any) -> Any:
        if argument == "metadata":
            return module.save({"x": np.zeros(1)}, {"a": 1})
        return module.load_file(3)

    with pytest.raises(TypeError):
        call(ref_np)
    with pytest.raises(errors.InvalidTypeError):
        call(tf_np)


def test_tensors_sharing_memory_or_on_the_meta_device(tmp_path: Path) -> None:
    import safetensors.torch as ref_torch

    import tensorfile.safetensors.torch as tf_torch

    t = torch.zeros(4)
    with pytest.raises(RuntimeError, match="share memory") as theirs:
        ref_torch.save_file({"a": t, "b": t}, tmp_path / "r.safetensors")
    assert type(theirs.value) is RuntimeError
    with pytest.raises(errors.SharedTensorsError) as ours:
        tf_torch.save_file({"a": t, "b": t}, tmp_path / "t.safetensors")
    assert isinstance(ours.value, RuntimeError)
    # the meta device: test_tensor_on_torch_meta_device


def test_header_limit() -> None:
    """guides/errors.md: a safetensors header may be 100,000,000 bytes, the reference's
    limit."""
    refused = (safetensors.SafetensorError, ts.SafetensorError)
    for module in (ref_np, tf_np):
        with pytest.raises(refused, match=r"(?i)header too large|over the 100000000-byte limit"):
            module.load(struct.pack("<Q", 100_000_001) + b"{}")
        with pytest.raises(refused) as within:
            module.load(struct.pack("<Q", 100_000_000) + b"{}")
        assert "too large" not in str(within.value) and "limit" not in str(within.value)


def test_numpy_load_file_gives_owned_writable_arrays(small: Path) -> None:
    """guides/loading-fast.md: numpy's ``load_file`` gives owned, writable arrays, as the
    reference's does."""
    for module in (ref_np, tf_np):
        a = module.load_file(small)["a"]
        a[0, 0] = 7
        assert a.flags.writeable and tf_np.load_file(small)["a"][0, 0] == 0


# -- every row has its test -------------------------------------------------------------------

ROWS: dict[tuple[str, str], str] = {
    ("differences.md", "the same tensor name twice in the header"): "test_duplicate_tensor_name",
    ("differences.md", "the same key twice in `__metadata__`"): "test_duplicate_metadata_key",
    ("differences.md", "whitespace before the header's `{`"): "test_whitespace_before_header",
    (
        "differences.md",
        "a dimension or offset of 2⁴⁸ or more (in an empty tensor, so no data)",
    ): "test_dimension_of_2_48",
    (
        "differences.md",
        "an empty tensor whose non-zero dimensions times its bits overflow 64 bits",
    ): "test_empty_tensor_overflowing_64_bits",
    ("differences.md", "any file"): "test_any_file",
    ("differences.md", "file mode"): "test_file_mode",
    ("differences.md", "metadata keys"): "test_metadata_keys",
    (
        "differences.md",
        "numpy arrays that are transposed, strided or Fortran-ordered",
    ): "test_numpy_arrays_not_c_ordered",
    ("differences.md", "`save({}, {})` (no tensors, empty metadata)"): "test_save_empty",
    (
        "differences.md",
        "bf16, fp8, F4/F6 arrays in `safetensors.numpy`",
    ): "test_ml_dtypes_arrays_in_numpy",
    (
        "differences.md",
        "`save` in the flax and tensorflow modules",
    ): "test_save_in_flax_and_tensorflow",
    ("differences.md", "`align=`"): "test_align",
    ("differences.md", "`get_slice` indexes"): "test_get_slice_indexes",
    ("differences.md", "`_safe_open_handle`"): "test_safe_open_handle",
    ("differences.md", "bf16/fp8 in `safetensors.numpy` `load`"): "test_bf16_fp8_in_numpy_load",
    ("differences.md", "where a file can be"): "test_where_a_file_can_be",
    ("differences.md", "loading"): "test_loading",
    ("differences.md", "`safe_open` / `load_file` keywords"): "test_safe_open_load_file_keywords",
    ("differences.md", "any invalid file"): "test_any_invalid_file",
    (
        "differences.md",
        "`get_tensor` of a name the file lacks",
    ): "test_get_tensor_of_a_missing_name",
    ("differences.md", "a tensor on torch's meta device"): "test_tensor_on_torch_meta_device",
    ("differences.md", "a wrong argument type"): "test_wrong_argument_type",
    ("differences.md", "messages"): "test_messages",
    ("differences.md", "**mlx**"): "test_mlx_bf16",
    ("differences.md", "**paddle**"): "test_paddle",
    ("differences.md", "**Dtypes a framework cannot hold**"): "test_dtypes_a_framework_cannot_hold",
    ("differences.md", "**jax**"): "test_jax_64_bit",
    ("guides/migrating.md", "`load_file`"): "NOT_SHOWN",
    ("guides/migrating.md", "writes"): "test_any_file",  # and test_file_mode
    (
        "guides/migrating.md",
        "transposed, strided or Fortran-order numpy arrays",
    ): "test_numpy_arrays_not_c_ordered",
    ("guides/migrating.md", "metadata key order"): "test_metadata_keys",
    ("guides/migrating.md", "duplicate tensor names in a header"): "test_duplicate_tensor_name",
    ("guides/migrating.md", "`save({}, {})`"): "test_save_empty",
    ("guides/migrating.md", "bf16, fp8, fp6, fp4 in numpy"): "test_ml_dtypes_arrays_in_numpy",
    ("guides/migrating.md", "`get_slice` indexes"): "test_get_slice_indexes",
    ("guides/migrating.md", "header alignment"): "test_align",
    ("guides/migrating.md", "larger-than-memory files"): "test_larger_than_memory_files",
    ("guides/migrating.md", "loading to a GPU"): "NOT_SHOWN",
    ("guides/migrating.md", "URLs, `s3://`"): "test_where_a_file_can_be",
    ("guides/migrating.md", "digests"): "test_digests",
    ("guides/errors.md", "the file does not exist"): "test_the_file_does_not_exist",
    ("guides/errors.md", "saving into a missing folder"): "test_saving_into_a_missing_folder",
    (
        "guides/errors.md",
        "metadata that is not text, a path that is an int",
    ): "test_metadata_not_text_or_an_int_path",
    (
        "guides/errors.md",
        "tensors sharing memory, a tensor on the meta device",
    ): "test_tensors_sharing_memory_or_on_the_meta_device",
    ("guides/errors.md", "an invalid header"): "test_any_invalid_file",
}
"""Each row of the pages (page, the row's first cell or a bullet's bold words) and its test;
``NOT_SHOWN`` for the rows the module docstring lists."""


def page_rows(page: str) -> set[str]:
    """The rows of ``page`` that compare with the reference ``safetensors``: the first cell of
    each row of every table whose header names `safetensors` or "the reference", and the bold
    words that open each bullet of the Frameworks section."""
    rows: set[str] = set()
    in_table = False
    section = ""
    for line in (REPO / "docs" / page).read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not in_table:
                in_table = any(c.startswith(("`safetensors`", "the reference")) for c in cells)
            elif not set(cells[0]) <= set("-: ") and cells[0]:
                rows.add(cells[0])
        else:
            in_table = False
        if section == "Frameworks" and line.startswith("- **"):
            rows.add(line[2:].split("**:", 1)[0].split("** ", 1)[0].rstrip(":") + "**")
    return rows


@pytest.mark.parametrize("page", ["differences.md", "guides/migrating.md", "guides/errors.md"])
def test_every_row_has_its_test(page: str) -> None:
    listed = {row for (p, row) in ROWS if p == page}
    assert page_rows(page) == listed
    for test in ROWS.values():
        assert test == "NOT_SHOWN" or test in globals(), test
