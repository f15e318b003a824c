"""The write options of a safetensors dataset, shared by the local writer and Spark.

Names and defaults are the reference connector's (``batch_size``, ``name_col``,
``columns``, ``shapes``, ``dtype``, ``tail_strategy``, ``kv_separator``,
``target_shard_size_mb``, ``duplicatesStrategy``, ``generate_index``), matched without
regard to case as Spark does. Where tensorfile goes further: ``target_shard_size_mb`` takes
any positive value (the reference: 50-1000), and ``rounding`` chooses how floats become F16
or BF16 (``nearest_even``, the default, or ``truncate``, the reference's behaviour).
``layout`` chooses the manifest: ``tensorfile`` (the default: the schema's fields plus a
``tensorfile`` block recording the mode, the columns, the separator, the real rows of padded
shards and the dtypes the schema lacks) or ``reference`` (exactly the reference connector's
manifest, printed as it prints it: no ``tensorfile`` block, so the reference's dtypes and
KV separator only; padding rows are then read back as samples, as the reference reads them).

Example:
    >>> o = parse_options({"batch_size": "4", "tail_strategy": "pad", "shapes": '{"x": [2, 3]}'})
    >>> o.mode, o.batch_size, o.tail_strategy, o.shapes
    ('batch', 4, 'pad', {'x': (2, 3)})
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core import dtypes
from ...core.errors import InvalidArgumentError

__all__ = ["CHUNK_MB", "DATASET_DTYPES", "WriteOptions", "column_list", "parse_options"]

CHUNK_MB = 16.0
"""The default size of the chunks a conversion (``from_parquet``, ``from_hf``) holds in
memory at a time, in MiB."""

DATASET_DTYPES = ("F16", "F32", "F64", "BF16", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")
"""The dtypes of the manifest schema; BOOL and the F8 types are accepted too (an extension)."""
_EXTRA_DTYPES = ("BOOL", "F8_E5M2", "F8_E4M3")

_KNOWN = {
    "batch_size",
    "name_col",
    "columns",
    "shapes",
    "dtype",
    "tail_strategy",
    "kv_separator",
    "target_shard_size_mb",
    "duplicatesstrategy",
    "generate_index",
    "rounding",
    "layout",
    "path",
}
_REFERENCE = "reference"


@dataclass(frozen=True)
class WriteOptions:
    """Validated write options."""

    batch_size: int | None = None
    name_col: str | None = None
    columns: tuple[str, ...] | None = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtype: str | None = None
    tail_strategy: str = "write"
    kv_separator: str = "__"
    target_shard_size_mb: float = 300.0
    duplicates_strategy: str = "fail"
    generate_index: bool = False
    rounding: str = "nearest_even"
    layout: str = "tensorfile"

    @property
    def mode(self) -> str:
        """``batch`` or ``kv``."""
        return "kv" if self.name_col else "batch"

    @property
    def target_shard_bytes(self) -> int:
        """The KV shard size at which a shard is sealed."""
        return max(1, int(self.target_shard_size_mb * 1024 * 1024))


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, got {value!r}")


def _int(value: Any, name: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {value!r}") from None
    return number


def column_list(value: Any) -> tuple[str, ...]:
    """The names of a ``columns`` option: a comma-separated string or a list, blanks dropped.

    Example:
        >>> column_list(" a, b,,c ")
        ('a', 'b', 'c')
    """
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(c.strip() for c in items if str(c).strip())


def _shapes(value: Any) -> dict[str, tuple[int, ...]]:
    if isinstance(value, Mapping):
        raw: Any = dict(value)
    else:
        try:
            raw = json.loads(str(value))
        except ValueError as exc:
            raise InvalidArgumentError(
                f'option shapes must be JSON like {{"col": [2, 3]}}: {exc}'
            ) from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError('option shapes must be a JSON object like {"col": [2, 3]}')
    out: dict[str, tuple[int, ...]] = {}
    for col, dims in raw.items():
        if not isinstance(dims, list | tuple) or not all(type(d) is int and d >= 0 for d in dims):
            raise InvalidArgumentError(
                f"option shapes: the shape of {col!r} must be a list of non-negative "
                f"integers, got {dims!r}"
            )
        out[str(col)] = tuple(dims)
    return out


def parse_options(options: Mapping[str, Any]) -> WriteOptions:
    """Validate write options (names case-insensitive; values strings or Python values)."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_KNOWN))}"
        )
    batch = opts.get("batch_size")
    name_col = opts.get("name_col") or None
    if batch is not None and name_col:
        raise InvalidArgumentError("options batch_size and name_col are mutually exclusive")
    if batch is None and not name_col:
        raise InvalidArgumentError(
            "one of batch_size (batch mode) or name_col (key-value mode) must be given"
        )
    batch_size = None
    if batch is not None:
        batch_size = _int(batch, "batch_size")
        if batch_size <= 0:
            raise InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
    columns = None
    if "columns" in opts:
        columns = column_list(opts["columns"])
        if not columns:
            raise InvalidArgumentError("option columns lists no column")
    dtype = opts.get("dtype")
    if dtype is not None:
        dtype = str(dtype)
        if dtype not in DATASET_DTYPES + _EXTRA_DTYPES:
            raise InvalidArgumentError(
                f"unknown dtype {dtype!r}; valid: {', '.join(DATASET_DTYPES + _EXTRA_DTYPES)}"
            )
        dtypes.from_safetensors(dtype)
    tail = str(opts.get("tail_strategy", "write")).lower()
    if tail not in ("drop", "pad", "write"):
        raise InvalidArgumentError(f"unknown tail_strategy {tail!r}; valid: drop, pad, write")
    dup = str(opts.get("duplicatesstrategy", "fail"))
    if dup.lower() not in ("fail", "lastwin"):
        raise InvalidArgumentError(f"unknown duplicatesStrategy {dup!r}; valid: fail, lastWin")
    try:
        target = float(opts.get("target_shard_size_mb", 300))
    except (TypeError, ValueError):
        raise InvalidArgumentError("target_shard_size_mb must be a number") from None
    if not (target > 0 and math.isfinite(target)):
        raise InvalidArgumentError(
            f"target_shard_size_mb must be positive and finite, got {target}"
        )
    separator = str(opts.get("kv_separator", "__"))
    if not separator:
        raise InvalidArgumentError("kv_separator must not be empty")
    rounding = str(opts.get("rounding", "nearest_even")).lower()
    if rounding not in ("nearest_even", "truncate"):
        raise InvalidArgumentError(f"rounding must be nearest_even or truncate, got {rounding!r}")
    layout = str(opts.get("layout", "tensorfile")).lower()
    if layout not in ("tensorfile", _REFERENCE):
        raise InvalidArgumentError(f"layout must be tensorfile or reference, got {layout!r}")
    if layout == _REFERENCE and (separator != "__" or dtype in _EXTRA_DTYPES):
        what = f"kv_separator {separator!r}" if separator != "__" else f"dtype {dtype}"
        raise InvalidArgumentError(
            f"the reference layout cannot record {what} (its manifest has no field for it; "
            "the reference writes '__' and the dtypes of its schema): use layout='tensorfile'"
        )
    return WriteOptions(
        batch_size=batch_size,
        name_col=str(name_col) if name_col else None,
        columns=columns,
        shapes=_shapes(opts["shapes"]) if "shapes" in opts else {},
        dtype=dtype,
        tail_strategy=tail,
        kv_separator=separator,
        target_shard_size_mb=target,
        duplicates_strategy="lastWin" if dup.lower() == "lastwin" else "fail",
        generate_index=_bool(opts.get("generate_index", False), "generate_index"),
        rounding=rounding,
        layout=layout,
    )
