"""The core of tensorfile: what every format, source and consumer shares.

Errors (:mod:`.errors`), the dtype table (:mod:`.dtypes`), the format-neutral catalog
(:mod:`.catalog`), the Source protocol (:mod:`.source`), the Reader and its slicing and
helpers (:mod:`.reader`), bit-packing of sub-byte dtypes (:mod:`.dtypes`), parallel transfers (:mod:`.parallel`) and atomic
writes (:mod:`.atomic`). Nothing here imports any other part of tensorfile.
"""
