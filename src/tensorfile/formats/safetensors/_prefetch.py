"""``safe_open(...).prefetch(plan)``: the reference's plan of the tensors (and rows) to read.

safetensors 0.9 (its PR #848) lets a rank declare ahead of time the tensors it wants, whole
or a range of rows, and schedules the reads: ``f.prefetch(plan)``, then ``f.get_tensor(name)``
hands each planned tensor out once (a second ask is "already delivered"; a tensor outside the
plan is "not in the prefetch plan"), ``f.tensor_stream()`` yields the ones not yet taken as
they land, and ``get_slice``/``get_tensors`` are refused. The plan maps names to ``None``
(the whole tensor) or a step-1 ``slice`` of the first dimension, never clamped (a negative
start counts from the end); ``None`` for the plan reads every tensor. The reference
refuses, before reading anything, an empty plan, an unknown name, another kind of value, a
step other than 1, a slice of a 0-d tensor, rows out of range, and a dtype the framework
cannot hold (torch's missing F6 types), with the words checked here.

Beyond the reference, and for any framework, device and backend (the reference needs
``framework="pt"``, a CUDA device and ``backend="pread"``): a plan value may be any basic
index or an :class:`~tensorfile.core.selection.Intervals` (tensorfile's plans, see
:mod:`tensorfile.core.selection.region`). ``prefetch`` returns the :class:`PrefetchLoader`
(the reference's later form: ``take``, ``names``, iteration, ``close``, a context manager);
code that ignores the returned value sees the reference's behaviour.

The reads run on a background thread in file order, in batches of at most
:data:`BATCH_BYTES` bytes of boxes, each batch one planned pass
(:mod:`tensorfile.core.selection.read`): merged ranges, parallel pieces, straight into each
tensor's memory; only the planned rows are read and nothing unplanned is allocated. A
tensor is handed out as soon as its batch has landed.

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors import safe_open
    >>> from tensorfile.safetensors.numpy import save_file
    >>> save_file({"w": np.arange(12, dtype=np.float32).reshape(4, 3), "b": np.ones(3)}, "p.st")
    >>> with safe_open("p.st", framework="np") as f:
    ...     _ = f.prefetch({"w": slice(1, 3)})
    ...     f.get_tensor("w").tolist()
    [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorfile.core.errors import (
    InvalidTypeError,
    SafetensorArgumentError,
    SafetensorError,
    SafetensorUnsupportedError,
    TensorFileError,
)
from tensorfile.core.selection import Intervals, Region, region
from tensorfile.core.selection.read import Want, element_size, finish, new_box, read_regions

if TYPE_CHECKING:
    from tensorfile.core.reader import Reader
    from tensorfile.frameworks import Framework

__all__ = ["BATCH_BYTES", "PrefetchLoader", "prefetch_plan"]

BATCH_BYTES = 64 << 20
"""The bytes of boxes read in one planned pass of the background thread."""


_TAKEN = object()
"""What :meth:`PrefetchLoader._take` returns for a tensor another thread took."""


def _plan_error(text: str) -> SafetensorArgumentError:
    return SafetensorArgumentError(f"invalid prefetch plan: {text}")


def prefetch_plan(reader: Reader, plan: Any) -> dict[str, Region]:
    """The regions of ``plan`` (the reference's form, or tensorfile's), in file order,
    checked as the reference checks them (see the module docstring)."""
    header_names = reader.keys()
    order = {n: i for i, n in enumerate(_file_order(reader, header_names))}
    if plan is None:
        entries: dict[str, Any] = dict.fromkeys(header_names)
    elif isinstance(plan, Mapping):
        entries = dict(plan)
    else:
        raise _plan_error(f"a plan maps tensor names to None or a slice, got {type(plan).__name__}")
    if not entries:
        raise _plan_error("the plan selects no tensors")
    regions: dict[str, Region] = {}
    for name in sorted(entries, key=lambda n: order.get(n, -1) if isinstance(n, str) else -1):
        if not isinstance(name, str) or name not in order:
            raise _plan_error(f"the file does not contain a tensor named {name!r}")
        info = reader.info(name)
        regions[name] = _entry(name, info.shape, entries[name], element_size(info))
    return regions


def _file_order(reader: Reader, names: list[str]) -> list[str]:
    return sorted(names, key=lambda n: reader.info(n).byte_range.start)


def _entry(name: str, shape: tuple[int, ...], value: Any, itemsize: int) -> Region:
    """One plan value as a region: the reference's ``None`` and row slices, strictly as it
    takes them; tensorfile's tuples and intervals as :func:`region` takes them (a sparse
    strided slice: only its rows)."""
    if isinstance(value, tuple | Intervals):
        try:
            return region(shape, value, name, itemsize=itemsize)
        except TensorFileError as exc:
            raise _plan_error(str(exc)) from None
    if value is None:
        return region(shape, None, name)
    if not isinstance(value, slice):
        raise _plan_error(
            f"tensor {name!r}: a plan value is None or a slice (or a tuple of indices), got "
            f"{type(value).__name__}"
        )
    if value.step is not None and (not isinstance(value.step, int) or value.step != 1):
        if value.step == 0:
            raise _plan_error(f"tensor {name!r}: invalid prefetch plan slice (step 0)")
        raise _plan_error(f"tensor {name!r}: a plan slice has step 1, got {value.step!r}")
    if not shape:
        raise _plan_error(f"tensor {name!r} is 0-d: it has no rows to slice")
    n = shape[0]
    start = 0 if value.start is None else value.start
    stop = n if value.stop is None else value.stop
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop)):
        raise _plan_error(f"tensor {name!r}: invalid prefetch plan slice {value!r}")
    a = start + n if start < 0 else start
    b = stop + n if stop < 0 else stop
    if not 0 <= a <= b <= n:
        raise _plan_error(f"tensor {name!r}: rows {start}:{stop} are out of range for its {n} rows")
    return region(shape, slice(a, b), name)


class PrefetchLoader:
    """The tensors of a prefetch plan, read on a background thread and handed out once.

    ``take(name)`` waits for the tensor and hands it out (once); iterating yields
    ``(name, tensor)`` for the tensors not yet taken, in file order, as they land;
    ``names()`` lists the planned tensors in file order; ``close()`` (or leaving a ``with``
    block) stops the reads. Made by :meth:`safe_open.prefetch`.
    """

    def __init__(
        self,
        reader: Reader,
        regions: dict[str, Region],
        framework: Framework,
        threads: int | None = None,
    ) -> None:
        self._reader = reader
        self._regions = regions
        self._framework = framework
        self._threads = threads
        self._landed: dict[str, Any] = {}
        self._taken: set[str] = set()
        self._failed: BaseException | None = None
        self._closed = False
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="tensorfile-prefetch", daemon=True)
        self._thread.start()

    def names(self) -> list[str]:
        """The planned tensors, in file order."""
        return list(self._regions)

    def __len__(self) -> int:
        return len(self._regions)

    def _batches(self) -> Iterator[list[str]]:
        batch: list[str] = []
        size = 0
        for name, reg in self._regions.items():
            batch.append(name)
            size += reg.numel * self._reader.info(name).dtype.numpy.itemsize
            if size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def _run(self) -> None:
        try:
            for batch in self._batches():
                with self._cond:
                    if self._closed:
                        return
                wants = []
                for name in batch:
                    info = self._reader.info(name)
                    reg = self._regions[name]
                    wants.append(Want(self._reader, name, reg, new_box(reg, info)))
                read_regions(wants, self._threads)
                made = {w.name: self._tensor(w) for w in wants}
                with self._cond:
                    if self._closed:  # (closed while the batch was read: it is dropped)
                        return
                    self._landed.update(made)
                    self._cond.notify_all()
        except BaseException as exc:  # handed to whoever waits for a tensor
            with self._cond:
                self._failed = exc
                self._cond.notify_all()
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _tensor(self, w: Want) -> Any:
        info = w.info
        arr = finish(w.region, w.box).view(info.dtype.numpy).reshape(w.region.result_shape)
        return self._framework.convert(arr, info.dtype)

    def take(self, name: str) -> Any:
        """The planned tensor ``name`` (waiting for it to land), handed out once."""
        if not isinstance(name, str):
            raise InvalidTypeError(f"a tensor name is a string, got {type(name).__name__}")
        if name not in self._regions:
            raise SafetensorArgumentError(f"tensor {name!r} is not in the prefetch plan")
        return self._take(name, skip_taken=False)

    def _take(self, name: str, skip_taken: bool) -> Any:
        """:meth:`take`; ``skip_taken``: :data:`_TAKEN` for a tensor taken already (the
        iteration's: another thread may take the tensor it waits for)."""
        with self._cond:
            while True:  # (checked again on every wake: another thread may have taken it)
                if self._closed:
                    raise SafetensorError("the prefetch loader is closed")
                if name in self._taken:
                    if skip_taken:
                        return _TAKEN
                    raise SafetensorArgumentError(f"tensor {name!r} was already delivered")
                if name in self._landed:
                    self._taken.add(name)
                    return self._landed.pop(name)
                self._check()
                self._cond.wait()

    def _check(self) -> None:
        """(with the lock held) Raise when nothing more will land."""
        if self._closed:
            raise SafetensorError("the prefetch loader is closed")
        if self._failed is not None:
            if isinstance(self._failed, TensorFileError):
                raise self._failed
            raise SafetensorError(f"prefetch failed: {self._failed}") from self._failed
        if self._done:
            raise SafetensorError("the prefetch reads ended early")

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name in self.names():
            got = self._take(name, skip_taken=True)
            if got is not _TAKEN:
                yield name, got

    def close(self) -> None:
        """Stop the reads (a batch being read finishes first) and drop what was not taken."""
        with self._cond:
            self._closed = True
            self._landed.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> PrefetchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_framework(framework: Framework, reader: Reader, regions: dict[str, Region]) -> None:
    """Refuse, before any read, a planned tensor whose dtype the framework cannot hold
    (torch has no F6 types), naming the dtype."""
    seen: set[str] = set()
    for name in regions:
        dt = reader.info(name).dtype
        if dt.name in seen:
            continue
        seen.add(dt.name)
        try:
            framework.convert(np.empty((0,), dt.numpy), dt)
        except TensorFileError as exc:
            raise SafetensorUnsupportedError(
                f"tensor {name!r} is {dt.name}, which the framework cannot hold: {exc}"
            ) from None
