"""Arrays a read fills are allocated without numpy's huge-page advice, and numpy's global
switch is always left as it was."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tensorfile.core import reader
from tensorfile.core.reader import empty_for_reading


class Switch:
    """Stands in for numpy's ``_set_madvise_hugepage``, recording each call."""

    def __init__(self) -> None:
        self.state = True
        self.calls: list[bool] = []

    def __call__(self, enabled: bool) -> bool:
        self.calls.append(enabled)
        previous, self.state = self.state, enabled
        return previous


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch) -> Switch:
    fake = Switch()
    monkeypatch.setattr(reader, "_SET_HUGEPAGE", fake)
    return fake


def test_large_arrays_are_allocated_with_the_advice_off(switch: Switch) -> None:
    arr = empty_for_reading((2, 1 << 20), np.dtype(np.float32))
    assert arr.shape == (2, 1 << 20) and arr.dtype == np.float32
    assert arr.flags.owndata and arr.flags.writeable and arr.flags.c_contiguous
    assert switch.calls == [False, True] and switch.state is True


def test_small_arrays_leave_the_switch_alone(switch: Switch) -> None:
    arr = empty_for_reading((3, 4), np.dtype(np.int16))
    assert arr.shape == (3, 4) and arr.flags.owndata
    assert switch.calls == []


def test_the_switch_is_restored_when_numpy_refuses(switch: Switch) -> None:
    with pytest.raises((ValueError, MemoryError)):
        empty_for_reading((1 << 62, 1 << 62), np.dtype(np.float64))
    assert switch.state is True


def test_a_disabled_switch_stays_disabled(switch: Switch) -> None:
    switch.state = False
    empty_for_reading((8 << 20,), np.dtype(np.uint8))
    assert switch.state is False


def test_numpys_own_switch_is_unchanged_by_concurrent_allocations() -> None:
    if reader._SET_HUGEPAGE is None:
        pytest.skip("this numpy has no huge-page switch")
    before = reader._SET_HUGEPAGE(True)
    try:
        errors: list[BaseException] = []

        def allocate() -> None:
            try:
                for _ in range(50):
                    empty_for_reading((4 << 20,), np.dtype(np.uint8))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=allocate) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert reader._SET_HUGEPAGE(True) is True  # still on
    finally:
        reader._SET_HUGEPAGE(before)
