"""``brief``: a short repr of any value for an error message or a name, bounded in length
and in the time it takes: a text or bytes is cut before its repr is made, an object whose
repr could be long (a storage, whose repr writes every element; a tensor; an array) is
its type and size, a dict or set is not sorted first (review35i i06)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import torch

from tensorfile.core.reader import brief


class _NoRepr:
    """A sized object whose repr must not be asked for."""

    def __len__(self) -> int:
        return 10**6

    def __repr__(self) -> str:
        raise AssertionError("its repr was made")


class _Key(str):
    """A text whose comparisons are counted (a sort of a dict's keys compares them)."""

    compared = 0

    def __lt__(self, other: Any) -> bool:
        _Key.compared += 1
        return str.__lt__(self, other)


def test_a_storage_a_tensor_or_an_array_is_its_type_and_size() -> None:
    storage = torch.zeros(1 << 18, dtype=torch.uint8).untyped_storage()
    assert brief(storage) == "<torch.storage.UntypedStorage of 262,144 bytes>"
    assert brief(torch.zeros(4, 4)) == "<torch.Tensor of 64 bytes>"
    assert brief(np.zeros(3)) == "<numpy.ndarray of 24 bytes>"
    assert brief(_NoRepr()) == f"<{__name__}._NoRepr of 1,000,000 items>"
    assert brief((storage, 1)) == "(<torch.storage.UntypedStorage of 262,144 bytes>, 1)"
    # scalars keep their repr
    assert (
        brief(np.float32(2.5)) == repr(np.float32(2.5)) and brief(torch.tensor(5.0)) == "tensor(5.)"
    )
    assert brief(torch.float32) == "torch.float32"
    assert brief(torch.device("cpu")) == "device(type='cpu')"


def test_long_bytes_and_texts_are_cut_before_their_repr() -> None:
    text = brief(b"\x01" * (1 << 20))
    assert len(text) == 100 and text.startswith("b'\\x01") and "..." in text
    assert len(brief(bytearray(1 << 20))) == 100 and len(brief("x" * (1 << 20))) == 100
    nested = ("x" * 10_000,) * 10
    assert len(brief(((nested,) * 6,) * 6)) < 400  # (the leaves shown take 100 characters)


def test_dicts_and_sets_are_shown_in_their_order_without_a_sort() -> None:
    _Key.compared = 0
    big = {_Key(f"k{i}"): i for i in range(10_000)}
    assert brief(big) == "{'k0': 0, 'k1': 1, 'k2': 2, 'k3': 3, ...}" and _Key.compared == 0
    assert brief(collections.OrderedDict(b=1, a=2)) == "OrderedDict({'b': 1, 'a': 2})"
    assert brief(frozenset({3})) == "frozenset({3})" and brief(set()) == "set()"
    assert brief(torch.Size([2, 3])) == "Size((2, 3))"
