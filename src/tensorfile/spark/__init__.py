"""The PySpark data source (format name ``safetensors``): see :mod:`.datasource`.

Only this package imports pyspark; install it with ``pip install tensorfile[spark]``.
"""

from .datasource import SafetensorsDataSource

__all__ = ["SafetensorsDataSource"]
