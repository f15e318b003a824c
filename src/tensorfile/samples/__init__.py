"""The sample files the documentation's examples run against, made with the package alone
(numpy and tensorfile's own writers: no torch, no pyarrow)::

    tensorfile samples DIR            # or: python -m tensorfile.samples DIR

writes into ``DIR``: ``model.safetensors`` (seven small tensors: float32, float16, bfloat16,
an int64 scalar; metadata ``{"format": "pt"}``), ``model-v2.safetensors`` (one tensor
changed, one added), ``model.zt`` (zTensor v1.0), ``ckpt/`` (the same tensors as a sharded
Hugging Face checkpoint), ``model.pt`` (a PyTorch pickle of them, as ``torch.save`` writes
it) and ``data/`` (a dataset of 1,000 rows in 10 shards). The bytes are the same on every
run (the dataset's shard names aside).

Everything is written into a temporary folder inside ``DIR`` first, then renamed into
place: a sample already there with the same content is left alone, and one that differs is
replaced only with ``force`` (otherwise nothing is written and the error names it). A file
is renamed over the one it replaces (one atomic step: the old file or the new one is there,
never neither); a folder is first moved into the temporary folder, so a run killed between
the two renames leaves it there, and the next run puts it back before it starts. Runs on one
``DIR`` take turns (an exclusive ``flock`` of ``DIR`` itself, dropped by the kernel if the
run is killed), and each removes the temporary folders that killed runs left.

Not to be confused with :mod:`tensorfile.dataset.reading.samples`, the rows of a dataset's shards.

Example:
    >>> import tempfile, tensorfile
    >>> folder = tempfile.mkdtemp()
    >>> [(w.name, w.action) for w in make(folder)][:2]
    [('model.safetensors', 'wrote'), ('model-v2.safetensors', 'wrote')]
    >>> {w.action for w in make(folder)}  # a second run finds them all in place
    {'unchanged'}
    >>> with tensorfile.open(f"{folder}/model.zt") as f:
    ...     f.info("embed.weight").shape
    (64, 32)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ..core.errors import InvalidArgumentError
from ..sources import LocalStore
from ._pickle import save_torch_pickle

__all__ = ["NAMES", "Written", "make", "state_dict"]

NAMES = ("model.safetensors", "model-v2.safetensors", "model.zt", "ckpt", "model.pt", "data")
"""What :func:`make` writes, in the order it reports them."""

NDArray = np.ndarray[Any, Any]
_STAGING = ".tensorfile-samples-"  # + tempfile.mkdtemp's 8 characters
_STAGING_NAME = re.compile(re.escape(_STAGING) + r"[a-z0-9_]{8}")
_OLD = ".old-"  # a folder being replaced, inside the staging folder


@dataclass(frozen=True)
class Written:
    """One sample in the folder: its name, what :func:`make` did (``wrote``, ``replaced`` or
    ``unchanged``) and its size in bytes (a folder's: its files')."""

    name: str
    action: str
    size: int


def state_dict() -> dict[str, NDArray]:
    """The tensors of ``model.safetensors``, the same on every call.

    Example:
        >>> sd = state_dict()
        >>> sd["embed.weight"].shape, str(sd["lm_head.weight"].dtype), int(sd["step"])
        ((64, 32), 'bfloat16', 1000)
    """
    rng = np.random.default_rng(0)
    return {
        "embed.weight": rng.standard_normal((64, 32), dtype=np.float32),
        "layers.0.attn.weight": rng.standard_normal((32, 32)).astype(np.float16),
        "layers.0.attn.bias": np.zeros(32, np.float16),
        "layers.1.attn.weight": rng.standard_normal((32, 32)).astype(np.float16),
        "layers.1.attn.bias": np.zeros(32, np.float16),
        "lm_head.weight": rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16),
        "step": np.array(1000, np.int64),
    }


def _write_all(folder: Path) -> None:
    """Every sample into the (empty) ``folder``."""
    from .. import dataset, ztensor
    from ..safetensors.numpy import save_file, save_sharded

    tensors = state_dict()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    v2 = dict(tensors)
    v2["layers.1.attn.bias"] = np.full(32, 0.5, np.float16)
    v2["layers.1.mlp.weight"] = np.ones((64, 32), np.float16)
    save_file(v2, folder / "model-v2.safetensors", metadata={"format": "pt"})
    ztensor.save_file(tensors, folder / "model.zt")
    save_sharded(tensors, folder / "ckpt", max_shard_size=10_000, metadata={"format": "pt"})
    save_torch_pickle(tensors, folder / "model.pt")
    rng = np.random.default_rng(1)
    dataset.write(
        {
            "image": rng.standard_normal((1000, 3, 8, 8), dtype=np.float32),
            "label": np.arange(1000, dtype=np.int64) % 10,
        },
        folder / "data",
        batch_size=100,
    )


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fingerprint(path: Path) -> Any:
    """What makes two samples the same: a file's bytes; a folder's files and their bytes,
    where a dataset's shard names (a new id on each write) count by their content."""
    if path.is_symlink() or not path.is_dir():
        return ("file", _digest(path)) if path.is_file() and not path.is_symlink() else None
    files = {p.relative_to(path).as_posix(): p for p in path.rglob("*") if p.is_file()}
    manifest = files.pop("dataset_manifest.json", None)
    if manifest is None:
        return ("folder", sorted((name, _digest(p)) for name, p in files.items()))
    try:
        doc = json.loads(manifest.read_bytes())
        for shard in doc["shards"]:
            shard["shard_path"] = _digest(files.pop(shard["shard_path"]))
    except (ValueError, KeyError, TypeError):  # not a dataset tensorfile.samples wrote
        return ("manifest", _digest(manifest), sorted(files))
    return ("dataset", json.dumps(doc, sort_keys=True), sorted(files))


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _recover(target: Path) -> None:
    """Under the folder's lock: the staging folders of killed runs, ours by their name and
    ownerless (a live run would hold the lock), removed; a sample folder one of them had
    moved aside and not yet replaced put back first."""
    for staging in target.iterdir():
        if not _STAGING_NAME.fullmatch(staging.name) or staging.is_symlink():
            continue
        if staging.is_dir():
            for name in NAMES:
                old, where = staging / f"{_OLD}{name}", target / name
                if (old.exists() or old.is_symlink()) and not (
                    where.exists() or where.is_symlink()
                ):
                    os.replace(old, where)
        shutil.rmtree(staging, ignore_errors=True)


def _put(new: Path, where: Path, staging: Path) -> None:
    """``new`` renamed to ``where``. A file over a file is one atomic rename; a folder (or a
    file where a folder is) cannot be renamed over the old one, which goes into ``staging``
    first (where :func:`_recover` finds it if the run is killed before the second rename)."""
    present = where.exists() or where.is_symlink()
    if present and (new.is_dir() or (where.is_dir() and not where.is_symlink())):
        os.replace(where, staging / f"{_OLD}{where.name}")
    os.replace(new, where)


def make(folder: str | os.PathLike[str], *, force: bool = False) -> list[Written]:
    """Write every sample file (:data:`NAMES`) into ``folder`` (made if missing) and say
    what was done with each.

    A sample already in ``folder`` with the same content is left as it is (``unchanged``);
    one that differs is replaced with ``force`` (``replaced``), else nothing at all is
    written and :class:`~tensorfile.errors.InvalidArgumentError` names each one. Each
    sample is made in a temporary folder inside ``folder`` and renamed into place.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> _ = open(os.path.join(folder, "model.zt"), "w").write("mine")
        >>> make(folder)
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.InvalidArgumentError: ...model.zt exists and is not the sample...
        >>> [w.action for w in make(folder, force=True) if w.name == "model.zt"]
        ['replaced']
    """
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise InvalidArgumentError(f"{target} is a file, not a folder to write the samples into")
    target.mkdir(parents=True, exist_ok=True)
    with LocalStore(os.path.abspath(target)).locked():  # one run at a time in a folder
        _recover(target)
        staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=target))
        try:
            return _commit(target, staging, force)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _commit(target: Path, staging: Path, force: bool) -> list[Written]:
    """The samples made in ``staging``, compared with ``target``'s and renamed into it."""
    _write_all(staging)
    actions = {}
    for name in NAMES:
        old = target / name
        if not old.exists() and not old.is_symlink():
            actions[name] = "wrote"
        elif _fingerprint(old) == _fingerprint(staging / name):
            actions[name] = "unchanged"
        else:
            actions[name] = "replaced"
    differ = [name for name, action in actions.items() if action == "replaced"]
    if differ and not force:
        named = ", ".join(str(target / name) for name in differ)
        raise InvalidArgumentError(
            f"{named} {'exists' if len(differ) == 1 else 'exist'} and "
            f"{'is not the sample' if len(differ) == 1 else 'are not the samples'}: "
            "nothing was written (--force, or force=True, replaces "
            f"{'it' if len(differ) == 1 else 'them'}; or choose another folder)"
        )
    for name, action in actions.items():
        if action != "unchanged":
            _put(staging / name, target / name, staging)
    return [Written(name, actions[name], _size(target / name)) for name in NAMES]
