"""The core of tensorfile: what every format, source and consumer shares.

Errors (:mod:`.errors`), the dtype table and the bit-packing of sub-byte dtypes
(:mod:`.dtypes`), the format-neutral catalog (:mod:`.catalog`), the Source protocol
(:mod:`.source`), the Reader and its slicing helpers (:mod:`.reader`), parallel transfers
(:mod:`.parallel`), atomic writes (:mod:`.atomic`) and the optional packages' messages
(:mod:`.extras`). Nothing here imports any other part of tensorfile.
"""
