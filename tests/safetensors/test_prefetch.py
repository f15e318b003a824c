"""``safe_open(...).prefetch(plan)``: the reference's PR #848 API, from that PR's own tests.

The reference's tests (``bindings/python/tests/test_pread_backend.py`` of safetensors'
PR #848) open with ``framework="pt", device="cuda:0", backend="pread"``; these are the same
tests with ``device="cpu"`` (no GPU here; tensorfile takes every device), plus tensorfile's
extensions (any basic index, :class:`Intervals`, the loader handle) and hostile plans.
The oracle for every value is the reference's own ``get_slice`` on the same file.
"""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import torch
from safetensors.torch import save_file as ref_save_file

from tensorfile.distributed import Intervals
from tensorfile.errors import SafetensorError, SourceError
from tensorfile.safetensors import PrefetchLoader, safe_open
from tensorfile.safetensors.numpy import save_file as np_save_file

SOURCE_TENSORS = {
    "fp32_2d": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "bf16_2d": torch.arange(8, dtype=torch.float32).reshape(2, 4).to(torch.bfloat16),
    "fp16_3d": torch.arange(24, dtype=torch.float16).reshape(2, 3, 4),
    "scalar_fp32": torch.tensor(3.5, dtype=torch.float32),
    "empty_2d": torch.zeros((0, 5), dtype=torch.float32),
    "i64_1d": torch.arange(5, dtype=torch.int64),
    "fp8": torch.arange(6, dtype=torch.float32).to(torch.float8_e4m3fn).reshape(2, 3),
}


@pytest.fixture
def path(tmp_path: Path) -> str:
    p = str(tmp_path / "source.safetensors")
    ref_save_file(SOURCE_TENSORS, p)  # written by the reference
    return p


def _open(path: str, plan: Any = None) -> safe_open:
    f = safe_open(path, framework="pt", device="cpu", backend="pread")
    f.prefetch(plan)
    return f


def _ref_rows(path: str, name: str, rows: slice | None) -> torch.Tensor:
    with safetensors.safe_open(path, framework="pt") as f:
        return f.get_tensor(name) if rows is None else f.get_slice(name)[rows]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (float8 has no ``==`` on the cpu)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and (a.reshape(-1).view(torch.uint8).tolist() == b.reshape(-1).view(torch.uint8).tolist())
    )


def test_plan_rows_match_source(path: str) -> None:
    """The reference's own test, verbatim but for the device."""
    plan = {"fp32_2d": slice(1, 3), "i64_1d": slice(2, 5), "fp16_3d": None}
    with _open(path, plan=plan) as f:
        assert torch.equal(f.get_tensor("fp32_2d").cpu(), SOURCE_TENSORS["fp32_2d"][1:3])
        assert torch.equal(f.get_tensor("i64_1d").cpu(), SOURCE_TENSORS["i64_1d"][2:5])
        with pytest.raises(Exception, match="not in the prefetch plan"):
            f.get_tensor("bf16_2d")
        streamed = dict(f.tensor_stream())
    assert set(streamed) == {"fp16_3d"}  # the two others were taken
    assert torch.equal(streamed["fp16_3d"], _ref_rows(path, "fp16_3d", None))


def test_every_tensor_and_dtype_equals_the_references_get_slice(path: str) -> None:
    plan = {name: (None if t.dim() == 0 else slice(0, max(t.shape[0] - 1, 0)))
            for name, t in SOURCE_TENSORS.items()}  # fmt: skip
    with _open(path, plan) as f:
        for name, rows in plan.items():
            got, want = f.get_tensor(name), _ref_rows(path, name, rows)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert _same(got, want), name


def test_no_plan_prefetches_the_whole_file(path: str) -> None:
    with _open(path) as f:
        got = dict(f.tensor_stream())
    assert set(got) == set(SOURCE_TENSORS)
    for name, t in SOURCE_TENSORS.items():
        assert _same(got[name], t), name


def test_take_once(path: str) -> None:
    with _open(path) as f:
        f.get_tensor("fp32_2d")
        with pytest.raises(Exception, match="already delivered"):
            f.get_tensor("fp32_2d")


def test_prefetch_twice_raises(path: str) -> None:
    with _open(path) as f, pytest.raises(SafetensorError, match="already called"):
        f.prefetch()


def test_slicing_apis_raise_after_prefetch(path: str) -> None:
    with _open(path) as f:
        with pytest.raises(SafetensorError, match="get_slice is not available"):
            f.get_slice("fp32_2d")
        with pytest.raises(SafetensorError, match="get_tensors is not available"):
            f.get_tensors()
        meta = f.get_tensor_meta("fp32_2d")  # the header still answers
    assert (meta.dtype, meta.shape) == ("F32", [3, 4])


def test_plan_gap_is_not_allocated(tmp_path: Path) -> None:
    """Two of three 16 MiB tensors planned: the third is never allocated (numpy's
    allocations are traced)."""
    p = str(tmp_path / "gap.safetensors")
    big = {k: np.full((4 << 20,), i, np.float32) for i, k in enumerate("abc")}
    np_save_file(big, p)
    del big
    tracemalloc.start()
    try:
        with safe_open(p, framework="np") as f:
            f.prefetch({"a": None, "c": None})
            held = dict(f.tensor_stream())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert set(held) == {"a", "c"} and held["c"][0] == 2
    assert peak < 44 << 20  # two tensors (32 MiB) and change, never three (48 MiB)


def test_plan_empty_rows(path: str) -> None:
    with _open(path, {"fp32_2d": slice(2, 2)}) as f:
        assert tuple(f.get_tensor("fp32_2d").shape) == (0, 4)


def test_negative_start_counts_from_the_end(path: str) -> None:
    with _open(path, {"fp32_2d": slice(-3, 3)}) as f:
        assert tuple(f.get_tensor("fp32_2d").shape) == (3, 4)


def test_plan_rows_of_packed_fp4(tmp_path: Path) -> None:
    p = str(tmp_path / "f4.safetensors")
    f4 = (np.arange(32) % 7).astype(np.float32).reshape(4, 8).astype(ml_dtypes.float4_e2m1fn)
    np_save_file({"f4": f4}, p)
    with _open(p, {"f4": slice(1, 3)}) as f:
        t = f.get_tensor("f4")
    assert tuple(t.shape) == (2, 4) and t.dtype == torch.float4_e2m1fn_x2
    with safe_open(p, framework="np") as g:
        g.prefetch({"f4": slice(1, 3)})
        np.testing.assert_array_equal(g.get_tensor("f4"), f4[1:3])


def test_views_outlive_handle(path: str) -> None:
    with _open(path) as f:
        t = f.get_tensor("fp32_2d")
    assert torch.equal(t, SOURCE_TENSORS["fp32_2d"])


def test_close_mid_stream(path: str) -> None:
    f = _open(path)
    stream = f.tensor_stream()
    next(stream)
    f.close()
    with pytest.raises(SafetensorError, match="closed"):
        next(stream)


def test_tensor_stream_skips_taken(path: str) -> None:
    with _open(path, {"fp32_2d": None, "i64_1d": None}) as f:
        f.get_tensor("i64_1d")
        assert [n for n, _ in f.tensor_stream()] == ["fp32_2d"]


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ({"nope": None}, "does not contain"),
        ({"fp32_2d": slice(0, 3, 2)}, "step 1"),
        ({"scalar_fp32": slice(0, 1)}, "0-d"),
        ({"fp32_2d": 3}, "None or a slice"),
        ({"fp32_2d": slice(0, 10)}, "out of range"),
        ({"fp32_2d": slice(0, 3, 0)}, "invalid prefetch plan slice"),
        ({}, "selects no tensors"),
        ({"fp32_2d": slice(-9, 2)}, "out of range"),
        ({"fp32_2d": slice(0, "2")}, "invalid prefetch plan slice"),
        ({"fp32_2d": (slice(0, 2), [(0, 9)])}, "out of range for dimension 1"),
        (["fp32_2d"], "maps tensor names"),
        ({("fp32_2d",): None}, "does not contain"),
    ],
)
def test_bad_plans_are_refused_before_any_read(path: str, plan: Any, words: str) -> None:
    with safe_open(path, framework="pt", backend="pread") as f:
        with pytest.raises(SafetensorError, match=words):
            f.prefetch(plan)
        f.get_tensor("fp32_2d")  # refused plan: the handle reads as before


def test_a_dtype_torch_cannot_hold_is_refused_naming_it(tmp_path: Path) -> None:
    p = str(tmp_path / "f6.safetensors")
    np_save_file({"f6": np.zeros((4, 8), ml_dtypes.float6_e2m3fn)}, p)
    with safe_open(p, framework="pt") as f, pytest.raises(SafetensorError, match="F6_E2M3"):
        f.prefetch({"f6": None})
    with safe_open(p, framework="np") as f:  # numpy holds it
        f.prefetch({"f6": slice(0, 2)})
        assert f.get_tensor("f6").shape == (2, 8)


def test_tensorfile_plans_take_any_basic_index_and_intervals(path: str) -> None:
    fused = SOURCE_TENSORS["fp16_3d"]
    plan = {
        "fp16_3d": Intervals(1, [(2, 3), (0, 1)]),
        "fp32_2d": (slice(None, None, -2), [slice(0, 1), slice(3, 4)]),
        "bf16_2d": (1, None, slice(1, 4, 2)),
    }
    with _open(path, plan) as f:
        assert torch.equal(f.get_tensor("fp16_3d"), torch.cat([fused[:, 2:3], fused[:, 0:1]], 1))
        want = SOURCE_TENSORS["fp32_2d"].numpy()[::-2][:, [0, 3]]
        np.testing.assert_array_equal(f.get_tensor("fp32_2d").numpy(), want)
        assert torch.equal(f.get_tensor("bf16_2d"), SOURCE_TENSORS["bf16_2d"][1, None, 1:4:2])


def test_the_loader_handle_of_the_later_form(path: str) -> None:
    """safetensors' later form returns a loader: ``take``, ``names``, ``len``, iteration,
    a context manager; tensorfile's ``prefetch`` returns it too."""
    with safe_open(path, framework="pt") as f:
        with f.prefetch({"i64_1d": None, "fp32_2d": slice(0, 1)}, device="cpu", threads=2) as ld:
            assert isinstance(ld, PrefetchLoader)
            assert ld.names() == sorted(ld.names(), key=lambda n: f.get_tensor_meta(n).data_offsets)
            assert len(ld) == 2
            assert torch.equal(ld.take("i64_1d"), SOURCE_TENSORS["i64_1d"])
            assert [n for n, _ in ld] == ["fp32_2d"]


def test_a_file_cut_short_after_opening_fails_the_take_clearly(path: str) -> None:
    f = safe_open(path, framework="pt")
    os.truncate(path, 100)
    f.prefetch({"fp8": None, "i64_1d": None})
    with pytest.raises((SafetensorError, SourceError)):
        f.get_tensor("i64_1d")
    f.close()


def test_close_while_reading_returns_and_leaves_no_thread(tmp_path: Path) -> None:
    p = str(tmp_path / "many.safetensors")
    np_save_file({f"t{i:03d}": np.full((1 << 18,), i, np.float32) for i in range(300)}, p)
    before = threading.active_count()
    f = safe_open(p, framework="np")
    f.prefetch()
    f.close()
    assert threading.active_count() == before


def test_a_sparse_strided_plan_and_a_bool_thread_count(tmp_path: Path) -> None:
    """review38a R38A-6: a strided plan entry that skips much reads its rows only, in its
    order; ``threads=True`` is refused (a bool is no thread count)."""
    p = tmp_path / "s.safetensors"
    w = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    np_save_file({"w": w}, p)
    with safe_open(p, framework="np") as f:
        with pytest.raises(SafetensorError, match="threads"):
            f.prefetch({"w": None}, threads=True)
        f.prefetch({"w": (slice(None, None, -1365), slice(1, 3))})
        np.testing.assert_array_equal(f.get_tensor("w"), w[::-1365, 1:3])
