"""PyTorch pickles (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) as a read-only registry entry:
``pytorch``.

Read only through ``torch.load(weights_only=True)``: never an unrestricted unpickler, so a
pickle that needs anything but tensors, containers and plain values is refused unexecuted
(an :class:`~tensorfile.errors.UnsupportedError` quoting torch's reason). torch is imported
only when such a file is opened; a local file is loaded with ``mmap=True`` (the tensors stay
in the page cache, not in memory) where torch can and its name is a PyTorch one (torch
routes a path by its name: a ``*.safetensors`` path is not loaded as a pickle), others from
their bytes.

What the pickle holds becomes tensors by these rules:

* a dict of tensors: its keys; nested dicts are flattened with dotted names
  (``{"model": {"w": t}}``: ``model.w``); two tensors that flatten to the same name (a
  dotted key and a nested dict) are refused, naming it;
* a lone tensor: one tensor named after the file (``lone.pt``: ``lone``);
* anything else (a number, a list, an optimizer step) is refused, naming where it is;
  only dense (strided) tensors are read.

Tensors are served from the loaded arrays (:meth:`~tensorfile.core.reader.Reader.view` is
zero-copy on them); the catalog's format is ``pytorch``, its metadata empty. Writing
PyTorch pickles is not supported (:attr:`~tensorfile.formats.Format.writable` is False).

Example:
    >>> import os, tempfile, torch, tensorfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.pt")
    >>> torch.save({"model": {"w": torch.ones(2, 3)}}, path)
    >>> with tensorfile.open(path) as f:
    ...     f.format, f.keys(), f.view("model.w").sum()
    ('pytorch', ['model.w'], np.float32(6.0))
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core import dtypes
from ..core.catalog import ByteRange, Catalog, Component, TensorInfo
from ..core.errors import SourceError, UnsupportedError
from ..core.source import Source
from . import PYTORCH
from ._arrays import ArraysReader, ArraysSource, Segment, SourceFile, file_stem

__all__ = ["load_tensors", "open_reader", "read_catalog"]


SAFE_TORCH = (2, 6)
"""The oldest torch whose ``torch.load(weights_only=True)`` tensorfile trusts with a pickle:
up to 2.5.1 a crafted file could run code through it (CVE-2025-32434)."""


def torch_is_safe(version: str) -> bool:
    """Whether torch ``version`` (``torch.__version__``) is at least :data:`SAFE_TORCH`.

    Example:
        >>> torch_is_safe("2.5.1+cpu"), torch_is_safe("2.6.0"), torch_is_safe("2.13.0")
        (False, True, True)
    """
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= SAFE_TORCH


def _load(source: Source) -> Any:
    """``torch.load(weights_only=True)`` of the file in ``source``, with a torch new enough
    that it cannot be bypassed."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError(f"{source.name}: reading a PyTorch pickle needs torch") from None
    if not torch_is_safe(torch.__version__):
        raise UnsupportedError(
            f"{source.name}: torch {torch.__version__} is installed, and before 2.6 "
            "torch.load(weights_only=True) could be made to run code (CVE-2025-32434); "
            "tensorfile reads pickles only with torch>=2.6 (pip install -U torch)"
        )
    from ..sources import LocalSource

    try:
        named = source.name.lower().endswith(PYTORCH.hint_suffixes)  # (torch routes by name)
        if isinstance(source, LocalSource) and named and os.path.isfile(source.name):
            try:
                return torch.load(source.name, weights_only=True, map_location="cpu", mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):  # an old (not zip) pickle cannot be mapped
                    raise
        with io.BufferedReader(SourceFile(source), 1 << 20) as f:
            return torch.load(f, weights_only=True, map_location="cpu")
    except SourceError:
        raise
    except Exception as exc:  # torch's UnpicklingError and friends: the reason is theirs
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnsupportedError(
            f"{source.name}: refused by torch.load(weights_only=True), the only way tensorfile "
            f"reads pickles: {reason}"
        ) from None


def _flatten(obj: Any, prefix: str, out: dict[str, Any], where: str) -> None:
    """Nested dicts of tensors as dotted names, without recursion (a dict nested thousands
    deep, which ``torch.load`` accepts, is walked like any other), in the pickle's order."""
    import torch

    stack: list[tuple[str, Any]] = [(prefix, obj)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, torch.Tensor):
            if name in out:
                raise UnsupportedError(
                    f"{where}: two tensors flatten to the name {name!r} (a dotted key and a "
                    "nested dict); rename one"
                )
            out[name] = value
            continue
        if not isinstance(value, Mapping):
            raise UnsupportedError(
                f"{where}: {name or 'the pickle'} holds a value of type "
                f"{type(value).__name__}, not a tensor; only (nested) dicts of tensors are read"
            )
        children = []
        for key, child in value.items():
            if not isinstance(key, str):
                raise UnsupportedError(
                    f"{where}: key {key!r} under {name or 'the top'} is not text"
                )
            children.append((f"{name}.{key}" if name else key, child))
        stack.extend(reversed(children))  # popped in the dict's order


def load_tensors(source: Source) -> dict[str, np.ndarray[Any, Any]]:
    """The tensors of the pickle in ``source`` as numpy arrays (sharing memory with what
    torch loaded), by flattened name (see the module docstring)."""
    import torch

    from ..frameworks.torch import to_numpy

    obj = _load(source)
    if isinstance(obj, torch.Tensor):  # a lone tensor: named after the file, as .npy
        obj = {file_stem(source.name): obj}
    flat: dict[str, Any] = {}
    _flatten(obj, "", flat, source.name)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for name, t in flat.items():
        if t.layout != torch.strided:
            raise UnsupportedError(
                f"{source.name}: tensor {name!r} is {t.layout}; only dense tensors"
            )
        if t.is_meta or t.is_quantized:
            kind = "on the meta device (it has no data)" if t.is_meta else "quantized"
            raise UnsupportedError(f"{source.name}: tensor {name!r} is {kind}")
        try:
            arrays[name] = to_numpy(t.detach().cpu().contiguous())
        except UnsupportedError as exc:
            raise UnsupportedError(f"{source.name}: tensor {name!r}: {exc}") from None
    return arrays


def _keep(arr: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
    return lambda: arr


def _open(source: Source) -> tuple[Catalog, list[Segment]]:
    arrays = load_tensors(source)
    tensors: dict[str, TensorInfo] = {}
    segments = []
    at = source.size
    for name, arr in arrays.items():
        try:
            dt = dtypes.from_numpy(arr.dtype)
        except (KeyError, TypeError, ValueError):
            raise UnsupportedError(
                f"{source.name}: tensor {name!r} has dtype {arr.dtype}, which no tensor "
                "format holds"
            ) from None
        rng = ByteRange(at, at + arr.nbytes)
        tensors[name] = TensorInfo(name, dt, tuple(arr.shape), {"data": Component(rng, dt)})
        segments.append(Segment(at, arr.nbytes, _keep(arr)))
        at += arr.nbytes
    return Catalog("pytorch", {}, tensors, 0, 0), segments


def read_catalog(source: Source) -> Catalog:
    """The catalog of the PyTorch pickle in ``source`` (the pickle is loaded to learn it)."""
    return _open(source)[0]


def open_reader(source: Source, *, verify: bool | None = None) -> ArraysReader:
    """A reader over the PyTorch pickle in ``source``."""
    catalog, segments = _open(source)
    return ArraysReader(ArraysSource(source.name, source, segments), catalog)
