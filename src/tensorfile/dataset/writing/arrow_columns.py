"""Which Arrow columns become tensor columns, checked from the schema before anything is
written, and each chunk of rows checked with the row numbers of the whole input.

A tensor column is a column of numbers or bools (``int8``...``uint64``, ``halffloat``,
``float``, ``double``, ``bool``), or of lists of them, nested to any depth: ``list``,
``large_list``, ``fixed_size_list``, the ``arrow.fixed_shape_tensor`` extension type (its
shape becomes the sample shape) or another extension type stored as those (Hugging Face's
``Array2D``...``Array5D``). A list column's rows must all have one shape (variable-length
lists of one length are fine; ragged ones are refused: pad them, or leave the column out).
Text and bytes are no tensor: such a column is refused unless it is left out (``columns``)
or is the key column of a key-value dataset (``name_col``). Nulls are refused, at any depth,
with the row that holds them.

Example:
    >>> import pyarrow as pa
    >>> t = pa.table({"x": pa.array([[1.0, 2.0], [3.0]]), "n": pa.array([1, 2])})
    >>> plan = plan_columns(t.schema, None, None, "t.parquet")
    >>> plan.names
    ['x', 'n']
    >>> try:
    ...     plan.check(t.to_batches(), 100)
    ... except InvalidArgumentError as exc:
    ...     print(str(exc)[:73])
    t.parquet, row 101: column 'x' has a list of 1 values where the first row
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.errors import InvalidArgumentError

__all__ = ["ColumnPlan", "plan_columns", "storage_of"]

_TEXT = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary)
_MORE_TEXT = ("is_large_binary", "is_fixed_size_binary", "is_string_view", "is_binary_view")


def _is_list(typ: Any) -> bool:
    return bool(
        pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)
    )


def _is_text(typ: Any) -> bool:
    checks = [*_TEXT, *(getattr(pa.types, n) for n in _MORE_TEXT if hasattr(pa.types, n))]
    return any(check(typ) for check in checks)


def _is_number(typ: Any) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ))


def storage_of(typ: Any) -> Any:
    """``typ`` without its extension types (their storage type)."""
    while isinstance(typ, pa.BaseExtensionType):
        typ = typ.storage_type
    return typ


def _tensor_shape(name: str, typ: Any, source: str) -> tuple[int, ...] | None:
    """The sample shape an ``arrow.fixed_shape_tensor`` column records (None for others)."""
    if getattr(typ, "extension_name", None) != "arrow.fixed_shape_tensor":
        return None
    perm = list(typ.permutation or [])
    if perm and perm != sorted(perm):
        raise InvalidArgumentError(
            f"{source}: column {name!r} is a fixed_shape_tensor with permutation {perm}; only "
            "row-major tensors (no permutation) are supported"
        )
    return tuple(int(d) for d in typ.shape)


def _check_type(name: str, typ: Any, source: str) -> None:
    inner = storage_of(typ)  # (an extension type as the column's type; not inside lists)
    while _is_list(inner):
        inner = inner.value_type
    if _is_number(inner):
        return
    if _is_text(inner):
        raise InvalidArgumentError(
            f"{source}: column {name!r} holds {typ} (text or bytes), which is no tensor; leave "
            f"it out with columns=[...] (the tensor columns), or make it the key of a "
            f"key-value dataset with name_col={name!r}"
        )
    raise InvalidArgumentError(
        f"{source}: column {name!r} has the Arrow type {typ}, which tensorfile cannot store as "
        "a tensor (numbers, bools, and lists, fixed-size lists or fixed_shape_tensors of them, "
        "are); leave it out with columns=[...]"
    )


@dataclass
class ColumnPlan:
    """The columns to read (``names``: the tensor columns, then the key column), the sample
    shapes the schema records, and the per-level widths of each list column's samples (set
    by the first chunk; every later row must match them)."""

    source: str
    tensors: list[str]
    name_col: str | None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    widths: dict[str, list[int]] = field(default_factory=dict)
    files: list[tuple[int, str]] = field(default_factory=list)
    """(first row, name) of each input file read so far, for :meth:`at`"""
    types: dict[str, Any] = field(default_factory=dict)
    """the Arrow type of each column in the first input file"""

    def at(self, row: int) -> str:
        """Where row ``row`` of the input is: ``file, row r`` (counted within its file)."""
        start, name = next(((s, n) for s, n in reversed(self.files) if s <= row), (0, self.source))
        return f"{name}, row {row - start}"

    def check_schema(self, schema: Any, source: str) -> None:
        """Another input file's ``schema`` must give the columns the types of the first's."""
        for name in self.names:
            if name not in schema.names:
                raise InvalidArgumentError(
                    f"{source} has no column {name!r} (the first input file has it)"
                )
            if not schema.field(name).type.equals(self.types[name]):
                raise InvalidArgumentError(
                    f"{source}: column {name!r} is {schema.field(name).type}, the first input "
                    f"file's is {self.types[name]}; every file must have the same columns"
                )

    @property
    def names(self) -> list[str]:
        """The columns to read from the input."""
        return self.tensors + ([self.name_col] if self.name_col else [])

    def check(self, pieces: Sequence[Any], start: int) -> Any:
        """One table of the record batches ``pieces`` (rows ``start...`` of the input; their
        columns in any order), extension columns as their storage, after refusing nulls and
        ragged samples (naming the input's row)."""
        arrays = []
        for name in self.names:
            arr = _joined(self._columns(pieces, name, start), self.types[name])
            while isinstance(arr, pa.ExtensionArray):
                arr = arr.storage
            if name in self.tensors:
                self._check_values(name, arr, start)
            elif arr.null_count:
                row = start + _first_null(arr)
                raise InvalidArgumentError(f"{self.at(row)}: the key column {name!r} is null")
            arrays.append(arr)
        return pa.table(arrays, names=self.names)

    def _columns(self, pieces: Sequence[Any], name: str, start: int) -> list[Any]:
        """Column ``name`` of each piece, of the type the schema gives it."""
        out = []
        for p in pieces:
            if name not in p.schema.names:
                raise InvalidArgumentError(f"{self.at(start)}: the rows lack the column {name!r}")
            col = p.column(name)
            if not col.type.equals(self.types[name]):
                raise InvalidArgumentError(
                    f"{self.at(start)}: column {name!r} is {col.type} here, {self.types[name]} "
                    "in the schema"
                )
            out.append(col)
            start += p.num_rows
        return out

    def _check_values(self, name: str, arr: Any, start: int) -> None:
        levels: list[Any] = []  # the list levels above ``arr``, outermost first
        level = 0
        while True:
            if arr.null_count:
                where = "" if not levels else " inside a sample"
                row = start + _row_of(levels, _first_null(arr))
                raise InvalidArgumentError(f"{self.at(row)}: column {name!r} has a null{where}")
            if not _is_list(arr.type) or not len(arr):
                return  # (no sample here: nothing below to check)
            self._check_width(name, arr, levels, level, start)
            levels.append(arr)
            arr = arr.flatten()
            level += 1

    def _check_width(self, name: str, arr: Any, levels: list[Any], level: int, start: int) -> None:
        """Every sample at this list level has the width the first row has."""
        if pa.types.is_fixed_size_list(arr.type):
            lengths = np.full(1, arr.type.list_size)
        else:
            lengths = np.diff(np.asarray(arr.offsets))
        known = self.widths.setdefault(name, [])
        if level == len(known):
            if not lengths.size:
                return  # no row yet: a later chunk sets it
            known.append(int(lengths[0]))
        bad = np.flatnonzero(lengths != known[level])
        if bad.size:
            j = int(bad[0])
            raise InvalidArgumentError(
                f"{self.at(start + _row_of(levels, j))}: column {name!r} has a list of "
                f"{int(lengths[j])} values where the first row has {known[level]}; every sample "
                "of a tensor column must have one shape: pad the lists to one length (or write "
                "the column as fixed_size_list), or leave the column out with columns=[...]"
            )


def _joined(arrays: list[Any], typ: Any) -> Any:
    """One array of ``arrays`` (of type ``typ``; none: an empty one)."""
    if len(arrays) == 1:
        return arrays[0]
    if not arrays:
        storage = pa.array([], storage_of(typ))
        return pa.ExtensionArray.from_storage(typ, storage) if storage.type != typ else storage
    return pa.concat_arrays(arrays)


def _first_null(arr: Any) -> int:
    mask = np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
    return int(np.argmax(mask))


def _row_of(levels: Sequence[Any], j: int) -> int:
    """The row (of the outermost level) that holds element ``j`` of the innermost level."""
    for parent in reversed(levels):
        if pa.types.is_fixed_size_list(parent.type):
            j //= int(parent.type.list_size)
        else:
            offsets = np.asarray(parent.offsets)
            j = int(np.searchsorted(offsets, offsets[0] + j, side="right")) - 1
    return j


def plan_columns(
    schema: Any, columns: Sequence[str] | None, name_col: str | None, source: str
) -> ColumnPlan:
    """Check the columns of ``schema`` the write takes (``columns``, else every column but
    ``name_col``); the :class:`ColumnPlan` that checks and reads each chunk."""
    have = list(schema.names)
    wanted = list(columns) if columns else [n for n in have if n != name_col]
    missing = [c for c in [*wanted, *([name_col] if name_col else [])] if c not in have]
    if missing:
        raise InvalidArgumentError(
            f"{source}: column(s) {', '.join(map(repr, missing))} do not exist; have {have}"
        )
    if name_col is not None and name_col in wanted:
        raise InvalidArgumentError(f"the key column {name_col!r} cannot also be a tensor column")
    if not wanted:
        raise InvalidArgumentError(f"{source}: there is no tensor column to write")
    plan = ColumnPlan(source, wanted, name_col)
    plan.types = {n: schema.field(n).type for n in plan.names}
    for name in wanted:
        typ = schema.field(name).type
        _check_type(name, typ, source)
        shape = _tensor_shape(name, typ, source)
        if shape is not None:
            plan.shapes[name] = shape
    return plan
