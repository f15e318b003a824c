"""Read a dataset of safetensors shards: its schema, its length, samples and batches.

The manifest says which shards belong to the dataset (files outside it are ignored) and how
many samples each holds; without a manifest the folder's ``*.safetensors`` files are read in
name order. Batch-mode datasets give one sample per real row of the batch tensors: the zero
rows of a shard padded to a full batch (``tail_strategy="pad"``; the manifest's
``samples_count`` counts them, its ``tensorfile.real_samples`` says how many rows are real)
are not samples, so ``len``, indexing, iteration, batches and ``to_torch()`` never see them.
Key-value datasets give one sample per key, as ``{"key": ..., column: tensor}``.

Nothing read is trusted: the manifest is checked when the dataset is opened, each shard's
header against the manifest when the shard is first used
(:func:`~tensorfile.dataset.reading.samples.open_shard`), and the index against the manifest and the
headers: a stale index is set aside and the shard headers are searched instead
(:mod:`tensorfile.dataset.layout.index`).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(6, dtype=np.int32).reshape(3, 2)}, out, batch_size=2)
    >>> ds = dataset.open(out)
    >>> len(ds), ds[2]["x"].tolist(), [b["x"].shape for b in ds.batches(2)]
    (3, [4, 5], [(2, 2), (1, 2)])
    >>> _ = dataset.write({"x": np.arange(6, dtype=np.int32).reshape(3, 2)}, out, batch_size=2,
    ...                   tail_strategy="pad")
    >>> ds = dataset.open(out)
    >>> len(ds), ds.manifest.total_samples, [s["x"].tolist() for s in ds][-1]
    (3, 4, [4, 5])
    >>> kv = os.path.join(tempfile.mkdtemp(), "kv")
    >>> _ = dataset.write({"id": ["a", "b"], "v": np.eye(2, dtype=np.float32)}, kv,
    ...                   name_col="id", generate_index=True)
    >>> dataset.open(kv).get("b")["v"].tolist()  # the index says which shard holds "b"
    [0.0, 1.0]
"""

from __future__ import annotations

import bisect
import hashlib
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...core.errors import InvalidArgumentError, InvalidTypeError, TensorNotFoundError
from ...core.extras import needing
from ...core.reader import Reader
from ...sources import path_text
from ..cache.shardcache import CacheBypass, CacheConfig, ShardCache, bypassed
from ..feed.options import FeedOptions
from ..layout.index import read_index
from ..layout.manifest import Manifest, ShardEntry, kv_name, load_manifest
from ..layout.storage import Location, Store, storage_for
from ._stream import Stream, predownload_for
from .samples import kv_sample, open_shard, shard_samples

__all__ = ["Dataset", "open"]

NDArray = np.ndarray[Any, Any]


class Dataset:
    """A dataset folder, opened for reading (see :func:`open`)."""

    def __init__(
        self,
        path: Location,
        manifest: Manifest,
        *,
        cache_dir: Any = False,
        cache_limit: int | str | None = None,
        predownload: int | None = None,
    ) -> None:
        self.storage = storage_for(path)
        self.path = self.storage.url()
        self.manifest = manifest
        self._stream: Stream | None = None
        config = CacheConfig.resolve(cache_dir, cache_limit)
        cached = config is not None and not self.storage.is_local  # local: read in place
        self.predownload = predownload_for(predownload, manifest, cached=cached)
        """Samples ahead each worker downloads in the background (:meth:`prefetch`)."""
        if config is not None and cached:
            digest = hashlib.sha256(manifest.to_bytes()).hexdigest()
            try:
                cache = ShardCache(config, self.storage, digest)
                cache.prepare()
            except CacheBypass as exc:  # (another user's folder, no location: no cache)
                bypassed(self.path, exc)
            else:
                schema = manifest.sample_schema()
                self._stream = Stream(cache, manifest, schema, self.predownload)
        self._starts = [0]
        for s in manifest.shards:
            self._starts.append(self._starts[-1] + s.samples)  # real rows only
        self._columns = manifest.tensor_columns()
        self._sample_schema = manifest.sample_schema()
        self._readers: dict[str, Reader] = {}
        self._keys: dict[str, list[str]] = {}  # per shard checked: its KV keys
        self._index: dict[str, str] | None = None  # tensor_key -> shard, from the index file
        self._index_read = False
        self._by_key: dict[str, str] | None = None  # key -> shard, from the shard headers
        self._by_path = {s.shard_path: s for s in manifest.shards}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its store (with its storage options), manifest and cache settings: no
        open file, no thread (DataLoader spawn workers, Spark tasks)."""
        c = self.cache
        cache = (c.config.folder, c.config.limit) if c is not None else (False, None)
        return (_restore, (type(self), self.storage, self.manifest, *cache, self.predownload))

    @property
    def cache(self) -> ShardCache | None:
        """The shard cache of a remote dataset opened with ``cache_dir`` (else None)."""
        return self._stream.cache if self._stream is not None else None

    # -- description --------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``batch`` or ``kv``."""
        return self.manifest.mode

    @property
    def shards(self) -> list[ShardEntry]:
        """The shard files, in manifest order."""
        return list(self.manifest.shards)

    @property
    def columns(self) -> list[str]:
        """The tensor columns."""
        return list(self._columns)

    @property
    def schema(self) -> dict[str, dict[str, Any]]:
        """Per column: dtype and the shape of one sample."""
        return {c: {**v, "shape": list(v["shape"])} for c, v in self._sample_schema.items()}

    def __len__(self) -> int:
        """The samples: real rows only (padding rows are not counted)."""
        return self._starts[-1]

    # -- access ---------------------------------------------------------------------------

    def _reader(self, shard: ShardEntry) -> Reader:
        """The open reader of ``shard``, its header checked against the manifest (from the
        shard cache, downloaded first, when the dataset has one)."""
        r = self._readers.get(shard.shard_path)
        if r is None:
            if len(self._readers) >= 16:
                self._drop(next(iter(self._readers)))
            if self._stream is not None:
                r, keys = self._stream.open(shard)
            else:
                r, keys = open_shard(self.storage, shard, self.manifest, self._sample_schema)
            self._readers[shard.shard_path] = r
            self._keys[shard.shard_path] = keys
        return r

    def _drop(self, shard_path: str) -> None:
        """Close the reader of ``shard_path`` (and release its cached file)."""
        r = self._readers.pop(shard_path, None)
        if r is not None:
            r.close()
        if self._stream is not None:
            self._stream.release(shard_path)

    def prefetch(self, shards: Sequence[ShardEntry]) -> None:
        """Start downloading, in the background, the shards a reader will read next (in that
        order), up to :attr:`predownload` samples' worth of them, into the shard cache. A
        shard already cached, queued or downloading is not fetched again; a shard of this
        window is not evicted by this process' downloads if anything else can go. Without a
        shard cache (a local dataset, or no ``cache_dir``) nothing happens. Safe after
        ``fork``: a DataLoader worker starts its own threads.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(4, dtype=np.int8)}, out, batch_size=2)
            >>> ds = dataset.open(out, cache_dir=tempfile.mkdtemp())  # local: no cache
            >>> ds.prefetch(ds.shards), ds.predownload, ds.cache
            (None, 0, None)
        """
        if self._stream is not None:
            self._stream.prefetch(shards)

    def _locate(self, index: int) -> tuple[ShardEntry, int]:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"sample {index} is out of range for a dataset of {n}")
        k = bisect.bisect_right(self._starts, index) - 1
        return self.manifest.shards[k], index - self._starts[k]

    def _shard_keys(self, shard: ShardEntry) -> list[str]:
        """The KV keys of ``shard`` (checked against the manifest when it was opened)."""
        self._reader(shard)
        return self._keys[shard.shard_path]

    def __getitem__(self, index: int | str) -> dict[str, Any]:
        """Sample ``index``: ``{column: array}`` (and ``"key"`` in KV mode).

        An integer is a position (negative counts from the end), in either mode. On a
        key-value dataset a string is a key: ``ds["doc7"]`` is ``ds.get("doc7")``, and a key
        the dataset does not hold raises :class:`~tensorfile.errors.TensorNotFoundError`
        (also a ``KeyError``). A batch dataset has no keys: a string, like any index that is
        not an integer (a bool, a float, None), raises
        :class:`~tensorfile.errors.InvalidTypeError` (also a ``TypeError``).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> kv = os.path.join(tempfile.mkdtemp(), "kv")
            >>> _ = dataset.write({"id": ["doc7", "doc8"], "v": np.eye(2, dtype=np.float32)},
            ...                   kv, name_col="id")
            >>> ds = dataset.open(kv)
            >>> ds["doc7"]["v"].tolist(), ds[-1]["key"], "doc8" in ds, "doc9" in ds
            ([1.0, 0.0], 'doc8', True, False)
            >>> try:
            ...     ds["doc9"]
            ... except KeyError as exc:
            ...     print(type(exc).__name__)
            TensorNotFoundError
        """
        if isinstance(index, str):
            if self.mode == "kv":
                return self.get(index)
            raise InvalidTypeError(
                f"{self.path} is a batch dataset: its samples are indexed by position, an "
                f"integer (ds[0] to ds[{len(self) - 1}]), not by a key like {index!r}; keys "
                "are for key-value datasets (written with name_col)"
            )
        shard, row = self._locate(_as_int(index, "a sample index"))
        reader = self._reader(shard)
        if self.mode == "batch":
            return {c: reader.read_slice(c, row) for c in self._columns}
        return self._kv_sample(reader, self._shard_keys(shard)[row])

    def _kv_sample(self, reader: Reader, key: str) -> dict[str, Any]:
        """``{"key": key, column: tensor}`` from the shard ``reader``."""
        return kv_sample(reader, key, self._columns, self.manifest.kv_separator)

    def get(self, key: str) -> dict[str, Any]:
        """The sample of KV key ``key``. With ``_tensor_index.parquet`` the shard is found from
        the index (and confirmed by its header); without one, when the index lacks the key or
        disagrees with the manifest or a header, from the shards' headers. A key the dataset
        does not hold raises :class:`~tensorfile.errors.TensorNotFoundError` (also a
        ``KeyError``); a corrupt index a :class:`~tensorfile.errors.FormatError`."""
        if self.mode != "kv":
            raise InvalidArgumentError("get(key) is for key-value datasets; use ds[i]")
        if not isinstance(key, str):
            raise InvalidTypeError(f"a key is a string, got {type(key).__name__}")
        shard = self._shard_of_key(key)
        if shard is None:
            raise TensorNotFoundError(f"{self.path}: there is no sample with key {key!r}")
        return self._kv_sample(self._reader(shard), key)

    def __contains__(self, key: object) -> bool:
        """Whether a key-value dataset holds a sample of key ``key`` (found as :meth:`get`
        finds it). Membership is by key: on a batch dataset, or for a key that is not a
        string, it raises :class:`~tensorfile.errors.InvalidTypeError` rather than search
        the samples for one equal to ``key``."""
        if self.mode != "kv":
            raise InvalidTypeError(
                f"{self.path} is a batch dataset: it has no keys to test with 'in' "
                "(its samples are indexed by position)"
            )
        if not isinstance(key, str):
            raise InvalidTypeError(f"a key is a string, got {type(key).__name__}")
        return self._shard_of_key(key) is not None

    def _shard_of_key(self, key: str) -> ShardEntry | None:
        """The shard holding ``key``: the index's answer when the shard's header confirms it;
        on a miss, or when the index is stale or wrong, the answer of the shard headers
        (all read once, then kept)."""
        by_path = self._by_path
        if self._by_key is None:
            if not self._index_read:
                self._index = read_index(self.storage, self.manifest)
                self._index_read = True
            if self._index is not None:
                names = [kv_name(key, self.manifest.kv_separator, c) for c in self._columns]
                files = {self._index[n] for n in names if n in self._index}
                if len(files) == 1:
                    shard = by_path[files.pop()]
                    if names and names[0] in self._reader(shard):  # a checked shard: all or none
                        return shard
            self._by_key = {}
            for shard in self.manifest.shards:
                for k in self._shard_keys(shard):
                    self._by_key.setdefault(k, shard.shard_path)
        path = self._by_key.get(key)
        return None if path is None else by_path[path]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for shard in self.manifest.shards:
            yield from self.shard_samples(shard)

    def shard_samples(self, shard: ShardEntry) -> Iterator[dict[str, Any]]:
        """The samples of one of :attr:`shards`, in order (what iterating the dataset gives,
        one shard at a time)."""
        reader = self._reader(shard)
        keys = self._shard_keys(shard) if self.mode == "kv" else None
        yield from shard_samples(reader, shard, self.manifest, keys=keys)

    def batches(self, batch_size: int) -> Iterator[dict[str, Any]]:
        """Samples stacked ``batch_size`` at a time (the last batch may be short)."""
        batch_size = _as_int(batch_size, "batch_size")
        if batch_size <= 0:
            raise InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
        pending: list[dict[str, Any]] = []
        for sample in self:
            pending.append(sample)
            if len(pending) == batch_size:
                yield _stack(pending)
                pending = []
        if pending:
            yield _stack(pending)

    def shard_arrays(self, shard: ShardEntry) -> dict[str, NDArray]:
        """The real samples of one of :attr:`shards` as ``{column: array}``, each array's
        first axis running over the shard's samples (padding rows left out), for readers
        that gather batches with numpy indexing (:mod:`tensorfile.dataset.torch`).

        A batch shard's arrays are read-only views over the mapped file (the local file, or
        the shard cache's copy of a remote one): nothing is read until touched. Where the
        file cannot be mapped (a remote dataset without a shard cache) or a dtype is
        bit-packed (F4, F6), they are read-only copies. A key-value shard's tensors are
        stacked (a copy) in key order, and ``"key"`` holds the keys.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(6, dtype=np.int16).reshape(3, 2)}, out,
            ...                   batch_size=2, tail_strategy="pad")
            >>> ds = dataset.open(out)
            >>> a = ds.shard_arrays(ds.shards[1])
            >>> a["x"].tolist(), a["x"].flags.writeable
            ([[4, 5]], False)
        """
        from ...core import dtypes
        from ...core.errors import UnsupportedError

        reader = self._reader(shard)
        n = shard.samples
        out: dict[str, NDArray] = {}
        if self.mode == "batch":
            for c in self._columns:
                try:
                    arr = reader.view(c)
                except UnsupportedError:  # not mappable, or bit-packed: an owned copy
                    arr = reader.get_tensor(c)
                    arr.flags.writeable = False
                out[c] = arr[:n]
            return out
        keys = self._shard_keys(shard)[:n]
        sep = self.manifest.kv_separator
        for c in self._columns:
            want = self._sample_schema[c]
            if keys:
                arr = np.stack([reader.get_tensor(kv_name(k, sep, c)) for k in keys])
            else:
                dt = dtypes.from_safetensors(want["dtype"]).numpy
                arr = np.empty((0, *want["shape"]), dtype=dt)
            arr.flags.writeable = False
            out[c] = arr
        out["key"] = np.array(keys, dtype=object)
        return out

    def to_torch(
        self,
        *,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        even: bool | str = True,
        batch_size: int | None = None,
        per_sample: bool | None = None,
        drop_last: bool = False,
        partitions: int = 64,
        shuffle_block: int = 1 << 18,
        map_style: bool = False,
    ) -> Any:
        """The samples for PyTorch, as torch tensors of the matching dtype (BF16 as
        ``torch.bfloat16``). By default a ``torch.utils.data.IterableDataset``
        (:class:`~tensorfile.dataset.torch.TorchIterable`): each epoch's order is a function
        of the seed, the epoch and the dataset only (:mod:`tensorfile.dataset.order`), split
        across distributed ranks (``torch.distributed``'s rank and world size unless given)
        and DataLoader workers, every sample read once per epoch, resumable mid-epoch
        (``state_dict``/``load_state_dict``, also with another world size). With
        ``batch_size=N`` it yields ready batches for ``DataLoader(it, batch_size=None)``;
        without, single samples (``per_sample=True`` with ``batch_size`` as the DataLoader's
        batch size keeps the same order). ``even=True`` gives every rank the same number of
        samples by dropping the ``len % world_size`` surplus, ``even="pad"`` by repeating
        samples (:mod:`tensorfile.dataset.torch` says exactly how). ``map_style=True`` gives a
        map-style dataset instead (``len`` and ``[i]``, for samplers and the default
        collate). The other keywords are checked here, once, as one
        :class:`~tensorfile.dataset.torch.FeedOptions` (the feed's ``options``).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(6, dtype=np.float32)}, out, batch_size=2)
            >>> it = dataset.open(out).to_torch(shuffle=True, seed=3, rank=0, world_size=2)
            >>> it.set_epoch(1)
            >>> len(it), len(list(it))
            (3, 3)
            >>> [b["x"].shape for b in dataset.open(out).to_torch(batch_size=4)]
            [torch.Size([4]), torch.Size([2])]
        """
        options = FeedOptions(
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            even=even,
            batch_size=batch_size,
            per_sample=per_sample,
            drop_last=drop_last,
            partitions=partitions,
            shuffle_block=shuffle_block,
        )
        with needing("Dataset.to_torch()", extra="torch"):
            from ..feed.torch import TorchIterable, TorchMap

        if map_style:
            return TorchMap(self)
        return TorchIterable(self, options)

    def to_arrow(self, columns: list[str] | None = None, *, low_precision: str = "float32") -> Any:
        """Every sample as a ``pyarrow.Table``; BF16/F8 widened to float32 (or, with
        ``low_precision="binary"``, kept as bytes): :mod:`tensorfile.dataset.arrow`."""
        with needing("Dataset.to_arrow()", extra="dataset"):
            from ..loaders.arrow import to_arrow

        return to_arrow(self, columns, low_precision=low_precision)

    def iter_arrow(
        self, batch_size: int, columns: list[str] | None = None, *, low_precision: str = "float32"
    ) -> Iterator[Any]:
        """``pyarrow.RecordBatch``es of ``batch_size`` samples, streamed shard by shard."""
        with needing("Dataset.iter_arrow()", extra="dataset"):
            from ..loaders.arrow import iter_arrow

        return iter_arrow(self, batch_size, columns, low_precision=low_precision)

    def to_hf(
        self,
        *,
        streaming: bool = False,
        columns: list[str] | None = None,
        cache_dir: str | None = None,
    ) -> Any:
        """A Hugging Face ``datasets.Dataset`` (``IterableDataset`` with ``streaming``) with
        features matching the schema, written into ``cache_dir`` (default: the ``datasets``
        cache): :mod:`tensorfile.dataset.hf`."""
        with needing("Dataset.to_hf()", extra="hf"):
            from ..loaders.hf import to_hf

            return to_hf(self, streaming=streaming, columns=columns, cache_dir=cache_dir)

    def to_ray(self, columns: list[str] | None = None, **options: Any) -> Any:
        """A ``ray.data.Dataset``, a read task per group of shards:
        :mod:`tensorfile.dataset.ray`."""
        with needing("Dataset.to_ray()", extra="ray"):
            from ..loaders.ray import to_ray

            return to_ray(self, columns, **options)

    def to_dask(self, columns: list[str] | None = None) -> dict[str, Any]:
        """``{column: dask.array}``, a chunk per shard, read lazily:
        :mod:`tensorfile.dataset.dask`."""
        with needing("Dataset.to_dask()", extra="dask"):
            from ..loaders.dask import to_dask

            return to_dask(self, columns)

    def close(self) -> None:
        """Close the open shard files (and stop starting background downloads)."""
        for path in list(self._readers):
            self._drop(path)
        if self._stream is not None:
            self._stream.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<tensorfile.dataset {self.mode} {self.path!r}: {len(self)} samples, "
            f"{len(self.manifest.shards)} shards, columns {self.columns}>"
        )


def _as_int(value: Any, what: str) -> int:
    """``value`` as an int (a Python or numpy integer, not a bool); anything else raises
    :class:`~tensorfile.errors.InvalidTypeError` (an ``InvalidArgumentError`` and a
    ``TypeError``)."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidTypeError(f"{what} must be an integer, got {type(value).__name__}") from None


def _stack(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        out[key] = values if key == "key" else np.stack(values)
    return out


def _restore(
    cls: type[Dataset],
    store: Store,
    manifest: Manifest,
    cache_dir: str | bool,
    cache_limit: int | None,
    predownload: int,
) -> Dataset:
    return cls(
        store, manifest, cache_dir=cache_dir, cache_limit=cache_limit, predownload=predownload
    )


def open(
    path: Location,
    *,
    storage_options: dict[str, Any] | None = None,
    cache_dir: Any = None,
    cache_limit: int | str | None = None,
    predownload: int | None = None,
) -> Dataset:
    """Open the dataset at ``path``: a local folder, a ``file://`` URL or any fsspec URL
    (``s3://bucket/ds``, with ``storage_options`` for its filesystem; credentials fsspec finds
    in the environment work too). Manifest-aware; the index is not needed.

    A remote dataset with a ``cache_dir`` (default: ``$TENSORFILE_CACHE_DIR`` when it is
    set; ``False`` turns it off) is read through a shard cache
    (:mod:`tensorfile.dataset.cache.shardcache`): each shard is downloaded whole (parallel
    ranged GETs) into the folder the first time it is needed and read from there,
    memory-mapped; the folder is shared by every process of the node and holds at most
    ``cache_limit`` bytes (an int, or ``"20GB"``, ``"512MiB"``; default
    ``$TENSORFILE_CACHE_SIZE``, else 20 GiB) of shards and cached chunks of remote files
    together, least recently used entries evicted. ``predownload``: samples ahead each
    worker downloads in the background (:meth:`Dataset.prefetch`; default the samples of
    the two largest shards). A local dataset is read in place: ``cache_dir`` is ignored.
    """
    if not isinstance(path, Store):
        path = path_text(path)
    store = storage_for(path, storage_options)
    return Dataset(
        store,
        load_manifest(store, strict=True),
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        predownload=predownload,
    )
