"""Small tables the dataset tests write, and a failure injector for the commit tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

NDArray = np.ndarray[Any, Any]


def cols_a(n: int = 7) -> dict[str, NDArray]:
    """``n`` rows: ids 0.., ``x`` = [2i, 2i+1] as float32."""
    return {
        "id": np.arange(n, dtype=np.int64),
        "x": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
    }


def cols_b(n: int = 5) -> dict[str, NDArray]:
    """``n`` rows that differ from :func:`cols_a`'s: ids from 100, ``x`` negated."""
    return {
        "id": np.arange(100, 100 + n, dtype=np.int64),
        "x": -np.arange(n * 2, dtype=np.float32).reshape(n, 2),
    }


def fail_on_call(real: Callable[..., Any], n: int) -> Callable[..., Any]:
    """``real``, except that its ``n``-th call raises ``RuntimeError``."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n:
            raise RuntimeError(f"injected failure in call {n}")
        return real(*args, **kwargs)

    return wrapper
