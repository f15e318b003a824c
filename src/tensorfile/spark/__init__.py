"""The PySpark data source (format name ``safetensors``): see :mod:`.datasource`.

Only this package imports pyspark; install it with ``pip install tensorfile[spark]``.
:func:`configure` makes Spark's Python workers run an interpreter that has tensorfile
(:mod:`.workers`, :mod:`.session`).
"""

from .datasource import SafetensorsDataSource
from .session import configure

__all__ = ["SafetensorsDataSource", "configure"]
