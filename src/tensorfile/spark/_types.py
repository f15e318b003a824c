"""The Spark schema of a dataset: which Spark type each safetensors dtype reads as, the row
schema of batch and KV datasets, and the tensor struct of ``layout=files``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from ..core.errors import UnsupportedError
from ..dataset.layout.manifest import Manifest

__all__ = ["SPARK_TYPES", "TENSOR_STRUCT", "key_field", "row_schema", "spark_type"]

# safetensors dtype -> (Spark element type, numpy type the values are read as)
SPARK_TYPES: dict[str, tuple[DataType, Any]] = {
    "F16": (FloatType(), np.float32),
    "BF16": (FloatType(), np.float32),
    "F32": (FloatType(), np.float32),
    "F64": (DoubleType(), np.float64),
    "I8": (ByteType(), np.int8),
    "U8": (ShortType(), np.int16),
    "I16": (ShortType(), np.int16),
    "U16": (IntegerType(), np.int32),
    "I32": (IntegerType(), np.int32),
    "U32": (LongType(), np.int64),
    "I64": (LongType(), np.int64),
    "U64": (LongType(), np.int64),
    "BOOL": (BooleanType(), np.bool_),
    "F8_E5M2": (FloatType(), np.float32),
    "F8_E4M3": (FloatType(), np.float32),
}

TENSOR_STRUCT = StructType(
    [
        StructField("data", BinaryType(), False),
        StructField("shape", ArrayType(IntegerType(), False), False),
        StructField("dtype", StringType(), False),
    ]
)


def key_field(manifest: Manifest) -> str:
    """The column of a KV dataset's rows that holds the keys."""
    return manifest.name_col or "key"


def spark_type(dtype: str, shape: Sequence[int]) -> DataType:
    if dtype not in SPARK_TYPES:
        raise UnsupportedError(
            f"{dtype} tensors cannot be read as Spark columns; the reader handles "
            f"{', '.join(SPARK_TYPES)} (layout=files reads any dtype as bytes)"
        )
    element: DataType = SPARK_TYPES[dtype][0]
    for _ in shape:
        element = ArrayType(element, False)
    return element


def row_schema(manifest: Manifest) -> StructType:
    ds_schema = manifest.sample_schema()
    fields = []
    if manifest.mode == "kv":
        fields.append(StructField(key_field(manifest), StringType(), False))
    for col, info in ds_schema.items():
        fields.append(StructField(col, spark_type(info["dtype"], info["shape"]), True))
    return StructType(fields)
