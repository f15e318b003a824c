"""``LocalSource`` faults large destination buffers in (``MADV_POPULATE_WRITE``) before reading
into them: best effort, never a change in what is read or raised."""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile.sources import LocalSource
from tensorfile.sources.local import advice


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = np.random.default_rng(0).integers(0, 256, (5 << 20) + 12345, np.uint8).tobytes()
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    return path, data


def _read(path: Path, offset: int, sizes: list[int]) -> list[bytes]:
    # unaligned numpy buffers (one byte in), as arrays of any dtype may be
    arrays = [np.empty(n + 1, np.uint8)[1:] for n in sizes]
    with LocalSource(path) as src:
        src.readinto(offset, [memoryview(a) for a in arrays])
    return [a.tobytes() for a in arrays]


def test_large_and_small_buffers_are_filled(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    sizes = [3 << 20, 7, (1 << 20) + 1, 100]
    got = _read(path, 3, sizes)
    pos = 3
    for n, chunk in zip(sizes, got, strict=True):
        assert chunk == data[pos : pos + n]
        pos += n


def test_buffers_it_cannot_advise_are_skipped() -> None:
    readonly = memoryview(bytes(2 << 20))
    strided = memoryview(np.zeros(4 << 20, np.uint8))[::2]
    advice.prefault([readonly, strided, memoryview(bytearray(10))])  # no error


def test_a_kernel_without_the_advice_turns_it_off(
    data_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refusing(addr: int, length: int, advice: int) -> int:
        calls.append(advice)
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(advice, "_populate", True)
    monkeypatch.setattr(advice, "libc_madvise", lambda: refusing)
    path, data = data_file
    assert _read(path, 0, [2 << 20, 2 << 20]) == [data[: 2 << 20], data[2 << 20 : 4 << 20]]
    assert calls == [advice.MADV_POPULATE_WRITE]  # tried once, then left alone
    assert advice._populate is False
    assert _read(path, 1, [2 << 20]) == [data[1 : (2 << 20) + 1]]
    assert len(calls) == 1


def test_other_failures_are_ignored(
    data_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any) -> int:
        ctypes.set_errno(errno.ENOMEM)
        return -1

    monkeypatch.setattr(advice, "_populate", True)
    monkeypatch.setattr(advice, "libc_madvise", lambda: failing)
    path, data = data_file
    assert _read(path, 0, [3 << 20]) == [data[: 3 << 20]]
    assert advice._populate is True


def test_without_madvise_nothing_is_attempted(
    data_file: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(advice, "_populate", True)
    monkeypatch.setattr(advice, "libc_madvise", lambda: None)
    path, data = data_file
    assert _read(path, 0, [2 << 20]) == [data[: 2 << 20]]
    assert advice._populate is False
