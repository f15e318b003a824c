"""Datasets of safetensors shards (the layout of the Spark spec), without Spark.

* :func:`write` a pyarrow Table / RecordBatches, a pandas DataFrame or a dict of numpy
  arrays, in batch mode (``batch_size``) or key-value mode (``name_col``), with the same
  options as the Spark data source; shards, ``dataset_manifest.json`` and, with
  ``generate_index=True``, ``_tensor_index.parquet``.
* :func:`from_parquet` and :func:`from_hf`: a parquet file or a Hugging Face ``datasets``
  dataset (or its ``save_to_disk`` folder) written as a dataset, streaming, in bounded memory.
* :func:`open` a dataset: schema, ``len``, random access, iteration over samples or batches,
  ``to_torch()``.
* :func:`mix` several datasets with weights: a :class:`Mixture`, fed by ``to_torch()`` in an
  order of the seed, the epoch and the datasets only, resumable exactly.
* :func:`gc`: remove what killed writers left (shards no manifest lists, staging folders),
  safely while others write (``tensorfile dataset gc``).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "kv")
    >>> _ = dataset.write({"name": ["a", "b"], "v": np.ones((2, 3), np.float32)}, out,
    ...                   name_col="name")
    >>> [s["key"] for s in dataset.open(out)]
    ['a', 'b']
"""

from .feed.mixture import Mixture, mix
from .layout.manifest import Manifest, ShardEntry, read_manifest
from .reading.reader import Dataset, open
from .writing.gc import Collected, Leftover, gc
from .writing.hf_input import from_hf
from .writing.job import write
from .writing.options import WriteOptions, parse_options
from .writing.parquet import from_parquet
from .writing.writer import TaskResult, abort, commit, write_task

__all__ = [
    "Collected",
    "Dataset",
    "Leftover",
    "Manifest",
    "Mixture",
    "ShardEntry",
    "TaskResult",
    "WriteOptions",
    "abort",
    "commit",
    "from_hf",
    "from_parquet",
    "gc",
    "mix",
    "open",
    "parse_options",
    "read_manifest",
    "write",
    "write_task",
]
