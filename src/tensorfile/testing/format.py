"""``FormatConformance``: the suite every format entry of the registry passes.

Subclass it in a test module (a class named ``Test...``) and set :attr:`format_name` (the
registry name), :attr:`suffix`, :attr:`dtypes` (the dtype names the format round trips)
and, where the format keeps text metadata, :attr:`metadata`. The methods take pytest's
``tmp_path`` fixture. A read-only format (``writable=False``) builds its fixtures in
:meth:`FormatConformance.write` (override it; the default writes through the registry's
:meth:`~tensorfile.formats.Format.save`).

What a format must do:

* be detected by its content whatever the file is named;
* round trip every dtype it supports through its writer (or fixture) and
  :func:`tensorfile.open`: keys (in the format's order), ``info`` (dtype, shape), ``view``
  (read-only, equal; refused only for an encoded tensor), ``get_tensor`` (owned, equal),
  ``metadata``;
* on a truncated file or one with a flipped header byte, raise only
  :class:`~tensorfile.errors.TensorFileError` subclasses (never a builtin exception), within
  seconds;
* leave an existing destination untouched when a write fails half way (a writable format),
  or refuse to write with :class:`~tensorfile.errors.UnsupportedError` (a read-only one).

Example:
    >>> class TestNpz(FormatConformance):
    ...     format_name = "npz"
    >>> import pathlib, tempfile
    >>> TestNpz().test_round_trip_through_the_registry(pathlib.Path(tempfile.mkdtemp()))
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core import dtypes
from ..core.errors import TensorFileError, UnsupportedError
from ..formats import Format, TensorSpec, detect, get
from ..formats.open import open as open_file
from ..sources import LocalSource

__all__ = ["FormatConformance"]

NDArray = np.ndarray[Any, Any]


class _WriteFailed(Exception):
    """Raised by the conformance suite's tensor getter to break a write half way."""


class FormatConformance:
    """Base class of a format's conformance tests (see the module docstring).

    Attributes:
        format_name: the registry name (``tensorfile.formats.get(format_name)``).
        suffix: a file name ending for the fixtures (default: the format's first suffix).
        dtypes: the dtype names (``F32``, ``BF16``...) the format round trips.
        metadata: text metadata written and expected back (empty: the format keeps none).
        single_tensor: the format holds one tensor (``npy``).
        write_options: options for the registry writer (``{"version": 2}``).
        cuts: how many truncation points :meth:`test_truncated_files_raise_tensorfile_errors`
            tries; flips: how many header bytes the flipped-byte test damages.
        time_limit: seconds a damaged file may take to be refused.
    """

    format_name: ClassVar[str] = ""
    suffix: ClassVar[str] = ""
    dtypes: ClassVar[tuple[str, ...]] = ("F32", "F16", "I64", "I32", "I8", "U8", "BOOL")
    metadata: ClassVar[Mapping[str, str]] = {}
    single_tensor: ClassVar[bool] = False
    write_options: ClassVar[Mapping[str, Any]] = {}
    cuts: ClassVar[int] = 24
    flips: ClassVar[int] = 48
    time_limit: ClassVar[float] = 20.0

    # -- fixtures ---------------------------------------------------------------------------

    @property
    def format(self) -> Format:
        """The registry entry under test."""
        return get(self.format_name)

    @property
    def ending(self) -> str:
        """The fixtures' file name ending: :attr:`suffix`, else the format's first suffix."""
        return self.suffix or next(iter(self.format.suffixes), "")

    def tensors(self) -> dict[str, NDArray]:
        """One small tensor per dtype of :attr:`dtypes` (the first only: ``single_tensor``)."""
        out: dict[str, NDArray] = {}
        for i, name in enumerate(self.dtypes):
            dt = dtypes.from_name(name).numpy
            shape = ((2, 3), (5,), (1, 2, 2), ())[i % 4]
            values = np.arange(int(np.prod(shape)), dtype=np.int64) % 7
            out[f"t{i}.{name.lower()}"] = values.reshape(shape).astype(dt)
            if self.single_tensor:
                break
        return out

    def write(
        self, path: Path, tensors: Mapping[str, NDArray], metadata: Mapping[str, str]
    ) -> None:
        """Write a fixture file (override for a read-only format)."""
        specs = [
            TensorSpec(n, dtypes.from_numpy(a.dtype), tuple(a.shape)) for n, a in tensors.items()
        ]
        self.format.save(str(path), specs, tensors.__getitem__, metadata, **self.write_options)

    def fixture(self, folder: Path, name: str = "fixture") -> tuple[Path, dict[str, NDArray]]:
        """A fixture file in ``folder`` and the tensors it holds."""
        tensors = self.tensors()
        if self.single_tensor:  # the tensor is named after the file
            name = next(iter(tensors))
        path = folder / f"{name}{self.ending}"
        self.write(path, tensors, self.metadata)
        return path, tensors

    # -- the suite -------------------------------------------------------------------------

    def test_detected_by_content_whatever_the_name(self, tmp_path: Path) -> None:
        path, _ = self.fixture(tmp_path)
        for other in ("renamed.data", "renamed.safetensors", "renamed.gguf"):
            shutil.copyfile(path, tmp_path / other)
            with LocalSource(tmp_path / other) as src:
                found = detect(src)
            assert found is self.format, (other, found.name)

    def test_round_trip_through_the_registry(self, tmp_path: Path) -> None:
        path, tensors = self.fixture(tmp_path)
        with open_file(path) as reader:
            assert reader.format == self.format_name
            keys = list(reader.keys())
            assert sorted(keys) == sorted(tensors), keys  # (in the format's own order)
            for name, want in tensors.items():
                info = reader.info(name)
                assert info.dtype.name == dtypes.from_numpy(want.dtype).name, name
                assert tuple(info.shape) == want.shape, name
                try:
                    view = reader.view(name)
                except UnsupportedError:  # an encoded (compressed) tensor has no view
                    assert info.components["data"].encoding != "raw", name
                else:
                    assert not view.flags.writeable, name
                    assert view.shape == want.shape, name
                    assert view.tobytes() == want.tobytes(), name
                got = reader.get_tensor(name)
                assert got.dtype == want.dtype, name
                assert got.shape == want.shape, name
                assert got.tobytes() == want.tobytes(), name
                got[...] = got  # owned and writable
            meta = reader.metadata
            for key, value in self.metadata.items():
                held = meta[key]
                assert str(getattr(held, "value", held)) == value, key

    def _read_all(self, path: Path) -> None:
        with open_file(path) as reader:
            for name in reader.keys():
                reader.info(name)
                try:
                    reader.get_tensor(name)
                except UnsupportedError:
                    continue

    def _damaged(self, path: Path, data: bytes, what: str) -> None:
        path.write_bytes(data)
        start = time.monotonic()
        try:
            self._read_all(path)
        except TensorFileError:
            pass
        except Exception as exc:  # the conformance failure: a builtin escaped
            raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc
        took = time.monotonic() - start
        assert took < self.time_limit, f"{what}: took {took:.1f} s"

    def test_truncated_files_raise_tensorfile_errors(self, tmp_path: Path) -> None:
        path, _ = self.fixture(tmp_path)
        data = path.read_bytes()
        cuts = sorted({int(len(data) * k / self.cuts) for k in range(self.cuts)} | {1, 8, 9})
        cut = tmp_path / f"cut{self.ending}"
        for n in cuts:
            if n < len(data):
                self._damaged(cut, data[:n], f"cut to {n} of {len(data)} bytes")

    def test_flipped_header_bytes_raise_tensorfile_errors(self, tmp_path: Path) -> None:
        path, _ = self.fixture(tmp_path)
        data = path.read_bytes()
        rng = np.random.default_rng(len(data))
        head = min(len(data), 512)
        spots = sorted({*range(min(16, len(data))), *rng.integers(0, head, self.flips).tolist()})
        tail = [len(data) - 1 - k for k in range(min(24, len(data)))]  # a directory at the end
        bad = tmp_path / f"flipped{self.ending}"
        for at in sorted({*spots, *tail}):
            damaged = bytearray(data)
            damaged[at] ^= 0xFF
            self._damaged(bad, bytes(damaged), f"byte {at} of {len(data)} flipped")

    def test_a_failed_write_leaves_the_destination_intact(self, tmp_path: Path) -> None:
        dst = tmp_path / f"dst{self.ending}"
        dst.write_bytes(b"the old file")
        tensors = self.tensors()
        names = list(tensors)
        specs = [
            TensorSpec(n, dtypes.from_numpy(a.dtype), tuple(a.shape)) for n, a in tensors.items()
        ]
        fail_at = names[-1]
        getter: Callable[[str], NDArray] = lambda name: _fail_on(name, fail_at, tensors)  # noqa: E731
        if not self.format.writable:
            try:
                self.format.save(str(dst), specs, getter, {})
            except UnsupportedError:
                pass
            else:
                raise AssertionError(f"{self.format_name} is read-only but wrote {dst}")
        else:
            try:
                self.format.save(str(dst), specs, getter, {}, **self.write_options)
            except _WriteFailed:
                pass
            else:
                raise AssertionError("the write did not fail")
        assert dst.read_bytes() == b"the old file"
        assert sorted(os.listdir(tmp_path)) == [dst.name]


def _fail_on(name: str, fail_at: str, tensors: Mapping[str, NDArray]) -> NDArray:
    if name == fail_at:
        raise _WriteFailed(name)
    return tensors[name]
