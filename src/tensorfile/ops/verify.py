"""Verify a tensor file or a sharded checkpoint: structure, digests, completeness, values.

:func:`verify` opens the file (which runs every structural rule of its format: an invalid
header or manifest is an error, not a report) and then reads every tensor's bytes, so that
each digest is checked (zTensor v1.0 crc32c/sha256, zTensor v2 xxh3/sha256, safetensors'
``tensorfile.digests``, an npz member's zip CRC-32) and a file cut short is noticed, tensor
by tensor. A sharded checkpoint (a ``*.safetensors.index.json`` or
the folder holding it) is checked as a whole: every shard present and readable, every tensor
of the index in the shard it names and in no other, no shard tensor the index does not
list, and ``metadata.total_size`` equal to the sum of the tensors' sizes (the sum
huggingface_hub writes). ``deep=True`` also reads every value: NaN and Inf counts of float
tensors, BOOL bytes other than 0 and 1; each of those is a failure too.

Coverage: a tensor no stored digest covers is read, but a changed byte inside a valid value
cannot be seen. When a file stores digests for some tensors but not for others (a digest
map that leaves a tensor out), each tensor left out is a failure (rule ``uncovered``): a
file that carries digests is not verified while part of it is unchecked. A file that stores
no digests at all (safetensors saved without ``checksum=``, GGUF, npy...) passes on
structure and completeness alone, as the report says, unless ``strict=True``, which makes
every tensor no digest covers a failure. :attr:`VerifyReport.uncovered` names them either
way. A tensor with no elements needs no digest: no byte of it could change.

Memory: each tensor is read once, whole (a zTensor digest covers a whole component), so the
peak is about the largest tensor; values are scanned 16 MiB at a time.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> from tensorfile.ops import verify
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> ztensor.save_file({"w": np.array([1.0, np.nan], np.float32)}, path, checksum="crc32c")
    >>> verify(path).ok
    True
    >>> report = verify(path, deep=True)
    >>> report.ok, report.failures[0].rule, report.stats[0].nan
    (False, 'nan', 1)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import (
    ChecksumError,
    FormatError,
    IncompleteBufferError,
    InvalidArgumentError,
    SourceError,
    TensorFileError,
)
from ..core.reader import Reader
from ..formats import SAFETENSORS, detect
from ..formats.catalogs import (
    CheckpointIndex,
    index_path,
    is_index,
    local_target,
    locate_checkpoint,
    open_file_source,
)
from ..sources import is_url, redact

__all__ = [
    "GROUP_OVER",
    "Failure",
    "FailureGroup",
    "TensorCheck",
    "TensorStats",
    "VerifyReport",
    "verify",
]

_CHUNK = 16 << 20
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Failure:
    """One rule that does not hold.

    Attributes:
        subject: the tensor (or, for a checkpoint, the shard or the index) it concerns.
        rule: ``digest``, ``truncated``, ``unreadable``, ``missing-shard``,
            ``unlisted-tensor``, ``misplaced-tensor``, ``duplicate-tensor``,
            ``missing-tensor``, ``total-size``, ``uncovered``, ``nan``, ``inf`` or ``bool``.
        message: what is wrong, in a sentence.
    """

    subject: str
    rule: str
    message: str


GROUP_OVER = 3
"""A rule failing for more subjects than this is reported as one :class:`FailureGroup`."""

# what a group of failures of each rule says, after its count
_GROUP_TEXT = {
    "truncated": ("tensor", "lie past the end of the file"),
    "digest": ("tensor", "do not match the digests the file stores"),
    "unreadable": ("tensor", "cannot be read"),
    "missing-shard": ("shard", "are missing"),
    "unlisted-tensor": ("tensor", "are in a shard but not in the index"),
    "misplaced-tensor": ("tensor", "are not in the shard the index names"),
    "duplicate-tensor": ("tensor", "are in more than one shard"),
    "missing-tensor": ("tensor", "the index lists are in no shard"),
    "total-size": ("subject", "have a wrong metadata.total_size"),
    "uncovered": ("tensor", "are not covered by a digest the file stores"),
    "nan": ("tensor", "hold NaN values"),
    "inf": ("tensor", "hold infinite values"),
    "bool": ("BOOL tensor", "hold bytes other than 0 and 1"),
}


@dataclass(frozen=True)
class FailureGroup:
    """The failures of one rule, when there are more than :data:`GROUP_OVER` of them:
    reported as one line (``89 tensors lie past the end of the file (first: ..., last:
    ...)``) rather than one line each; every failure stays in :attr:`failures`.

    Example:
        >>> cut = tuple(Failure(f"t{i}", "truncated", "cut") for i in range(5))
        >>> FailureGroup("truncated", cut).summary
        '5 tensors lie past the end of the file (first: t0, last: t4)'
    """

    rule: str
    failures: tuple[Failure, ...]

    @property
    def first(self) -> Failure:
        """The group's first failure, in the order they were found (file order)."""
        return self.failures[0]

    @property
    def last(self) -> Failure:
        """The group's last failure."""
        return self.failures[-1]

    @property
    def summary(self) -> str:
        """The group in one sentence: how many, what fails, the first and last subject."""
        noun, verb = _GROUP_TEXT.get(self.rule, ("subject", f"fail rule {self.rule}"))
        if self.rule == "unreadable" and all(
            f.message.startswith(f"shard {f.subject}:") for f in self.failures
        ):
            noun = "shard"  # a checkpoint's shards that cannot be opened
        n = len(self.failures)
        return f"{n:,} {noun}s {verb} (first: {self.first.subject}, last: {self.last.subject})"


@dataclass(frozen=True)
class TensorStats:
    """Value counts of one float or bool tensor, from a deep verification."""

    name: str
    nan: int = 0
    inf: int = 0
    bad_bool: int = 0


@dataclass(frozen=True)
class TensorCheck:
    """What verify compared for one tensor it read.

    ``checked`` holds ``structure`` (the header's rules held when the file was opened, and
    every stored byte of the tensor was read: nothing is cut short), ``digest`` (a digest
    the file stores for it was compared with its bytes: zTensor's crc32c/sha256/xxh3, a v2
    shard's whole-file digest, an npz member's zip CRC-32) and, with ``deep``, ``values``
    (NaN/Inf counted in float tensors, BOOL bytes checked). A file without digests
    (safetensors without ``checksum=``, GGUF, npy, PyTorch pickles) can only be
    structurally valid and readable: a flipped bit in its data passes unless ``deep`` finds
    a value no tensor should hold. ``empty``: the tensor
    has no elements, so no byte of it could change unseen (it needs no digest).
    """

    name: str
    checked: tuple[str, ...]
    empty: bool = False


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes:
        path: the file or checkpoint verified, as messages show it: a URL without its
            credentials, query string or fragment (:func:`~tensorfile.sources.redact`).
        format: its format (``safetensors``, ``ztensor``, ``gguf``...; ``safetensors`` for a
            sharded checkpoint too, as ``inspect`` says).
        tensors_checked: tensors whose bytes were read.
        failures: every rule that does not hold, in file order.
        deep: whether values were read.
        stats: per-tensor NaN/Inf/BOOL counts (deep only; tensors with something to count).
        shards: the shard files a sharded checkpoint's index names (0: one file).
        strict: whether a tensor no stored digest covers fails even in a file that stores
            no digests at all (see the module docstring).
    """

    path: str
    format: str
    tensors_checked: int
    failures: tuple[Failure, ...] = ()
    deep: bool = False
    stats: tuple[TensorStats, ...] = field(default=())
    checks: tuple[TensorCheck, ...] = field(default=())
    """What was compared for each tensor read (see :class:`TensorCheck`)."""
    shards: int = 0
    strict: bool = False

    @property
    def digests_checked(self) -> int:
        """Tensors whose stored digest was compared with their bytes."""
        return sum("digest" in c.checked for c in self.checks)

    @property
    def uncovered(self) -> tuple[str, ...]:
        """The tensors read whose bytes no stored digest covers, in the order read (every
        tensor of a file that stores no digests, but those with no elements).

        Example:
            >>> a = TensorCheck("a", ("structure", "digest"))
            >>> b = TensorCheck("b", ("structure",))
            >>> VerifyReport("m.safetensors", "safetensors", 2, checks=(a, b)).uncovered
            ('b',)
        """
        return tuple(c.name for c in self.checks if "digest" not in c.checked and not c.empty)

    @property
    def ok(self) -> bool:
        """True when every rule holds."""
        return not self.failures

    def grouped(self, over: int = GROUP_OVER) -> list[Failure | FailureGroup]:
        """The failures as they are best reported: a rule failing for more than ``over``
        subjects as one :class:`FailureGroup` (where its first failure was), the others
        one by one, in the order they were found.

        Example:
            >>> fs = [Failure(f"t{i}", "digest", "mismatch") for i in range(4)]
            >>> r = VerifyReport("m.zt", "ztensor", 4, (*fs, Failure("x", "nan", "1 NaN")))
            >>> [f.summary if isinstance(f, FailureGroup) else f.subject for f in r.grouped()]
            ['4 tensors do not match the digests the file stores (first: t0, last: t3)', 'x']
        """
        by_rule: dict[str, list[Failure]] = {}
        for f in self.failures:
            by_rule.setdefault(f.rule, []).append(f)
        out: list[Failure | FailureGroup] = []
        for f in self.failures:
            same = by_rule[f.rule]
            if len(same) <= over:
                out.append(f)
            elif f is same[0]:
                out.append(FailureGroup(f.rule, tuple(same)))
        return out


class _Run:
    """The running state of one verification."""

    def __init__(self, deep: bool, progress: Progress | None) -> None:
        self.deep = deep
        self.progress = progress
        self.failures: list[Failure] = []
        self.stats: list[TensorStats] = []
        self.checks: list[TensorCheck] = []
        self.checked = 0
        self.done = 0
        self.total = 0

    def fail(self, subject: str, rule: str, message: str) -> None:
        self.failures.append(Failure(subject, rule, message))

    def tensors(self, reader: Reader, names: list[str], where: str) -> None:
        """Read every named tensor of ``reader``, recording what fails."""
        for name in names:
            try:
                info = reader.info(name)
                if info.layout == "quantized" and reader.format == "gguf":  # stored blocks
                    _read_stored(reader, name)
                    self.checked += 1
                    self.checks.append(TensorCheck(name, ("structure",), info.numel == 0))
                    continue
                value = reader.get_tensor(name)
            except ChecksumError as exc:
                self.fail(name, "digest", _where(where, exc))
                continue
            except (SourceError, FormatError) as exc:
                rule = "truncated" if _short_read(exc) else "unreadable"
                self.fail(name, rule, _where(where, exc))
                continue
            self.checked += 1
            digest = reader.checks_digest(name)
            kinds = (
                "structure",
                *(("digest",) if digest else ()),
                *(("values",) if self.deep else ()),
            )
            self.checks.append(TensorCheck(name, kinds, info.numel == 0))
            array = value if isinstance(value, np.ndarray) else None
            if array is None and hasattr(value, "to_dense"):
                array = getattr(value, "values", None)  # sparse: the stored values
            if self.deep and isinstance(array, np.ndarray):
                self._values(name, array)
            if self.progress is not None:
                self.progress(self.checked, max(self.total, self.checked))

    def _values(self, name: str, array: np.ndarray[Any, Any]) -> None:
        flat = array.reshape(-1)
        step = max(1, _CHUNK // max(1, flat.itemsize))
        nan = inf = bad = 0
        kind = _kind(flat.dtype)
        if kind is None:
            return
        for start in range(0, flat.size, step):
            piece = flat[start : start + step]
            if kind == "bool":
                bad += int(np.count_nonzero(piece.view(np.uint8) > 1))
                continue
            as32 = piece.astype(np.float64) if kind == "float-ml" else piece
            nan += int(np.count_nonzero(np.isnan(as32)))
            inf += int(np.count_nonzero(np.isinf(as32)))
        if nan or inf or bad:
            self.stats.append(TensorStats(name, nan, inf, bad))
        if nan:
            self.fail(name, "nan", f"{nan:,} of {flat.size:,} values are NaN")
        if inf:
            self.fail(name, "inf", f"{inf:,} of {flat.size:,} values are infinite")
        if bad:
            self.fail(name, "bool", f"{bad:,} BOOL bytes are neither 0 nor 1")


def _read_stored(reader: Reader, name: str) -> None:
    """Read a tensor's stored bytes a chunk at a time (GGUF's quantized blocks, which no
    array holds): a file cut short fails here."""
    for comp in reader.info(name).components.values():
        rng = comp.range
        for pos in range(rng.start, rng.stop, _CHUNK):
            reader.source.read(pos, min(_CHUNK, rng.stop - pos))


def _where(where: str, exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(where) else f"{where}: {text}"


def _kind(dtype: np.dtype[Any]) -> str | None:
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "fc":
        return "float"
    if dtype.kind == "V" or dtype.name in (
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn",
        "float6_e2m3fn",
        "float6_e3m2fn",
    ):
        return "float-ml"  # ml_dtypes floats: numpy's isnan needs a cast
    return None


def _short_read(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(
        w in text for w in ("truncat", "short", "past the end", "beyond", "ends at", "shorter")
    )


def verify(
    path: str | os.PathLike[str],
    *,
    deep: bool = False,
    strict: bool = False,
    progress: Progress | None = None,
    allow_full_download: bool | None = None,
) -> VerifyReport:
    """Check a tensor file, or a sharded checkpoint, against every rule it can be held to.

    Raises the reader's error (a :class:`~tensorfile.errors.TensorFileError`) when the file
    cannot be opened at all: a missing file, bytes of no format, an invalid header. Anything
    found after that is a :class:`Failure` in the report. A tensor no stored digest covers
    is a failure (rule ``uncovered``) when the file's digests cover others, and with
    ``strict=True`` always (see the module docstring).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.ops import verify
        >>> from tensorfile.safetensors.numpy import save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> save_file({"w": np.zeros(4, np.float32)}, path)
        >>> verify(path).tensors_checked
        1
    """
    target = os.fspath(path)
    if not isinstance(target, str) or not target:
        raise InvalidArgumentError(f"expected a path or URL, got {target!r}")
    run = _Run(deep, progress)
    target = local_target(target)  # a file:// URL keeps the local rules
    index = target if is_url(target) and is_index(target) else None
    if index is None and not is_url(target):
        index = index_path(target)
    shards = 0
    if index is not None:
        ck = locate_checkpoint(index, allow_full_download=allow_full_download)
        _checkpoint(run, ck)
        fmt, shards = "safetensors", len(set(ck.weight_map.values()))
    else:
        fmt = _single(run, target, allow_full_download)
    _check_coverage(run, strict)
    return VerifyReport(
        redact(target),
        fmt,
        run.checked,
        tuple(run.failures),
        deep,
        tuple(run.stats),
        tuple(run.checks),
        shards,
        strict,
    )


def _check_coverage(run: _Run, strict: bool) -> None:
    """A failure for each tensor read that no stored digest covers, when the file's digests
    cover others (a digest map that leaves a tensor out) or ``strict`` asks for it."""
    names = [c.name for c in run.checks if "digest" not in c.checked and not c.empty]
    covered = sum("digest" in c.checked for c in run.checks)
    if not names or not (covered or strict):
        return
    if covered:
        why = (
            f", though the file's digests cover {covered:,} of the {len(run.checks):,} "
            "tensors read: a changed byte inside a valid value cannot be seen"
        )
    else:
        why = ": the file stores no digests, and strict verification needs one for every tensor"
    for name in names:
        run.fail(name, "uncovered", f"no digest covers {name}{why}")


def _open(
    path: str,
    *,
    local: bool,
    allow_full_download: bool | None = None,
    shard: bool = False,
) -> Reader:
    """A reader of one file: a local path as a local regular file only (a FIFO or device is
    refused before it is opened, never waited on). A checkpoint's ``shard`` is read as
    safetensors whatever its content, as :class:`~tensorfile.formats.checkpoint.ShardedReader`
    reads it (an npz or a pickle named ``*.safetensors`` is an unreadable shard)."""
    source = open_file_source(path, local=local, allow_full_download=allow_full_download)
    try:
        fmt = SAFETENSORS if shard else detect(source)
        return fmt.impl().open_reader(source, verify=True)
    except BaseException:
        source.close()
        raise


def _single(run: _Run, target: str, allow_full_download: bool | None) -> str:
    local = not is_url(target)
    shown = redact(target)  # what a failure's message names (never a URL's credentials)
    try:
        reader = _open(target, local=local, allow_full_download=allow_full_download)
    except IncompleteBufferError as exc:
        if not exc.past_end:
            raise
        for name in exc.past_end:
            run.fail(name, "truncated", _where(shown, exc))
        return "safetensors"
    with reader:
        names = reader.keys()
        run.total = len(names)
        run.tensors(reader, names, shown)
        return reader.format


def _checkpoint(run: _Run, ck: CheckpointIndex) -> None:
    weight_map = ck.weight_map
    shards = sorted(set(weight_map.values()))
    placed: dict[str, list[str]] = {}  # shard -> the tensors the index places in it
    for name, shard in weight_map.items():
        placed.setdefault(shard, []).append(name)
    run.total = len(weight_map)
    held: dict[str, list[str]] = {}
    failed: set[str] = set()  # subjects with a failure: a set, so that checks stay linear
    total = 0
    for shard in shards:
        path = ck.where[shard]
        expected = placed[shard]
        if ck.local and not os.path.exists(path):
            run.fail(
                shard,
                "missing-shard",
                f"shard {shard} is missing; the index places {len(expected):,} "
                f"tensor{'' if len(expected) == 1 else 's'} in it "
                f"({', '.join(expected[:3])}{', ...' if len(expected) > 3 else ''})",
            )
            failed.add(shard)
            continue
        try:
            allow = ck.allow_full_download
            reader = _open(path, local=ck.local, allow_full_download=allow, shard=True)
        except TensorFileError as exc:
            truncated = exc.past_end if isinstance(exc, IncompleteBufferError) else ()
            rule = "truncated" if truncated else "unreadable"
            for name in truncated or (shard,):
                run.fail(name, rule, f"shard {shard}: {exc}")
                failed.add(name)
            failed.add(shard)
            continue
        with reader:
            names = reader.keys()
            for name in names:
                held.setdefault(name, []).append(shard)
                total += reader.info(name).nbytes
            for name in names:
                if name not in weight_map:
                    run.fail(
                        name,
                        "unlisted-tensor",
                        f"shard {shard} holds {name}, which the index does not list",
                    )
                elif weight_map[name] != shard:
                    run.fail(
                        name,
                        "misplaced-tensor",
                        f"the index places {name} in "
                        f"{weight_map[name]}, but shard {shard} holds it",
                    )
            run.tensors(reader, [n for n in names if weight_map.get(n) == shard], f"shard {shard}")
    for name, in_shards in held.items():
        if len(in_shards) > 1:
            run.fail(
                name,
                "duplicate-tensor",
                f"{name} is in {len(in_shards)} shards: {', '.join(in_shards)}",
            )
    failed.update(f.subject for f in run.failures)
    for name, shard in weight_map.items():
        if name not in held and name not in failed and shard not in failed:
            run.fail(
                name,
                "missing-tensor",
                f"the index places {name} in {shard}, which does not hold it",
            )
    _check_total_size(run, ck, total, missing=any(f.rule == "missing-shard" for f in run.failures))


def _check_total_size(run: _Run, ck: CheckpointIndex, total: int, *, missing: bool) -> None:
    """``metadata.total_size`` against the tensors' bytes: a number that is not a finite
    whole number of bytes is a failure of its own (JSON allows ``1e400``, ``NaN``)."""
    if "total_size" not in ck.metadata or missing:
        return
    value = ck.metadata["total_size"]
    subject = os.path.basename(ck.shown)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return  # not a number: huggingface_hub never writes one, and nothing claims a size
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        run.fail(subject, "total-size", f"metadata.total_size is {value!r}, not a byte count")
        return
    claimed = int(value)
    if claimed != total:
        run.fail(
            subject,
            "total-size",
            f"metadata.total_size is {claimed:,} bytes; the tensors take {total:,}",
        )
